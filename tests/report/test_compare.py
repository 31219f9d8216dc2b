"""gpstudy compare: a regeneration against a reference, on small results folders written in tmp (and on
docs/reference/paper-cpu against itself)."""

import math
from pathlib import Path

import pandas as pd
import pytest

from gpstudy.cli import main
from gpstudy.report.compare import Tolerance, compare

REPO = Path(__file__).resolve().parents[2]
PAPER_CPU = REPO / "docs/reference/paper-cpu"
RUN = {
    "error_rate": float("nan"),
    "iterations": 100,
    "seconds": 1.0,
    "device": "cpu",
    "dtype": "float64",
    "cpu_capability": "AVX2",
    "torch_version": "2.13.0+cpu",
    "status": "ok",
}


def runs() -> pd.DataFrame:
    """A Snelson run (one split: no standard error) and three Boston splits whose RMSE spread is small."""
    rows = [
        {
            "experiment": "snelson",
            "dataset": "snelson",
            "method": "gpnet",
            "M": 2,
            "split": 0,
            "rmse": 0.384,
            "test_ll": -0.474,
        },
        *(
            {
                "experiment": "uci",
                "dataset": "boston",
                "method": "svgp",
                "M": 100,
                "split": split,
                "rmse": 2.5 + 0.001 * split,
                "test_ll": -2.4 + 0.1 * split,
            }
            for split in range(3)
        ),
    ]
    return pd.DataFrame([{**RUN, **row} for row in rows])


def claims(verdict: str = "✓") -> pd.DataFrame:
    """One claim of one check, and one not run."""
    return pd.DataFrame(
        [
            {
                "claim": "snelson_gpnet_fits_better_small_M",
                "experiment": "snelson",
                "dataset": "snelson",
                "subject": "GPNet 2 vs SVGP 2",
                "measure": "paired difference",
                "value": -1.3,
                "verdict": verdict,
                "claim_verdict": verdict,
            },
            {
                "claim": "uci_gpnet_no_worse_than_svgp",
                "experiment": "uci",
                "dataset": "boston",
                "subject": "GPNet 100 vs SVGP 100",
                "measure": "paired difference",
                "value": float("nan"),
                "verdict": "not run",
                "claim_verdict": "not run",
            },
        ]
    )


def folder(path: Path, runs: pd.DataFrame, claims: pd.DataFrame | None) -> Path:
    """A results folder holding ``runs`` as runs.csv and ``claims`` (if any) as claims.csv."""
    path.mkdir()
    runs.to_csv(path / "runs.csv", index=False)
    if claims is not None:
        claims.to_csv(path / "claims.csv", index=False)
    return path


def run_compare(results: Path, reference: Path, *options: str) -> int:
    """``gpstudy compare``'s exit status."""
    try:
        main(["compare", str(results), str(reference), *options])
    except SystemExit as exit:
        return exit.code
    return 0


@pytest.fixture
def reference(tmp_path) -> Path:
    return folder(tmp_path / "reference", runs(), claims())


def test_identical_folders_are_reproduced(tmp_path, reference, capsys):
    results = folder(tmp_path / "results", runs(), claims())
    assert run_compare(results, reference) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "reproduced: 4 of 4 cells within tolerance, 1 of 1 claims the same"
    assert "Runs ok on both sides whose metrics are equal bit for bit: 4 of 4." in out


def test_a_moved_cell_is_named_and_fails(tmp_path, reference, capsys):
    """Issue 37's measured move: Snelson GPNet M = 2's RMSE 4.9% off, on a CPU of another capability."""
    moved = runs()
    moved.loc[0, ["rmse", "cpu_capability"]] = [0.384 * (1 - 0.049), "AVX512"]
    results = folder(tmp_path / "results", moved, claims())
    assert run_compare(results, reference) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "differs: 3 of 4 cells within tolerance, 1 of 1 claims the same"
    assert (
        "  snelson snelson gpnet M=2 rmse: 0.365184 against 0.384 (-4.9%); its runs differ in cpu_capability "
        "AVX512 against AVX2\n"
    ) in out
    assert "Runs ok on both sides whose metrics are equal bit for bit: 3 of 4." in out
    cell = compare(results, reference).cells.set_index(["method", "metric"]).loc[("gpnet", "rmse")]
    assert math.isclose(cell["relative"], -0.049) and math.isnan(cell["se_units"]) and not cell["within"]


def test_cpu_capabilities_side_by_side_and_not_recorded(tmp_path, capsys):
    older = runs().drop(columns=["cpu_capability", "dtype", "torch_version"])  # a runs.csv of an older version
    reference = folder(tmp_path / "reference", older, claims())
    newer = runs().assign(cpu_capability="AVX512")
    assert run_compare(folder(tmp_path / "results", newer, claims()), reference) == 0  # numbers equal: reproduced
    lines = capsys.readouterr().out.splitlines()
    assert lines[lines.index(next(line for line in lines if line.startswith("  cpu_capability")))].split() == [
        "cpu_capability",
        "AVX512",
        "not",
        "recorded",
        "differs",
    ]
    assert next(line for line in lines if line.startswith("  device ")).split() == ["device", "cpu", "cpu"]


def test_a_cell_within_the_relative_tolerance_may_still_be_beyond_its_standard_errors(tmp_path, reference):
    """Boston's RMSE: se 0.000471 over 3 splits; moved by 0.5 se (9.4e-5 relative) it is beyond the default
    0.1 se though within 1e-3 relative, and within --se 1; moved by 2.2e-6 relative (issue 37's stable
    runs) it is within."""
    moved = runs()
    boston = moved["dataset"] == "boston"
    se = math.sqrt(2 / 3) * 0.001 / math.sqrt(3)  # std (ddof 0) of 2.500, 2.501, 2.502 over sqrt(3)
    moved.loc[boston, "rmse"] += 0.5 * se
    results = folder(tmp_path / "results", moved, claims())
    cell = compare(results, reference).cells.set_index(["dataset", "metric"]).loc[("boston", "rmse")]
    assert math.isclose(cell["se_units"], 0.5) and math.isclose(cell["relative"], 0.5 * se / 2.501)
    assert not cell["within"] and compare(results, reference, Tolerance(se=1.0)).reproduced
    stable = runs()
    stable["rmse"] *= 1 + 2.2e-6
    assert compare(folder(tmp_path / "stable", stable, claims()), reference).reproduced
    assert not compare(results, reference, Tolerance(se=1.0, relative=5e-5)).reproduced  # 9.4e-5 relative


def test_a_changed_claim_verdict_fails(tmp_path, reference, capsys):
    results = folder(tmp_path / "results", runs(), claims("✗"))
    assert run_compare(results, reference) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "differs: 4 of 4 cells within tolerance, 0 of 1 claims the same"
    row = next(line for line in out.splitlines() if line.startswith("  snelson_gpnet_fits_better_small_M"))
    assert row.split() == ["snelson_gpnet_fits_better_small_M", "✗", "✓", "NO", "0"]


def test_claims_csv_on_one_side_only_fails(tmp_path, reference, capsys):
    results = folder(tmp_path / "results", runs(), None)
    assert run_compare(results, reference) == 1
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"differs: 4 of 4 cells within tolerance, claims.csv only in {reference}, not in {results}"
    )


def test_a_run_missing_on_one_side_is_named(tmp_path, reference, capsys):
    results = folder(tmp_path / "results", runs().drop(index=3), claims())  # Boston split 2
    assert run_compare(results, reference) == 1
    out = capsys.readouterr().out
    assert "Runs of the reference not in the results:\n  uci boston svgp M=100: split 2\n" in out
    assert out.splitlines()[-1] == (
        "differs: 4 of 4 cells within tolerance, 1 of 1 claims the same, 1 runs of the reference not in the results"
    )
    assert run_compare(results, reference, "--partial") == 0  # a regeneration of part of the reference
    assert capsys.readouterr().out.splitlines()[-1].startswith("reproduced: 4 of 4 cells")
    assert run_compare(reference, results, "--partial") == 1  # a run the reference lacks is always a difference
    assert "Runs only in the results:\n  uci boston svgp M=100: split 2\n" in capsys.readouterr().out


def test_a_run_failed_on_one_side_is_named(tmp_path, reference, capsys):
    failed = runs()
    failed.loc[1, ["rmse", "test_ll", "status"]] = [float("nan"), float("nan"), "failed: diverged"]
    assert run_compare(folder(tmp_path / "results", failed, claims()), reference) == 1
    out = capsys.readouterr().out
    assert "  uci boston svgp M=100 split 0: failed: diverged in the results, ok in the reference\n" in out
    assert out.splitlines()[-1].endswith("1 runs ok on one side only")


def test_an_unreadable_folder_exits_2_naming_it(tmp_path, reference, capsys):
    assert run_compare(tmp_path / "nowhere", reference) == 2
    assert f"gpstudy compare: {tmp_path / 'nowhere'}: no such folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert run_compare(tmp_path / "empty", reference) == 2
    assert "no runs.csv in it" in capsys.readouterr().err


def test_the_paper_cpu_reference_reproduces_itself(capsys):
    assert run_compare(PAPER_CPU, PAPER_CPU) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "reproduced: 32 of 32 cells within tolerance, 6 of 6 claims the same"
    assert "  cpu_capability   not recorded  not recorded" in out  # recorded since; this reference predates it


def test_the_help_states_the_default_tolerance(capsys):
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"(default {Tolerance().se:g}," in help_text and f"(default {Tolerance().relative:g}," in help_text


def test_a_negative_tolerance_exits_2(tmp_path, reference, capsys):
    assert run_compare(reference, reference, "--se", "-1") == 2
    assert "tolerances must be non-negative numbers" in capsys.readouterr().err


def test_a_non_numeric_metric_exits_2_naming_the_file_line_and_column(tmp_path, reference, capsys):
    """A runs.csv with a metric 'abc' crashed compare with a TypeError and exit 1 (its "not reproduced")."""
    bad = runs().astype({"rmse": object})
    bad.loc[1, "rmse"] = "abc"
    results = folder(tmp_path / "results", bad, claims())
    assert run_compare(results, reference) == 2
    err = capsys.readouterr().err
    assert f"gpstudy compare: {results / 'runs.csv'}: line 3, column 'rmse': 'abc' is no number" in err, err
    assert len(err.strip().splitlines()) == 1
