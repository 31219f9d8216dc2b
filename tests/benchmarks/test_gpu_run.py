"""benchmarks/gpu_run.py's dry run, end to end on the CPU: prepare (no wheels: no network here) from the data
mirror, then run every stage as its own process, each under its budget, writing the report and the summary."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_run.py"
MIRROR = ROOT.parent / "shared" / "data"  # the data mirror beside the checkout (common.md)
ROWS = ["svgp-100", "gpnet-100"]  # one row without pretraining, one with


def gpu_run(*args: str) -> str:
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def carry(tmp_path_factory) -> Path:
    if not (MIRROR / "boston").is_dir():
        pytest.skip(f"no data mirror at {MIRROR}")
    folder = tmp_path_factory.mktemp("gpu_carry")
    printed = gpu_run(
        "prepare", "--carry", str(folder), "--mirror", str(MIRROR), "--no-wheels", "--dry-run", "--rows", *ROWS
    )
    assert f'carry: ["{folder}"]' in printed and f"run --carry {folder} --out $OUT" in printed
    return folder


def test_the_dry_run_writes_every_stage_and_the_summary(carry, tmp_path):
    prepared = json.loads((carry / "prepared.json").read_text())
    assert prepared["rows"] == ROWS and prepared["splits"] == 2
    assert sorted(p.name for p in (carry / "results" / "pretrain" / "boston" / "random").iterdir()) == [
        "split0.json",
        "split1.json",
    ]  # gpnet pretrains, as the workflow's rule does, beforehand
    out = tmp_path / "out"
    printed = gpu_run("run", "--carry", str(carry), "--out", str(out), "--dry-run", "--engine", "direct")
    report = (out / "gpu_run.md").read_text()
    headings = [line for line in report.splitlines() if line.startswith("#")]
    for heading in (
        "## Environment",
        "# gpstudy GPU check (quick, device cpu)",
        "## 3. speed.py rows (N 1000, batch 500, D 8, RFE 1000 units, float64; 1 timed iteration(s) after one warm-up)",
        "## 6. Summary",
        "## Pretraining",
        "## svgp-100 on boston's 2 splits as one batch (direct, cpu)",
        "## gpnet-100 on boston's 2 splits as one batch (direct, cpu)",
        "## Summary",
    ):
        assert heading in headings
    assert headings[-1] == "## Summary" and printed.rstrip().endswith(report.rstrip().splitlines()[-1])
    assert "| copy host to device |" not in report and "| host-device copies | not applicable on cpu |" in report
    assert "2 splits' hyperparameters prepared beforehand, 0 pretrained here" in report
    summary = json.loads((out / "summary.json").read_text())
    assert [(s["stage"], s["status"]) for s in summary["stages"]] == [
        (name, "done") for name in ("environment", "gpu_check", "pretrain", *ROWS)
    ]
    for row in ROWS:
        method, M = row.split("-")
        result = next(s["result"] for s in summary["stages"] if s["stage"] == row)
        assert result["iterations"] == 4 and set(result["splits"]) == {"0", "1"}
        assert all(split["status"] == "ok" for split in result["splits"].values())
        assert result["syncs"]["deliberate"] == 1 and result["syncs"]["other"] == 0  # the probes' budget
        estimate = next(r for r in prepared["estimates"] if (r["method"], r["M"], r["splits"]) == (method, int(M), 2))
        estimated = " / ".join(f"{e['iteration'] * 1e3:.2f}" for e in estimate["estimates"].values())
        rmse = sum(split["rmse"] for split in result["splits"].values()) / 2
        assert re.search(
            rf"\| {row} \| done \| direct \| 4 \| {result['ms_per_iteration']:.2f} \| {estimated} \| not applicable on "
            rf"cpu \| 1.00 / 0.00 / n/a \| 1.00 \| 2 ok \| {rmse:.4f} \| -?[0-9.]+ \|",
            report,
        ), row
        for split in ("0", "1"):  # each split's run files, as the workflow's train rule writes them
            assert (
                out
                / "work"
                / "results"
                / "uci"
                / "boston"
                / method
                / f"M{M}"
                / "splits0-1"
                / f"split{split}"
                / "metrics.json"
            ).is_file()
    # gpu_check's speed row, its estimate read from the prepared file (no counting on meta there)
    assert f"read from {carry / 'prepared.json'}" in report and "| svgp | 100 | 1 |" in report


def test_a_stage_over_its_budget_is_stopped_and_the_next_still_runs(carry, tmp_path):
    out = tmp_path / "out"
    gpu_run(
        *("run", "--carry", str(carry), "--out", str(out), "--dry-run", "--engine", "direct"),
        *("--stages", "environment", "pretrain", "--budget", "environment=0.5"),
    )
    summary = json.loads((out / "summary.json").read_text())
    assert [(s["stage"], s["status"]) for s in summary["stages"]] == [
        ("environment", "timed out: stopped at its budget of 0.5 s"),
        ("pretrain", "done"),
    ]
    report = (out / "gpu_run.md").read_text()
    assert "## environment: timed out: stopped at its budget of 0.5 s" in report and "## Pretraining" in report
    assert "## Environment" not in report  # it was stopped before it wrote


@pytest.mark.skipif(shutil.which("snakemake") is None, reason="the Snakemake route needs snakemake on PATH")
def test_the_snakemake_route_trains_the_row_through_the_workflow(carry, tmp_path):
    out = tmp_path / "out"
    gpu_run(
        *("run", "--carry", str(carry), "--out", str(out), "--dry-run", "--engine", "snakemake"),
        *("--stages", "pretrain", "svgp-100"),
    )
    summary = json.loads((out / "summary.json").read_text())
    assert [(s["stage"], s["status"]) for s in summary["stages"]] == [("pretrain", "done"), ("svgp-100", "done")]
    result = summary["stages"][1]["result"]
    assert result["engine"] == "snakemake" and all(s["status"] == "ok" for s in result["splits"].values())
    batch = out / "work" / "snakemake" / "results" / "uci" / "boston" / "svgp" / "M100" / "splits0-1"
    metrics = [json.loads((batch / f"split{s}" / "metrics.json").read_text()) for s in (0, 1)]
    assert [m["iterations"] for m in metrics] == [result["iterations"]] * 2  # the slice's, given by --config


def test_a_row_stopped_in_its_slice_keeps_its_calibration(carry, tmp_path, monkeypatch):
    """The row's speed is written as soon as its calibration ends: a stage killed in its slice (a row far slower
    than estimated, the case the report most needs) still reports ms per iteration, marked as calibration's."""
    import importlib

    import gpstudy.training

    monkeypatch.syspath_prepend(str(SCRIPT.parent))  # as when run as a script: gpu_check beside it
    gpu_run_module = importlib.import_module(SCRIPT.stem)
    real_run_job, trained = gpstudy.training.run_job, []

    def killed_in_the_slice(*args, **kwargs):
        if trained:  # the calibration ran (the dry run has no warm-up): the slice is where the budget ends
            raise KeyboardInterrupt("stopped at its budget")
        trained.append(args[1].iterations)
        return real_run_job(*args, **kwargs)

    monkeypatch.setattr(gpstudy.training, "run_job", killed_in_the_slice)
    out = tmp_path / "out"
    (out / "work").mkdir(parents=True)
    shutil.copytree(carry / "results", out / "work" / "results")  # what the pretrain stage copies
    args = gpu_run_module.argparse.Namespace(carry=carry, out=out, device="cpu", engine="direct", dry_run=True)
    with pytest.raises(KeyboardInterrupt):
        gpu_run_module.stage_row(args, "gpnet-100")
    result = json.loads((out / "stages" / "gpnet-100.json").read_text())
    assert trained == [2] and result["calibration"]["iterations"] == 2 and "iterations" not in result
    record = {"stage": "gpnet-100", "status": "timed out: stopped at its budget of 60.0 s", "result": result}
    prepared = json.loads((carry / "prepared.json").read_text())
    lines = gpu_run_module.summary_lines({"stages": [record]}, prepared)
    measured = f"{result['calibration']['ms_per_iteration']:.2f} (calibration, 2 it)"
    assert any(line.startswith(f"| gpnet-100 | {record['status']} | direct |  | {measured} |") for line in lines)
