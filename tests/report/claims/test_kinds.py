"""Each kind of claim on small synthetic evidence whose verdict is planted both ways (run tables whose
paired differences are planted, a 1-D posterior whose distance to the exact GP is planted); a check
without its runs, or with runs at other settings than the paper's, is not run."""

import numpy as np
import pandas as pd
import pytest

from gpstudy.report.claims import FAIL, NOT_RUN, PASS, Claim, Evidence, Posterior, evaluate_claims
from gpstudy.report.claims.evidence import cell_key
from gpstudy.report.results import RUN_COLUMNS

SPLITS = 20
NOISE = np.where(np.arange(SPLITS) % 2 == 0, 1.0, -1.0)  # +-1 by split: mean 0, std (ddof 1) sqrt(20/19)
NOISE_SE = np.sqrt(SPLITS / (SPLITS - 1)) / np.sqrt(SPLITS)  # the standard error of a mean of NOISE


def run_rows(experiment: str, dataset: str, method: str, M: int, rmse, test_ll=None, status="ok") -> list[dict]:
    """One runs.csv row per split of a cell, rmse (and test_ll) given per split."""
    rmse = np.broadcast_to(np.asarray(rmse, dtype=float), (SPLITS,))
    test_ll = -rmse if test_ll is None else np.broadcast_to(np.asarray(test_ll, dtype=float), (SPLITS,))
    return [
        {
            "experiment": experiment,
            "dataset": dataset,
            "method": method,
            "M": M,
            "split": s,
            "rmse": rmse[s],
            "test_ll": test_ll[s],
            "iterations": 10000,
            "status": status,
        }
        for s in range(SPLITS)
    ]


def runs_table(*cells: list[dict]) -> pd.DataFrame:
    """A runs.csv table of the cells' rows."""
    return pd.DataFrame([row for cell in cells for row in cell]).reindex(columns=RUN_COLUMNS)


GRID = np.linspace(-3.0, 10.0, 131)  # the plotted range, x units
X_TRAIN = np.linspace(0.0, 5.0, 51)  # training inputs: near the grid points in [0, 5]
NEAR = 0.05  # grid spacing 0.1: only grid points on [0, 5] are this close to a training input


def exact_reference() -> pd.DataFrame:
    """The exact GP on the grid: mean sin x, latent variance small on the data and 1 away, noise 0.1."""
    var_f = np.where((GRID >= 0) & (GRID <= 5), 0.01, 1.0)
    return pd.DataFrame({"x": GRID, "mean": np.sin(GRID), "var_f": var_f, "var_y": var_f + 0.1})


def prediction(
    method: str, M: int, mean_shift: float = 0.0, sd_scale: float = 1.0, sd_scale_near_data: float = 1.0
) -> pd.DataFrame:
    """A method's predictions: the exact GP's mean shifted by ``mean_shift`` exact sds of y, its sds of y
    scaled by ``sd_scale``, and its latent sd scaled by ``sd_scale_near_data`` on the data's range."""
    exact = exact_reference()
    near = (GRID >= 0) & (GRID <= 5)
    var_f = exact["var_f"] * np.where(near, sd_scale_near_data**2, 1.0)
    return pd.DataFrame(
        {
            "method": method,
            "M": M,
            "x": GRID,
            "mean": exact["mean"] + mean_shift * np.sqrt(exact["var_y"]),
            "var_f": var_f,
            "var_y": exact["var_y"] * sd_scale**2,
        }
    )


def posterior(*predictions: pd.DataFrame) -> Posterior:
    return Posterior("snelson", pd.concat(predictions, ignore_index=True), exact_reference(), X_TRAIN)


def posterior_runs(*cells: tuple[str, int]) -> pd.DataFrame:
    """runs.csv rows of the Snelson experiment: one split per (method, M)."""
    return pd.DataFrame(
        [
            {
                "experiment": "snelson",
                "dataset": "snelson",
                "method": method,
                "M": M,
                "split": 0,
                "rmse": 0.3,
                "test_ll": -0.3,
                "iterations": 40000,
                "status": "ok",
            }
            for method, M in cells
        ]
    ).reindex(columns=RUN_COLUMNS)


@pytest.fixture
def planted_uci():
    """Boston at 20 splits: GPNet 100 better than SVGP 100 by 3 standard errors of the noise, GPNet 500
    worse than SVGP 500 by 1.5 of them (no worse within 2), FBNN 500 2.5 worse than GPNet 500."""
    base = 3.0 + 0.1 * NOISE
    noise = 0.1 * NOISE_SE
    return runs_table(
        run_rows("uci", "boston", "svgp", 100, base),
        run_rows("uci", "boston", "gpnet", 100, base - 3 * noise + 0.1 * NOISE),
        run_rows("uci", "boston", "svgp", 500, base),
        run_rows("uci", "boston", "gpnet", 500, base + 1.5 * noise + 0.1 * NOISE),
        run_rows("uci", "boston", "fbnn", 500, base + 4.0 * noise + 0.2 * NOISE),
    )


def claim(kind: str, experiment: str = "uci", datasets=("boston",), holds_on: str = "all", **params) -> Claim:
    return Claim(f"test_{kind}", "A sentence.", experiment, tuple(datasets), holds_on, kind, params)


def verdicts(claims, evidence) -> list[str]:
    return list(evaluate_claims(claims, evidence)["verdict"])


def test_paired_better_passes_beyond_two_standard_errors_only(planted_uci):
    evidence = Evidence(planted_uci)
    better = claim("paired", relation="better", method="gpnet", versus="svgp", M=[100, 500], measure="rmse")
    table = evaluate_claims([better], evidence)
    assert list(table["verdict"]) == [PASS, FAIL]  # -3 SE: better; +1.5 SE: not
    assert table["value"].iloc[0] == pytest.approx(-3 * 0.1 * NOISE_SE)
    assert table["se"].iloc[0] == pytest.approx(0.1 * NOISE_SE)
    assert table["n"].iloc[0] == 20
    assert list(table["threshold"]) == [f"< -2 SE, 2 SE = {2 * 0.1 * NOISE_SE:.4g}"] * 2
    versus_fbnn = claim("paired", relation="better", method="gpnet", versus="fbnn", M=[500], measure="rmse")
    assert verdicts([versus_fbnn], evidence) == [PASS]  # -2.5 SE: a 4-SE rule would call it not better


def test_paired_no_worse_allows_two_standard_errors_and_no_more(planted_uci):
    evidence = Evidence(planted_uci)
    no_worse = claim("paired", relation="no_worse", method="gpnet", versus="svgp", M=[100, 500], measure="rmse")
    assert verdicts([no_worse], evidence) == [PASS, PASS]  # -3 SE and +1.5 SE (a 1-SE rule fails the second)
    fbnn = claim("paired", relation="no_worse", method="fbnn", versus="gpnet", M=[500], measure="rmse")
    assert verdicts([fbnn], evidence) == [FAIL]  # +2.5 SE worse


def test_paired_test_ll_is_better_when_higher(planted_uci):
    """test_ll = -rmse in the planted runs: GPNet 100's higher test log-likelihood is better."""
    table = evaluate_claims(
        [claim("paired", relation="better", method="gpnet", versus="svgp", M=[100], measure="test_ll")],
        Evidence(planted_uci),
    )
    assert list(table["verdict"]) == [PASS] and table["value"].iloc[0] > 0
    assert table["threshold"].iloc[0] == f"> 2 SE, 2 SE = {2 * 0.1 * NOISE_SE:.4g}"


def test_paired_comparable_within_a_relative_or_absolute_tolerance():
    runs = runs_table(
        run_rows("uci", "boston", "fbnn", 500, 3.0),
        run_rows("uci", "boston", "gpnet", 500, 3.06),
        run_rows("uci", "boston", "svgp", 500, 3.3),
    )
    evidence = Evidence(runs)
    close = dict(relation="comparable", versus="fbnn", M=[500], measure="rmse", tolerance=0.05, relative=True)
    assert verdicts([claim("paired", method="gpnet", **close)], evidence) == [PASS]  # 2% of 3.0
    assert verdicts([claim("paired", method="svgp", **close)], evidence) == [FAIL]  # 10%
    absolute = {**close, "tolerance": 0.1, "relative": False}
    assert verdicts([claim("paired", method="gpnet", **absolute)], evidence) == [PASS]  # 0.06 of 0.1
    assert verdicts([claim("paired", method="gpnet", **{**absolute, "tolerance": 0.03})], evidence) == [FAIL]


def test_improves_with_m_each_step_better():
    runs = runs_table(
        *(run_rows("uci", "boston", "svgp", M, rmse) for M, rmse in ((100, 3.0), (200, 2.9), (500, 2.8))),
        *(run_rows("uci", "boston", "gpnet", M, rmse) for M, rmse in ((100, 3.0), (200, 2.8), (500, 2.9))),
    )
    evidence = Evidence(runs)
    improves = claim("improves_with_M", method="svgp", M=[100, 200, 500], measure="rmse")
    table = evaluate_claims([improves], evidence)
    assert list(table["subject"]) == ["SVGP 200 vs SVGP 100", "SVGP 500 vs SVGP 200"]
    assert list(table["verdict"]) == [PASS, PASS] and set(table["claim_verdict"]) == {PASS}
    gpnet = evaluate_claims([claim("improves_with_M", method="gpnet", M=[100, 200, 500], measure="rmse")], evidence)
    assert list(gpnet["verdict"]) == [PASS, FAIL] and set(gpnet["claim_verdict"]) == {FAIL}


def snelson_evidence(*predictions, gaps=None) -> Evidence:
    cells = [(frame["method"].iat[0], int(frame["M"].iat[0])) for frame in predictions]
    return Evidence(posterior_runs(*cells), {"snelson": posterior(*predictions)}, gaps or {})


def test_close_to_exact_measures_mean_and_sd_against_their_thresholds():
    evidence = snelson_evidence(
        prediction("svgp", 20, mean_shift=0.1, sd_scale=1.05), prediction("gpnet", 20, mean_shift=0.5, sd_scale=1.3)
    )
    close = claim(
        "close_to_exact",
        "snelson",
        ("snelson",),
        methods=["svgp", "gpnet"],
        M=[20],
        sd_of="y",
        mean_error=0.25,
        sd_error=0.1,
    )
    table = evaluate_claims([close], evidence)
    assert list(table["verdict"]) == [PASS, PASS, FAIL, FAIL]
    assert list(table["value"]) == pytest.approx([0.1, 0.05, 0.5, 0.3])


def test_paired_on_a_posterior_measure_is_one_draw():
    evidence = snelson_evidence(
        prediction("svgp", 2, mean_shift=0.8),
        prediction("gpnet", 2, mean_shift=0.3),
        prediction("svgp", 5, mean_shift=0.2),
        prediction("gpnet", 5, mean_shift=0.4),
    )
    fits_better = claim(
        "paired",
        "snelson",
        ("snelson",),
        relation="better",
        method="gpnet",
        versus="svgp",
        M=[2, 5],
        measure="mean_error",
        sd_of="y",
    )
    table = evaluate_claims([fits_better], evidence)
    assert list(table["verdict"]) == [PASS, FAIL]
    assert list(table["value"]) == pytest.approx([-0.5, 0.2]) and table["se"].isna().all()
    assert list(table["threshold"]) == ["< 0", "< 0"]


def test_sd_ratio_near_the_data_is_the_ratio_of_standard_deviations():
    evidence = snelson_evidence(prediction("fbnn", 20, sd_scale_near_data=2.0), prediction("gpnet", 20))
    over = claim(
        "sd_ratio", "snelson", ("snelson",), methods=["fbnn", "gpnet"], M=[20], sd_of="f", near=NEAR, above=1.5
    )
    table = evaluate_claims([over], evidence)
    assert list(table["value"]) == pytest.approx([2.0, 1.0])  # sd, not variance: a ratio of variances is 4
    assert list(table["verdict"]) == [PASS, FAIL]
    under = claim(
        "sd_ratio", "snelson", ("snelson",), methods=["fbnn", "gpnet"], M=[20], sd_of="f", near=NEAR, below=1.5
    )
    assert verdicts([under], evidence) == [FAIL, PASS]


def test_absent_or_failed_runs_are_not_run_never_passed(planted_uci):
    failed = runs_table(
        run_rows("uci", "boston", "svgp", 100, 3.0),
        run_rows("uci", "boston", "gpnet", 100, np.nan, status="failed: CholeskyError"),
    )
    better = claim("paired", relation="better", method="gpnet", versus="svgp", M=[100, 200], measure="rmse")
    table = evaluate_claims([better], Evidence(failed))
    assert list(table["verdict"]) == [NOT_RUN, NOT_RUN]
    assert "every run of GPNet 100 on boston (uci) failed" in table["note"].iloc[0]
    assert "no runs of GPNet 200" in table["note"].iloc[1]
    assert table["value"].isna().all() and set(table["claim_verdict"]) == {NOT_RUN}
    posterior_claim = claim(
        "sd_ratio", "snelson", ("snelson",), methods=["fbnn"], M=[20], sd_of="f", near=NEAR, above=1.5
    )
    assert verdicts([posterior_claim], Evidence(planted_uci)) == [NOT_RUN]


def test_paired_over_the_splits_both_ran():
    svgp = run_rows("uci", "boston", "svgp", 100, 3.0)
    gpnet = run_rows("uci", "boston", "gpnet", 100, 2.0)
    for row in gpnet[10:]:
        row.update(rmse=np.nan, status="failed: CholeskyError")
    better = claim("paired", relation="better", method="gpnet", versus="svgp", M=[100], measure="rmse")
    table = evaluate_claims([better], Evidence(runs_table(svgp, gpnet)))
    assert table["n"].iloc[0] == 10 and table["verdict"].iloc[0] == PASS
    for row in svgp[:10]:
        row.update(rmse=np.nan, status="failed: CholeskyError")
    table = evaluate_claims([better], Evidence(runs_table(svgp, gpnet)))
    assert (
        table["verdict"].iloc[0] == NOT_RUN
        and "no split where both GPNet 100 and SVGP 100 ran" in table["note"].iloc[0]
    )


def test_runs_at_other_settings_are_measured_but_not_run(planted_uci):
    gaps = {
        cell_key("uci", "boston", "gpnet", 100): "iterations 200, not 10000; 2 splits, not 20",
        cell_key("uci", "boston", "svgp", 100): "iterations 200, not 10000",
    }
    better = claim("paired", relation="better", method="gpnet", versus="svgp", M=[100], measure="rmse")
    table = evaluate_claims([better], Evidence(planted_uci, gaps=gaps))
    row = table.iloc[0]
    assert row["verdict"] == NOT_RUN and row["claim_verdict"] == NOT_RUN
    assert row["value"] == pytest.approx(-3 * 0.1 * NOISE_SE)  # our number, still shown
    assert row["note"] == "not the paper's settings: iterations 200, not 10000; 2 splits, not 20"


def test_a_claim_on_most_checks_needs_more_than_half(planted_uci):
    """Of GPNet against SVGP at M 100 and 500 on Boston, one is better: not most of two. With Concrete,
    3 of 4 are: most; with Concrete's M 500 absent, 2 of 4 pass, 1 fails and 1 is not run: not run."""
    evidence = Evidence(planted_uci)
    most = dict(holds_on="most", relation="better", method="gpnet", versus="svgp", M=[100, 500], measure="rmse")
    assert set(evaluate_claims([claim("paired", **most)], evidence)["claim_verdict"]) == {FAIL}
    concrete_100 = [run_rows("uci", "concrete", "svgp", 100, 5.0), run_rows("uci", "concrete", "gpnet", 100, 4.0)]
    concrete_500 = [run_rows("uci", "concrete", "svgp", 500, 5.0), run_rows("uci", "concrete", "gpnet", 500, 4.0)]
    both = claim("paired", datasets=("boston", "concrete"), **most)
    table = evaluate_claims([both], Evidence(pd.concat([planted_uci, runs_table(*concrete_100, *concrete_500)])))
    assert list(table["verdict"]) == [PASS, FAIL, PASS, PASS] and set(table["claim_verdict"]) == {PASS}
    table = evaluate_claims([both], Evidence(pd.concat([planted_uci, runs_table(*concrete_100)])))
    assert list(table["verdict"]) == [PASS, FAIL, PASS, NOT_RUN] and set(table["claim_verdict"]) == {NOT_RUN}
