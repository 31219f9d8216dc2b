"""results/claims.md, .csv and .html from a study's files, as rule claims writes them: the package's claims on a
small Snelson study (posteriors planted) and UCI runs of one column, the rest of the claims not run."""

import json

import numpy as np
import pandas as pd
import pytest

from gpstudy import paths
from gpstudy.data.split import Split, save_split
from gpstudy.io import write_csv
from gpstudy.report.claims import FAIL, NOT_RUN, PASS, evaluate_claims, load_claims, read_evidence, write_claims
from gpstudy.report.claims.evidence import cell_key
from gpstudy.report.claims.report import ABOUT, COLUMNS, claim_verdict
from gpstudy.report.results import RUN_COLUMNS

GRID = np.linspace(-3.0, 10.0, 131)
X_TRAIN = np.linspace(0.0, 6.0, 61)
ON_DATA = (GRID >= 0) & (GRID <= 6)
SIZES = (2, 5, 20)
FITS = {  # (method, M) -> the mean's shift in exact sds of y, the sds' scale, the latent sd's scale on the data
    ("svgp", 2): (0.9, 1.3, 1.0),
    ("svgp", 5): (0.4, 1.1, 1.0),
    ("svgp", 20): (0.02, 1.01, 1.0),
    ("gpnet", 2): (0.3, 1.05, 1.0),
    ("gpnet", 5): (0.2, 1.05, 1.0),
    ("gpnet", 20): (0.05, 1.02, 1.1),
    ("fbnn", 2): (0.3, 1.2, 2.0),
    ("fbnn", 5): (0.3, 1.2, 2.0),
    ("fbnn", 20): (0.3, 1.2, 2.0),
}


@pytest.fixture
def study(tmp_path):
    """The files of a small finished study: Snelson's runs, predictions, split and exact GP, and SVGP 100
    on two UCI sets over 20 splits."""
    var_f = np.where(ON_DATA, 0.01, 1.0)
    reference = pd.DataFrame({"x": GRID, "mean": np.sin(GRID), "var_f": var_f, "var_y": var_f + 0.1})
    write_csv(tmp_path / "reference.csv", reference)
    split = Split(
        X_TRAIN[:, None],
        np.sin(X_TRAIN),
        X_TRAIN[:5, None],
        np.sin(X_TRAIN[:5]),
        np.zeros(1),
        np.ones(1),
        0.0,
        1.0,
        {},
        GRID[:, None],
    )
    save_split(tmp_path / "split0.npz", split)
    rows, run_files = [], []
    for (method, M), (shift, scale, latent) in FITS.items():
        labels = {"experiment": "snelson", "dataset": "snelson", "method": method, "M": M, "split": 0}
        folder = tmp_path / paths.BATCH.format(**labels, splits="0-0") / "split0"
        folder.mkdir(parents=True)
        (folder / "metrics.json").write_text(json.dumps({**labels, "status": "ok"}))
        write_csv(
            folder / "predictions.csv",
            pd.DataFrame(
                {
                    "x": GRID,
                    "mean": reference["mean"] + shift * np.sqrt(reference["var_y"]),
                    "var_f": var_f * np.where(ON_DATA, latent**2, 1.0),
                    "var_y": reference["var_y"] * scale**2,
                }
            ),
        )
        run_files.append(folder / "metrics.json")
        rows.append({**labels, "rmse": 0.3, "test_ll": -0.3, "iterations": 40000, "status": "ok"})
    rows += [
        {
            "experiment": "uci",
            "dataset": dataset,
            "method": "svgp",
            "M": 100,
            "split": s,
            "rmse": 3.0,
            "test_ll": -2.5,
            "iterations": 10000,
            "status": "ok",
        }
        for dataset in ("boston", "concrete")
        for s in range(20)
    ]
    write_csv(tmp_path / "runs.csv", pd.DataFrame(rows).reindex(columns=RUN_COLUMNS))
    posteriors = {
        "snelson": {
            "dataset": "snelson",
            "reference": tmp_path / "reference.csv",
            "split": tmp_path / "split0.npz",
            "runs": run_files,
        }
    }
    return tmp_path, posteriors


def verdicts_by_claim(table: pd.DataFrame) -> dict[str, str]:
    return table.drop_duplicates("claim").set_index("claim")["claim_verdict"].to_dict()


def test_the_packages_claims_on_a_small_study(study):
    folder, posteriors = study
    table = evaluate_claims(load_claims(), read_evidence(folder / "runs.csv", posteriors, {}))
    verdicts = verdicts_by_claim(table)
    assert verdicts["snelson_svgp_improves_with_M"] == PASS
    assert verdicts["snelson_recover_exact_gp"] == PASS
    assert verdicts["snelson_gpnet_fits_better_small_M"] == PASS
    assert verdicts["snelson_fbnn_overestimates_near_data"] == PASS
    assert verdicts["snelson_gpnet_not_overestimating_near_data"] == PASS
    assert verdicts["snelson_fbnn_overestimates_every_M"] == PASS
    uci_and_airline = [claim for claim in verdicts if not claim.startswith("snelson")]
    assert uci_and_airline and all(verdicts[claim] == NOT_RUN for claim in uci_and_airline)  # no GPNet, FBNN
    fbnn = table[(table["claim"] == "snelson_fbnn_overestimates_near_data")].iloc[0]
    assert fbnn["value"] == pytest.approx(2.0) and fbnn["threshold"] == "> 1.5"


def test_a_planted_miss_is_a_cross(study):
    """GPNet 20 a third of a predictive sd off: it does not recover the exact GP."""
    folder, posteriors = study
    predictions = next(path for path in posteriors["snelson"]["runs"] if "gpnet/M20" in str(path)).with_name(
        "predictions.csv"
    )
    frame = pd.read_csv(predictions)
    frame["mean"] += 0.3 * np.sqrt(frame["var_y"])
    write_csv(predictions, frame)
    table = evaluate_claims(load_claims(), read_evidence(folder / "runs.csv", posteriors, {}))
    recover = table[table["claim"] == "snelson_recover_exact_gp"]
    assert list(recover["verdict"]) == [PASS, PASS, FAIL, PASS] and set(recover["claim_verdict"]) == {FAIL}


def test_runs_off_the_papers_settings_support_no_claim(study):
    folder, posteriors = study
    gaps = {cell_key("snelson", "snelson", method, M): "iterations 500, not 40000" for method, M in FITS}
    table = evaluate_claims(load_claims(), read_evidence(folder / "runs.csv", posteriors, gaps))
    assert set(table["verdict"]) == {NOT_RUN} and set(table["claim_verdict"]) == {NOT_RUN}
    snelson = table[table["experiment"] == "snelson"]
    assert snelson["value"].notna().all()  # measured, shown, and not taken as support
    assert (snelson["note"] == "not the paper's settings: iterations 500, not 40000").all()


def test_write_claims_markdown_and_csv(study):
    folder, posteriors = study
    table = evaluate_claims(load_claims(), read_evidence(folder / "runs.csv", posteriors, {}))
    write_claims(table, folder / "results" / "claims")
    written = pd.read_csv(folder / "results" / "claims.csv")
    assert list(written.columns) == COLUMNS and len(written) == len(table)
    markdown = (folder / "results" / "claims.md").read_text(encoding="utf-8")
    claims = load_claims()
    assert f"Claims: 6 {PASS}, 0 {FAIL}, {len(claims) - 6} {NOT_RUN}." in markdown
    for claim in claims:
        assert f"`{claim.id}`" in markdown and f"> {claim.quote}" in markdown
    assert (
        "| snelson | FBNN 20 | median sd / exact sd of f within 0.1 of a training input | 2 | > 1.5 | ✓ |" in markdown
    )
    assert "no runs of GPNet 100 on boston (uci)" in markdown
    assert not list((folder / "results").glob(".*.part*"))


def test_write_claims_html_page_one_row_per_check_the_claim_on_its_first(study, html_table):
    folder, posteriors = study
    table = evaluate_claims(load_claims(), read_evidence(folder / "runs.csv", posteriors, {}))
    write_claims(table, folder / "results" / "claims")
    caption, rows = html_table(folder / "results" / "claims.html")
    assert rows[:2] == [
        ["Claim", "Check"],
        [
            "#",
            "Quoted",
            "Experiment",
            "Holds on",
            "Verdict",
            "Data set",
            "Compared",
            "Measure",
            "Ours",
            "Threshold",
            "Verdict",
            "Note",
        ],
    ]
    checks = rows[2:]
    assert len(checks) == len(table) and all(len(row) == 12 for row in checks)
    claims = table.drop_duplicates("claim")
    firsts = [row for row in checks if row[0]]
    assert [row[:5] for row in firsts] == [
        [str(number), claim.quote, claim.experiment, claim.holds_on, claim.claim_verdict]
        for number, claim in enumerate(claims.itertuples(), start=1)
    ]
    assert set(map(tuple, (row[:5] for row in checks if not row[0]))) == {("",) * 5}
    assert [
        "snelson",
        "FBNN 20",
        "median sd / exact sd of f within 0.1 of a training input",
        "2",
        "> 1.5",
        PASS,
        "",
    ] in [row[5:] for row in checks]
    assert f"Claims: 6 {PASS}, 0 {FAIL}, {len(claims) - 6} {NOT_RUN}." in caption
    assert ABOUT in caption and ABOUT in (folder / "results" / "claims.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "holds_on, verdicts, expected",
    [
        ("all", [PASS, PASS], PASS),
        ("all", [PASS, FAIL, NOT_RUN], FAIL),
        ("all", [PASS, NOT_RUN], NOT_RUN),
        ("most", [PASS, PASS, FAIL], PASS),
        ("most", [PASS, FAIL], FAIL),
        ("most", [PASS, NOT_RUN, NOT_RUN], NOT_RUN),
        ("most", [NOT_RUN], NOT_RUN),
    ],
)
def test_claim_verdict(holds_on, verdicts, expected):
    assert claim_verdict(holds_on, verdicts) == expected
