"""experiment_table's statistics and agreement marks on a synthetic runs frame, the rows of other papers'
methods it quotes (Table 2), and the files write_table writes (the HTML page: the report's)."""

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from gpstudy.data import load_split
from gpstudy.report.results import read_runs
from gpstudy.report.tables import experiment_table, mean_and_se, write_table
from gpstudy.runtime.environment import RECORDED
from gpstudy.study import variant_labels

PAPER_ITERATIONS, PAPER_SPLITS = 10000, 20  # Tables 3-4's protocol (appendix B.2)
REPO = Path(__file__).resolve().parents[2]

COLUMNS = ["experiment", "dataset", "method", "M", "split", "rmse", "test_ll", "status"]


@pytest.fixture
def runs() -> pd.DataFrame:
    """Data sets and columns out of the paper's order, a failed run, an extra data set and column."""
    rows = [
        ("uci", "wine_white", "svgp", 50, 0, 0.6, -1.0, "ok"),
        ("uci", "wine_white", "svgp", 50, 1, 0.7, -1.1, "ok"),
        ("uci", "concrete", "svgp", 100, 0, 5.768, -3.0, "ok"),  # a single split: no standard error
        *(("uci", "boston", "gpnet", 100, split, 10.0 + split, -2.0, "ok") for split in range(3)),
        *(("uci", "boston", "svgp", 100, split, 1.0 + split, -2.0, "ok") for split in range(3)),
        ("uci", "boston", "svgp", 100, 3, np.nan, np.nan, "failed: diverged"),
        ("snelson", "snelson", "svgp", 20, 0, 0.3, -0.5, "ok"),  # another experiment: left out
    ]
    return pd.DataFrame(rows, columns=COLUMNS).assign(iterations=PAPER_ITERATIONS)


def uci_runs(iterations: int, splits: int, sizes: dict[str, tuple[int, int, int]]) -> pd.DataFrame:
    """SVGP 100 runs of data sets ``sizes`` (n_train, n_test, D) over ``splits`` splits of ``iterations``."""
    rows = [
        ("uci", dataset, "svgp", 100, split, n_train, n_test, d, 3.0 + split, -2.5, iterations, "ok")
        for dataset, (n_train, n_test, d) in sizes.items()
        for split in range(splits)
    ]
    columns = [*COLUMNS[:5], "n_train", "n_test", "D", "rmse", "test_ll", "iterations", "status"]
    return pd.DataFrame(rows, columns=columns)


def _cell(table: pd.DataFrame, dataset: str, method: str, m: int) -> pd.Series:
    match = table[(table["dataset"] == dataset) & (table["method"] == method) & (table["M"] == m)]
    assert len(match) == 1
    return match.iloc[0]


def test_mean_and_se_over_groups_skip_nan():
    frame = pd.DataFrame({"group": ["a", "a", "a", "a", "b"], "value": [1.0, 2.0, 3.0, np.nan, 4.0]})
    stats = mean_and_se(frame, "value", ["group"]).set_index("group")
    assert stats.loc["a", "mean"] == 2.0
    assert math.isclose(stats.loc["a", "se"], math.sqrt(2 / 3) / math.sqrt(3))  # std(ddof=0) of 1, 2, 3 is sqrt(2/3)
    assert stats.loc["a", "n"] == 3
    assert stats.loc["b", "n"] == 1 and np.isnan(stats.loc["b", "se"])


def test_rows_and_columns_in_the_papers_order_then_extras(runs):
    table = experiment_table(runs, "uci", "rmse")
    assert list(dict.fromkeys(table["dataset"])) == ["boston", "concrete", "wine_white"]
    assert list(dict.fromkeys(zip(table["method"], table["M"]))) == [("svgp", 100), ("gpnet", 100), ("svgp", 50)]
    assert len(table) == 9 and set(table["metric"]) == {"rmse"}


def test_statistics_failures_and_agreement(runs):
    table = experiment_table(runs, "uci", "rmse")
    agreeing = _cell(table, "boston", "svgp", 100)
    assert (agreeing["n"], agreeing["failed"], agreeing["mean"]) == (3, 1, 2.0)
    assert math.isclose(agreeing["se"], math.sqrt(2 / 3) / math.sqrt(3))  # values 1, 2, 3: ddof 0
    assert (agreeing["paper_mean"], agreeing["paper_se"]) == (2.897, 0.132)
    assert agreeing["agrees"]  # |2 - 2.897| = 0.897 <= 2 sqrt(2/9 + 0.132^2) = 0.98
    disagreeing = _cell(table, "boston", "gpnet", 100)
    assert disagreeing["mean"] == 11.0 and not disagreeing["agrees"]
    single = _cell(table, "concrete", "svgp", 100)
    assert single["n"] == 1 and np.isnan(single["se"]) and pd.isna(single["agrees"])
    not_run = _cell(table, "boston", "svgp", 50)
    assert (not_run["n"], not_run["failed"]) == (0, 0) and np.isnan(not_run["mean"]) and pd.isna(not_run["agrees"])
    assert pd.isna(not_run["paper_settings"]) and pd.isna(_cell(table, "wine_white", "svgp", 50)["paper_settings"])


def test_what_a_run_was_made_with_never_splits_a_cell(runs):
    """runs.csv's RECORDED columns (versions, commit, device name) differ from split to split (a study run over
    a library upgrade, a commit made between jobs, an older run without them): the cells are those of the runs
    without them."""
    varied = runs.assign(
        **{column: [f"{column} {row % 3}" if row % 4 else None for row in range(len(runs))] for column in RECORDED}
    )
    pd.testing.assert_frame_equal(experiment_table(varied, "uci", "rmse"), experiment_table(runs, "uci", "rmse"))


def test_write_table_csv_md_tex(runs, tmp_path):
    table = experiment_table(runs, "uci", "rmse")
    write_table(table, tmp_path / "table3")
    csv = pd.read_csv(tmp_path / "table3.csv")
    numbers = ["M", "n", "failed", "mean", "se", "paper_mean", "paper_se"]
    pd.testing.assert_frame_equal(csv[numbers], table[numbers], check_dtype=False)

    markdown = (tmp_path / "table3.md").read_text(encoding="utf-8")
    rows = [line for line in markdown.splitlines() if line.startswith("| ")]
    assert rows[0] == "| Data set | N | D | SVGP 100 | GPNet 100 | SVGP 50 |"
    assert [row.split(" | ")[:3] for row in rows[2:]] == [
        ["| Boston", "— (506)", "— (12)"],
        ["| Concrete", "— (1030)", "— (8)"],
        ["| wine_white", "", ""],
    ]  # runs without sizes: the paper's alone
    # 4 splits, not the paper's 20: the marks in parentheses
    assert "| 2.000 ± 0.471 (2.897 ± 0.132) (✓) | 11.000 ± 0.471 (2.786 ± 0.142) (✗) | — |" in rows[2]
    assert "| 5.768 ± n/a (5.768 ± 0.094) |" in rows[3]
    assert "Failed runs left out (1): Boston SVGP 100: 1." in markdown
    assert (
        "over 1-3 splits (std with ddof 0 over sqrt(n)" in markdown and "✓ / ✗: within / beyond 2 combined" in markdown
    )

    tex = (tmp_path / "table3.tex").read_text(encoding="utf-8")
    assert (
        r"2.000 $\pm$ 0.471 (2.897 $\pm$ 0.132) (\checkmark) & 11.000 $\pm$ 0.471 (2.786 $\pm$ 0.142) ($\times$)" in tex
    )
    assert r"wine\_white &  &  & " in tex
    assert r"\begin{tabular}{lrrlll}" in tex
    assert [line for line in tex.splitlines() if line.endswith(r"\\")][0].startswith("Data set & N & D")
    assert sum(line.endswith(r"\\") for line in tex.splitlines()) == 1 + 3
    assert tex.index(r"\toprule") < tex.index(r"\midrule") < tex.index(r"\bottomrule")


def test_write_table_html_page_has_the_markdown_cells_and_caption(runs, tmp_path, html_table):
    """The report's page: Markdown's cells, the paper's number on a line below ours, the same caption."""
    write_table(experiment_table(runs, "uci", "rmse"), tmp_path / "table3", {"svgp": "SVGP <Hensman>"})
    caption, rows = html_table(tmp_path / "table3.html")
    assert rows[0] == ["Data set", "N", "D", "SVGP <Hensman> 100", "GPNet 100", "SVGP <Hensman> 50"]
    assert rows[1] == [
        "Boston",
        "— (506)",
        "— (12)",
        "2.000 ± 0.471\n(2.897 ± 0.132) (✓)",
        "11.000 ± 0.471\n(2.786 ± 0.142) (✗)",
        "—",
    ]
    assert rows[2][3] == "5.768 ± n/a\n(5.768 ± 0.094)" and rows[3][:3] == ["wine_white", "", ""]
    markdown = (tmp_path / "table3.md").read_text(encoding="utf-8")
    assert [f"| {' | '.join(cell.replace(chr(10), ' ') for cell in row)} |" for row in rows] == [
        line for line in markdown.splitlines() if line.startswith("| ") and "---" not in line
    ]
    assert caption == markdown.split("\n\n")[0]
    assert "Failed runs left out (1): Boston SVGP <Hensman> 100: 1." in caption


def test_airline_columns_follow_table_1_with_its_values_beside():
    cells = [("fbnn", 500), ("svgp", 100), ("fbnn", 100), ("gpnet", 500), ("svgp", 500), ("gpnet", 100)]
    runs = pd.DataFrame(
        [("airline", "airline", method, m, 0, 24.0, -4.6, "ok") for method, m in cells], columns=COLUMNS
    ).assign(iterations=PAPER_ITERATIONS)
    table = experiment_table(runs, "airline", "rmse")
    assert list(zip(table["method"], table["M"])) == [
        (method, m) for m in (100, 500) for method in ("svgp", "gpnet", "fbnn")
    ]
    assert list(table["paper_mean"]) == [24.261, 24.055, 23.801, 23.698, 23.675, 24.114]
    assert table["agrees"].isna().all()  # the paper prints no standard errors
    assert table["paper_settings"].all()  # one draw of 10K iterations, as Table 1's


QUOTED = [
    "SVGP, RBF-ARD (Krauth et al., 2016)",
    "Conv GP (van der Wilk et al., 2017)",
    "NN-GP (Lee et al., 2018)",
    "CNN-GP (Garriga-Alonso et al., 2019)",
    "ResNet-GP (Garriga-Alonso et al., 2019)",
    "CNN-GP (Novak et al., 2019)",
]  # Table 2's rows of other papers' methods, in the paper's order


@pytest.fixture
def classification_runs() -> pd.DataFrame:
    rows = [
        ("classification", dataset, method, m, 0, np.nan, -0.1, "ok", error)
        for dataset, method, m, error in (
            ("mnist", "gpnet", 64, 0.0123),
            ("mnist", "svgp", 1000, 0.03),
            ("cifar10", "gpnet", 64, 0.3),
        )
    ]
    return pd.DataFrame(rows, columns=[*COLUMNS, "error_rate"]).assign(iterations=PAPER_ITERATIONS)


def test_quoted_rows_follow_ours_with_the_papers_numbers_alone(classification_runs):
    table = experiment_table(classification_runs, "classification", "error_rate", quoted="table2")
    ours, quoted = table[table["quoted_from"] == ""], table[table["quoted_from"] != ""]
    assert len(ours) == 4 and set(quoted["quoted_from"]) == {"the GPNet paper's Table 2"}
    assert list(table.index[table["quoted_from"] != ""]) == list(range(4, 16))  # after ours
    mnist = quoted[quoted["dataset"] == "mnist"]
    assert list(mnist["method"]) == QUOTED
    assert list(mnist["paper_mean"]) == [0.0155, 0.0122, 0.0121, 0.0096, 0.0084, 0.0088]
    cifar = quoted[quoted["dataset"] == "cifar10"].set_index("method")["paper_mean"]
    assert cifar.isna().tolist() == [True, False, False, True, True, False] and cifar[QUOTED[1]] == 0.354
    assert quoted["M"].isna().all() and quoted["mean"].isna().all() and quoted["agrees"].isna().all()
    assert (quoted["n"] == 0).all() and (quoted["failed"] == 0).all()
    assert _cell(table, "mnist", "gpnet", 64)["paper_mean"] == 0.0112  # ours keep the paper's value beside them


def test_quoted_rows_only_where_the_metric_is_the_tables(classification_runs, tmp_path):
    """Table 2 holds error rates: the test log-likelihood table is written as if nothing were quoted."""
    for name, quoted in (("with", "table2"), ("without", None)):
        write_table(experiment_table(classification_runs, "classification", "test_ll", quoted=quoted), tmp_path / name)
    for suffix in (".csv", ".md", ".tex"):
        assert (tmp_path / f"with{suffix}").read_bytes() == (tmp_path / f"without{suffix}").read_bytes()
    assert "quoted" not in (tmp_path / "with.csv").read_text()


def test_write_table_marks_quoted_columns_in_md_tex_csv(classification_runs, tmp_path):
    write_table(experiment_table(classification_runs, "classification", "error_rate", quoted="table2"), tmp_path / "t2")
    csv = pd.read_csv(tmp_path / "t2.csv", keep_default_na=False)
    assert list(csv.columns)[-1] == "quoted_from"
    assert list(csv.loc[csv["quoted_from"] != "", "method"][:6]) == QUOTED
    assert set(csv.loc[csv["quoted_from"] != "", "M"]) == {""}  # no M: not ours

    markdown = (tmp_path / "t2.md").read_text(encoding="utf-8")
    rows = [line for line in markdown.splitlines() if line.startswith("| ")]
    assert rows[0] == (
        "| Data set | N | D | SVGP 1000 | GPNet 64 | " + " | ".join(f"{name} (quoted)" for name in QUOTED) + " |"
    )
    assert [row.split(" | ")[0] for row in rows[2:]] == ["| MNIST", "| CIFAR10"]  # Table 2's columns, left to right
    mnist = next(row for row in rows if row.startswith("| MNIST"))
    assert mnist.endswith(
        "| 0.0300 ± n/a (0.0240 ± n/a) | 0.0123 ± n/a (0.0112 ± n/a) | 0.0155 | 0.0122 | 0.0121 | "
        "0.0096 | 0.0084 | 0.0088 |"
    )
    cifar = next(row for row in rows if row.startswith("| CIFAR10"))
    assert cifar.endswith("| — | 0.3000 ± n/a (0.2463 ± n/a) | — | 0.3540 | 0.4434 | — | — | 0.3286 |")
    assert "Columns marked quoted: numbers of other papers' methods from the GPNet paper's Table 2" in markdown

    tex = (tmp_path / "t2.tex").read_text(encoding="utf-8")
    assert r"\begin{tabular}{lrr" + "l" * 8 + "}" in tex
    assert " & ".join(f"{name} (quoted)" for name in QUOTED) + r" \\" in tex
    assert r"& -- & 0.3540 & 0.4434 & -- & -- & 0.3286 \\" in tex
    assert "Columns marked quoted" in tex


def test_a_cell_whose_runs_used_fewer_points_than_m_is_marked(tmp_path):
    """Boston's 455 training points cap SVGP 500 at 455 inducing points; Concrete's 927 do not."""
    rows = [
        ("uci", dataset, "svgp", 500, split, used, 3.0 + split, -2.5, "ok")
        for dataset, used in (("boston", 455), ("concrete", 500))
        for split in range(2)
    ]
    rows.append(("uci", "boston", "svgp", 100, 0, np.nan, 3.0, -2.5, "ok"))  # an older runs.csv's: as M
    runs = pd.DataFrame(rows, columns=[*COLUMNS[:5], "M_effective", *COLUMNS[5:]]).assign(iterations=PAPER_ITERATIONS)
    table = experiment_table(runs, "uci", "rmse")
    assert (
        _cell(table, "boston", "svgp", 500)["M_effective"],
        _cell(table, "concrete", "svgp", 500)["M_effective"],
        _cell(table, "boston", "svgp", 100)["M_effective"],
    ) == (455, 500, 100)
    write_table(table, tmp_path / "t")
    csv = pd.read_csv(tmp_path / "t.csv")
    assert csv["M_effective"].fillna(0).tolist() == [100, 455, 0, 500]  # Concrete SVGP 100: not run
    markdown = (tmp_path / "t.md").read_text(encoding="utf-8")
    boston, concrete = (
        next(row for row in markdown.splitlines() if row.startswith(f"| {name} ")) for name in ("Boston", "Concrete")
    )
    assert "| 3.500 ± 0.354† (" in boston and "| 3.000 ± n/a (" in boston and "†" not in concrete
    assert "†: fewer points than M, as many as the training set holds (Boston SVGP 500: 455)." in markdown
    tex = (tmp_path / "t.tex").read_text(encoding="utf-8")
    assert r"3.500 $\pm$ 0.354$^\dagger$ (" in tex and tex.count(r"$^\dagger$") == 2  # the cell and the caption


HOT_STUDY = {  # one split of Boston: SVGP as configured, and GPNet at a learning rate of 100
    "datasets": ["boston"],
    "splits": 1,
    "device": "cpu",
    "training": {"iterations": 100, "lr": 0.01, "eval_every": 50, "pretrain_iterations": 100},
    "methods": {"gpnet": {"hidden_units": 20}},
    "variants": {"gpnet_hot": {"method": "gpnet", "lr": 100, "label": "GPNet lr 100"}},
    "experiments": {
        "hot": {"datasets": ["boston"], "outputs": ["tables"], "methods": {"svgp": [10], "gpnet_hot": [5]}}
    },
    "run_experiments": ["hot"],
}


def test_a_run_worse_than_the_training_mean_is_flagged_in_runs_csv_and_marked_in_the_tables(tmp_path, shared_data):
    """Issue 49: training.lr 100 gave finite garbage reported as ok (GPNet's RMSE in the thousands where y's std
    is 9). Through Snakemake: the row stays ok, runs.csv says it is worse than predicting y's training mean (whose
    test RMSE it holds), and its cell is marked in every rendering of the table, the mark said in the caption."""
    (tmp_path / "hot.yaml").write_text(yaml.safe_dump({**HOT_STUDY, "mirror": str(shared_data)}))
    targets = ["results/runs.csv", "results/tables/hot_rmse.md"]
    command = [str(Path(sys.executable).with_name("snakemake")), "-s", str(REPO / "Snakefile"), "--cores", "2"]
    run = subprocess.run(
        [*command, *targets, "--directory", str(tmp_path / "work"), "--configfile", str(tmp_path / "hot.yaml")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    runs = read_runs(tmp_path / "work/results/runs.csv").set_index("method")
    split = load_split(tmp_path / "work/data/splits/boston/random/split0.npz")
    y_train, y_test = split.original_y(split.y_train), split.original_y(split.y_test)
    baseline = np.sqrt(np.mean((y_test - y_train.mean()) ** 2))
    assert 0.5 < baseline / y_train.std() < 2  # about y's std: in y's units, as rmse is
    assert runs["rmse_of_mean"].tolist() == [pytest.approx(baseline, rel=1e-12)] * 2
    assert runs.loc["gpnet_hot", "rmse"] > 10 * baseline and runs.loc["svgp", "rmse"] < 0.8 * baseline
    assert runs["worse_than_mean"].to_dict() == {"gpnet_hot": True, "svgp": False}
    assert (runs["status"] == "ok").all()
    tables = tmp_path / "work/results/tables"
    assert pd.read_csv(tables / "hot_rmse.csv").set_index("method")["worse_than_mean"].to_dict() == {
        "gpnet_hot": 1,
        "svgp": 0,
    }
    markdown = (tables / "hot_rmse.md").read_text(encoding="utf-8")
    header, _, boston = ([cell.strip() for cell in line.strip("|").split("|")] for line in markdown.splitlines()[-3:])
    cells = dict(zip(header[3:], boston[3:]))
    assert cells["GPNet lr 100 5"].endswith("‡") and "‡" not in cells["SVGP 10"]
    legend = "‡: runs whose test RMSE is worse than predicting y's training mean at every test point"
    assert legend in markdown and "(Boston GPNet lr 100 5: 1 of 1)." in markdown
    tex = (tables / "hot_rmse.tex").read_text(encoding="utf-8")
    assert tex.count(r"$^\ddagger$") == 2  # the cell and the caption
    assert (tables / "hot_rmse.html").read_text(encoding="utf-8").count("‡") == 2


def _markdown_of(runs: pd.DataFrame, tmp_path) -> str:
    write_table(experiment_table(runs, "uci", "rmse"), tmp_path / "t")
    return (tmp_path / "t.md").read_text(encoding="utf-8")


def test_short_runs_are_named_in_the_caption_and_their_marks_parenthesized(tmp_path):
    """A quick study (200 iterations, 2 splits): a mark says how the short run compares, not a failed reproduction."""
    table = experiment_table(uci_runs(200, 2, {"boston": (455, 51, 13)}), "uci", "rmse")
    assert not table["paper_settings"].any() and table["iterations"].tolist() == [200]
    write_table(table, tmp_path / "t")
    markdown = (tmp_path / "t.md").read_text(encoding="utf-8")
    assert (
        "Not the paper's settings: 200 iterations and 2 splits, not the paper's 10000 and 20; their marks, in "
        "parentheses, still compare"
    ) in markdown
    assert "not from a failed reproduction" in markdown
    assert "| 3.500 ± 0.354 (2.897 ± 0.132) (✓) |" in markdown
    tex = (tmp_path / "t.tex").read_text(encoding="utf-8")
    assert r"(2.897 $\pm$ 0.132) (\checkmark)" in tex and r"a ($\times$) there" in tex


def test_runs_at_the_papers_settings_have_no_such_caption(tmp_path):
    table = experiment_table(uci_runs(PAPER_ITERATIONS, PAPER_SPLITS, {"boston": (455, 51, 13)}), "uci", "rmse")
    assert table["paper_settings"].all()
    markdown = _markdown_of(uci_runs(PAPER_ITERATIONS, PAPER_SPLITS, {"boston": (455, 51, 13)}), tmp_path)
    assert "Not the paper's settings" not in markdown and "(✓)" not in markdown and "(✗)" not in markdown


def test_a_failed_split_still_counts_as_run_and_only_off_cells_are_named(tmp_path):
    """20 splits with one diverged are the paper's protocol; one data set's short runs are named alone."""
    runs = uci_runs(PAPER_ITERATIONS, PAPER_SPLITS, {"boston": (455, 51, 13), "concrete": (927, 103, 8)})
    runs.loc[(runs["dataset"] == "boston") & (runs["split"] == 0), ["rmse", "status"]] = (np.nan, "failed: diverged")
    runs.loc[(runs["dataset"] == "concrete") & (runs["split"] == 1), "iterations"] = 5000
    table = experiment_table(runs, "uci", "rmse")
    assert _cell(table, "boston", "svgp", 100)["paper_settings"]
    assert not _cell(table, "concrete", "svgp", 100)["paper_settings"]
    markdown = _markdown_of(runs, tmp_path)
    assert (
        "Not the paper's settings (Concrete SVGP 100): 5000 iterations and 20 splits, not the paper's 10000 and 20"
    ) in markdown


def test_n_and_d_are_our_runs_with_the_papers_beside_where_they_differ(tmp_path):
    """Boston has 13 inputs, the paper prints D = 12; Concrete's agree; our N and D come from the runs."""
    runs = uci_runs(200, 2, {"boston": (455, 51, 13), "concrete": (927, 103, 8), "yacht": (277, 31, 6)})
    table = experiment_table(runs, "uci", "rmse")
    boston = _cell(table, "boston", "svgp", 100)
    assert (boston["N"], boston["D"], boston["paper_N"], boston["paper_D"]) == (506, 13, 506, 12)
    rows = [line.split(" | ")[:3] for line in _markdown_of(runs, tmp_path).splitlines() if line.startswith("| ")]
    assert rows[2:] == [["| Boston", "506", "13 (12)"], ["| Concrete", "1030", "8"], ["| yacht", "308", "6"]]
    dropped = uci_runs(200, 2, {"boston": (455, 51, 12)})  # drop_features: [12]
    assert [
        line.split(" | ")[:3] for line in _markdown_of(dropped, tmp_path).splitlines() if line.startswith("| Boston")
    ] == [["| Boston", "506", "12"]]


def _classification_markdown(runs: pd.DataFrame, tmp_path) -> list[str]:
    """The Markdown lines of the error-rate table of ``runs`` (Table 2's quoted rows beside)."""
    write_table(experiment_table(runs, "classification", "error_rate", quoted="table2"), tmp_path / "t2")
    return (tmp_path / "t2.md").read_text(encoding="utf-8").splitlines()


def test_classification_rows_follow_table_2_with_our_sizes_and_the_papers(classification_runs, tmp_path):
    """MNIST before CIFAR10 as Table 2's columns (not alphabetically); N and D of our runs (the quick
    study's 1000 + 1000 images) beside the standard sets' (60000 + 10000 and 784; 50000 + 10000 and 3072)."""
    sized = classification_runs.assign(n_train=1000, n_test=1000, D=[784, 784, 3072])
    table = experiment_table(sized, "classification", "error_rate")
    assert list(dict.fromkeys(table["dataset"])) == ["mnist", "cifar10"]
    mnist = _cell(table, "mnist", "gpnet", 64)
    assert (mnist["N"], mnist["D"], mnist["paper_N"], mnist["paper_D"]) == (2000, 784, 70000, 784)
    rows = [line.split(" | ")[:3] for line in _classification_markdown(sized, tmp_path) if line.startswith("| ")]
    assert rows[2:] == [["| MNIST", "2000 (70000)", "784"], ["| CIFAR10", "2000 (60000)", "3072"]]
    older = [
        line.split(" | ")[:3]
        for line in _classification_markdown(classification_runs, tmp_path)
        if line.startswith("| ")
    ]  # a runs.csv without the sizes: the paper's alone
    assert older[2:] == [["| MNIST", "— (70000)", "— (784)"], ["| CIFAR10", "— (60000)", "— (3072)"]]


def test_a_caption_over_one_split_says_so_and_why_there_is_no_standard_error(classification_runs, tmp_path):
    caption = _classification_markdown(classification_runs, tmp_path)[0]
    assert "standard error over one split (std with ddof 0" in caption and "1 splits" not in caption
    assert "± n/a: no standard error, ours from a single run (one split) and the paper prints none." in caption
    two = pd.concat([classification_runs, classification_runs.assign(split=1)], ignore_index=True)
    caption = _classification_markdown(two, tmp_path)[0]
    assert "over 2 splits" in caption and "± n/a: no standard error, the paper prints none." in caption


def test_a_variant_is_shown_by_the_label_the_config_gives_it(tmp_path):
    config = yaml.safe_load((Path(__file__).resolve().parents[2] / "config.yaml").read_text())
    assert set(variant_labels(config)) == set(config["variants"])  # every variant of the study names itself
    runs = uci_runs(200, 2, {"boston": (455, 51, 13)}).assign(method="orthnat")
    write_table(experiment_table(runs, "uci", "rmse"), tmp_path / "t", variant_labels(config))
    assert "| ORTHNAT 100 |" in (tmp_path / "t.md").read_text(encoding="utf-8")
    write_table(experiment_table(runs, "uci", "rmse"), tmp_path / "t", {"orthnat": "Natural ORTH"})
    assert "| Natural ORTH 100 |" in (tmp_path / "t.md").read_text(encoding="utf-8")


def test_no_papers_numbers_beside_a_data_set_whose_files_are_not_the_registrys(runs, classification_runs, tmp_path):
    """A user CSV called boston: the tables printed the paper's Boston N, D and values beside it."""
    table = experiment_table(runs, "uci", "rmse", own_data=["boston"])
    boston, concrete = _cell(table, "boston", "svgp", 100), _cell(table, "concrete", "svgp", 100)
    assert boston[["paper_mean", "paper_se", "agrees", "paper_settings", "paper_N", "paper_D"]].isna().all()
    assert boston["mean"] == 2.0 and concrete["paper_mean"] > 0 and concrete["paper_N"] == 1030
    write_table(table, tmp_path / "t")
    boston_rows = [line for line in (tmp_path / "t.md").read_text().splitlines() if line.startswith("| Boston")]
    assert boston_rows and not any("(" in line for line in boston_rows), boston_rows  # no (paper value) in a cell
    quoted = experiment_table(classification_runs, "classification", "error_rate", quoted="table2", own_data=["mnist"])
    assert set(quoted.loc[quoted["quoted_from"] != "", "dataset"]) == {"cifar10"}


def test_own_data_are_the_data_sets_whose_files_are_not_the_registrys(study_config):
    from gpstudy.study import own_data

    own = {"source": {"file": "mine.csv", "sha256": "0" * 64}, "format": "csv", "target": -1, "task": "regression"}
    config = {
        **study_config,
        "datasets": ["boston", "mine", "airline"],
        "dataset_options": {**study_config["dataset_options"], "mine": own},
        "experiments": {"uci": {"datasets": ["boston", "mine", "airline"], "methods": {"svgp": [5]}}},
    }
    assert own_data(config, "uci") == ["mine"]  # airline: registry files without a trusted hash
