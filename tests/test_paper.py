"""paper_results.yaml against the paper's Tables 1-4 and STUDY.md's PBP numbers, parsed from their text."""

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpstudy.paper import (
    METRICS,
    airline_table,
    classification_numbers,
    paper_columns,
    paper_datasets,
    paper_table,
    pbp_table,
    quoted_rows,
    quoted_tables,
    table_datasets,
)

SHARED = Path(__file__).resolve().parents[1].parent / "shared"  # the study's documents beside the repo
PAPER = SHARED / "papers" / "gpnet-full-with-appendix.txt"
STUDY = SHARED / "STUDY.md"
TITLES = {"rmse": "Table 3: Regression: RMSE.", "test_ll": "Table 4: Regression: Test log likelihood."}
NUMBER = r"(-?\d+\.\d+)"
CELL = re.compile(NUMBER + re.escape(r"±plus-or-minus\pm") + NUMBER)  # how the text renders "2.897 ± 0.132"
ROW = re.compile(r"(\w+) (\d+) (\d+) (.*)")
HEADER_COLUMN = re.compile(r"(\w+), (\d+)")
AIRLINE_TITLE = "Table 1: Large-scale regression on the airline dataset."
AIRLINE_ROWS = {"RMSE": "rmse", "Test LL": "test_ll"}  # the row names of Table 1
TABLE_2 = "Table 2: Image classification: Test error rates."
PBP = re.compile(r"(\w+) " + NUMBER + r"\+-" + NUMBER + " / " + NUMBER + r"\+-" + NUMBER)


def _read(path: Path) -> str:
    if not path.is_file():
        pytest.skip(f"the study's documents are not at {path}")
    return path.read_text(encoding="utf-8")


def _paper_table_text(metric: str) -> tuple[str, list[str]]:
    """The header line and the data set rows of Table 3 or 4 in the paper's text."""
    lines = [line.strip() for line in _read(PAPER).splitlines()]
    start = lines.index(TITLES[metric]) + 1
    body = [line for line in lines[start : start + 10] if line]
    header, rows = body[0], []
    for line in body[1:]:
        if not (ROW.fullmatch(line) and len(CELL.findall(line)) == len(paper_columns())):
            break
        rows.append(line)
    return header, rows


def _key(name: str) -> str:
    """Our data set key for the paper's row name."""
    return dict(zip(paper_datasets()["name"], paper_datasets()["dataset"]))[name]


@pytest.mark.parametrize("metric", METRICS)
def test_columns_are_the_papers(metric):
    header, _ = _paper_table_text(metric)
    assert header.startswith("Data set N D ")
    assert [(method.lower(), int(m)) for method, m in HEADER_COLUMN.findall(header)] == paper_columns()


@pytest.mark.parametrize("metric", METRICS)
def test_every_cell_and_size_is_the_papers(metric):
    _, rows = _paper_table_text(metric)
    expected_cells, expected_sizes = [], []
    for row in rows:
        name, n, d, cells = ROW.fullmatch(row).groups()
        expected_sizes.append((_key(name), name, int(n), int(d)))
        expected_cells += [
            (_key(name), method, m, float(mean), float(se))
            for (method, m), (mean, se) in zip(paper_columns(), CELL.findall(cells))
        ]
    assert len(rows) == 7
    assert list(paper_datasets().itertuples(index=False, name=None)) == expected_sizes
    table = paper_table(metric)
    uci = table[table["dataset"].isin(paper_datasets()["dataset"])]
    assert list(uci.itertuples(index=False, name=None)) == expected_cells


def _airline_table_text() -> list[str]:
    """The four lines after Table 1's title: the M header, the method header, the RMSE and Test LL rows."""
    lines = [line.strip() for line in _read(PAPER).splitlines()]
    start = lines.index(AIRLINE_TITLE) + 1
    return [line for line in lines[start : start + 6] if line][:4]


def test_every_airline_number_is_table_1s():
    m_header, method_header, *rows = _airline_table_text()
    sizes = [int(m) for m in re.fullmatch(r"Metric M=(\d+) M=(\d+)", m_header).groups()]
    methods = method_header.split()
    per_m = len(methods) // len(sizes)
    columns = [(method.lower(), sizes[i // per_m]) for i, method in enumerate(methods)]
    expected = []
    for row in rows:
        name, cells = re.fullmatch(r"(RMSE|Test LL) (.*)", row).groups()
        values = [float(value) for value in re.findall(NUMBER, cells)]
        assert len(values) == len(columns) == 6
        expected += [("airline", method, m, AIRLINE_ROWS[name], value) for (method, m), value in zip(columns, values)]
    assert [metric for *_, metric, _ in expected] == ["rmse"] * 6 + ["test_ll"] * 6
    table = airline_table()
    assert list(table[["dataset", "method", "M", "metric", "mean"]].itertuples(index=False, name=None)) == expected
    assert table["se"].isna().all()  # one random draw: the paper prints no standard errors
    for metric in METRICS:  # served with the other tables' numbers, under the data set's key
        served = paper_table(metric).query("dataset == 'airline'")
        assert list(served[["dataset", "method", "M", "mean"]].itertuples(index=False, name=None)) == [
            (dataset, method, m, value) for dataset, method, m, row_metric, value in expected if row_metric == metric
        ]
        assert served["se"].isna().all()


def test_pbp_is_studys_list():
    text = _read(STUDY)
    found = PBP.findall(text[text.index("PBP (Hernandez-Lobato") :])
    assert len(found) == 7
    for metric, (mean_at, se_at) in zip(METRICS, ((1, 2), (3, 4))):
        expected = [(_key(match[0]), float(match[mean_at]), float(match[se_at])) for match in found]
        assert list(pbp_table(metric).itertuples(index=False, name=None)) == expected


@pytest.mark.parametrize(
    "cell", classification_numbers(), ids=lambda cell: f"{cell['method']}{cell['M']}-{cell['metric']}"
)
def test_every_classification_number_is_the_papers_sentence(cell):
    text = " ".join(_read(SHARED / "papers" / cell["paper"]).split())
    assert cell["quote"] in text
    printed = float(re.findall(r"(\d+\.\d+)%?", cell["quote"])[-1])
    expected = printed / 100 if cell["metric"] == "error_rate" else -printed  # a percentage; NLP = -test_ll
    assert cell["value"] == pytest.approx(expected, abs=1e-12)
    served = paper_table(cell["metric"]).query(
        "dataset == @cell['dataset'] and method == @cell['method'] and M == @cell['M']"
    )
    assert served["mean"].item() == cell["value"]


def _table_2_header() -> str:
    """The data set names heading Table 2's columns, as printed."""
    lines = [" ".join(line.split()) for line in _read(PAPER).splitlines()]
    return lines[lines.index(TABLE_2) + 1].removeprefix("Methods ")


def _table_2_rows() -> list[str]:
    """Table 2's rows as printed (white space normalized), after its title and header line."""
    lines = [" ".join(line.split()) for line in _read(PAPER).splitlines()]
    start = lines.index(TABLE_2)
    assert lines[start + 1] == "Methods MNIST CIFAR10"
    end = lines.index("", start)
    return lines[start + 2 : end]


def test_table_2_is_our_rows_and_the_quoted_rows_in_the_papers_order():
    """Every row of Table 2 is quoted (the rows of other papers' methods, in order, with their numbers) or
    ours (a classification number whose quote starts the row)."""
    table = quoted_tables()["table2"]
    assert (table["paper"], table["metric"], table["datasets"]) == (PAPER.name, "error_rate", ["mnist", "cifar10"])
    ours = [cell["quote"] for cell in classification_numbers() if cell["paper"] == PAPER.name]
    rows = _table_2_rows()
    assert len(rows) == 8
    quoted = [row for row in rows if not any(row.startswith(quote) for quote in ours)]
    assert quoted == [row["quote"] for row in table["rows"]]
    for row in table["rows"]:
        assert row["quote"] == f"{row['method']} " + " ".join(
            "-" if value is None else f"{100 * value:g}%" for value in row["values"]
        )
    expected = pd.DataFrame(
        [
            (dataset, row["method"], np.nan if value is None else value)
            for row in table["rows"]
            for dataset, value in zip(table["datasets"], row["values"])
        ],
        columns=["dataset", "method", "value"],
    )
    pd.testing.assert_frame_equal(quoted_rows("table2", "error_rate"), expected)
    assert len(expected) == 12 and expected["value"].isna().sum() == 3  # three "-" on CIFAR10
    assert quoted_rows("table2", "test_ll").empty


def test_table_datasets_are_the_papers_tables_in_its_order_with_their_sizes():
    """Table 1's airline (700K + 100K flights), Table 2's columns left to right (the sizes the AutoGP paper's
    Table 2 prints, but MNIST's 28 x 28 = 784 pixels for its 768), then Tables 3-4's rows."""
    table = table_datasets()
    assert list(table["dataset"]) == ["airline", "mnist", "cifar10", *paper_datasets()["dataset"]]
    assert list(table["dataset"][1:3]) == quoted_tables()["table2"]["datasets"]
    assert [tuple(row) for row in table.iloc[3:].itertuples(index=False)] == list(
        paper_datasets().itertuples(index=False, name=None)
    )
    assert "we randomly take 700K points for training and 100K for testing" in " ".join(_read(PAPER).split())
    assert table["N"].iat[0] == 700_000 + 100_000 and pd.isna(table["D"].iat[0])
    assert " ".join(table["name"][1:3]) == _table_2_header()
    printed = {
        row.split("\t")[0]: row.split("\t")[1:4]
        for row in _read(SHARED / "papers" / "autogp.txt").splitlines()
        if row.startswith(("MNIST\t", "CIFAR10\t"))
    }
    for name, n, d in table.iloc[1:3][["name", "N", "D"]].itertuples(index=False):
        n_train, n_test, d_printed = (int(value.replace(",", "")) for value in printed[name])
        assert n == n_train + n_test
        assert d == d_printed or (name, d_printed, d) == ("MNIST", 768, 28 * 28)


def test_unknown_metric_is_refused():
    with pytest.raises(ValueError, match="unknown metric"):
        paper_table("mae")


def test_the_arc_cosine_variant_has_the_autogp_papers_depth_and_degree(study_config):
    """AutoGP section 5: "3 layers and a degree of 1 worked best ... we ran all ARC-COSINE experiments
    with these settings"."""
    text = " ".join(_read(SHARED / "papers" / "autogp.txt").split())
    assert "found that 3 layers and a degree of 1 worked best with AutoGP" in text
    assert study_config["variants"]["autogp_arccos"]["kernel_options"] == {"degree": 1, "depth": 3}
