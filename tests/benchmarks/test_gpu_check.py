"""benchmarks/gpu_check.py writes its whole report on the CPU (a short pass), so that it cannot rot unnoticed."""

import json
import re
import runpy
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_a_quick_cpu_pass_writes_every_section(tmp_path, monkeypatch):
    report = tmp_path / "reports" / "gpu_report.md"
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # as when run as a script: speed.py beside it
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "gpu_check.py",
            "--device",
            "cpu",
            "--quick",
            "--probes",
            "exact",
            "svgp",
            "--speed-methods",
            "svgp",
            "--M",
            "100",
            "--splits",
            "1",
            "--cholesky",
            "2",
            "50",
            "--block-tril",
            "2",
            "30",
            "300",
            "--out",
            str(report),
        ],
    )
    runpy.run_path(str(BENCHMARKS / "gpu_check.py"), run_name="__main__")
    text = report.read_text()
    for heading in (
        "## 1. Environment",
        "## 2. Probes",
        "## 3. speed.py rows",
        "## 4. Batched Cholesky",
        "## 5. RFE's product Phi L by column blocks, 2 x 30 x 300",
        "## 6. Summary",
    ):
        assert heading in text
    assert "| pass | exact | not applicable on cpu | 1.00 | none | not applicable on cpu |" in text
    assert (
        "| pass | svgp |" in text and "| svgp | 100 | 1 |" in text and "| lapack |" in text and "| reference |" in text
    )
    # the measured row beside gpu_estimate.py's estimate of it under each rate set, and its GPU and host seconds
    assert re.search(r"\| svgp \| 100 \| 1 \| [0-9.]+ \| [0-9.]+ / [0-9.]+ / [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| ", text)
    assert "estimated s/it (optimistic / central / pessimistic)" in text
    assert "| probes trained | 2 of 2 |" in text and "| Cholesky libraries factor and agree | yes |" in text
    assert re.search(r"\| 1 \| [0-9.]+ \| 1\.00 \| reference \|", text)
    assert re.search(r"\| 8 \| [0-9.]+ \| [0-9.]+ \| [0-9.e-]+ \|", text)
    assert "| RFE's product agrees across block counts | yes |" in text
    assert list(report.parent.iterdir()) == [report]  # written atomically: no temporary file left


QUICK = ["--device", "cpu", "--quick", "--probes", "exact", "--speed-methods", "svgp", "--M", "100", "--splits", "1"]
QUICK += ["--cholesky", "2", "50", "--block-tril", "2", "30", "300"]


def run_check(monkeypatch, *args: str) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.setattr(sys, "argv", ["gpu_check.py", *QUICK, *args])
    runpy.run_path(str(BENCHMARKS / "gpu_check.py"), run_name="__main__")


def test_a_killed_check_keeps_every_section_written_before(tmp_path, monkeypatch):
    """Section 4 is killed (an interrupt, as a timeout or a CUDA abort ends the process): sections 1-3 are on disk,
    a whole report; section 5 of another run that raises is recorded and the summary still follows."""
    from gpstudy.diagnostics import device_check

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    report = tmp_path / "gpu_report.md"
    monkeypatch.setattr(device_check, "cholesky_libraries", killed)
    try:
        run_check(monkeypatch, "--out", str(report))  # every section, as before --sections existed
    except KeyboardInterrupt:
        pass
    text = report.read_text()
    assert "## 1. Environment" in text and "| pass | exact |" in text and "| svgp | 100 | 1 |" in text
    assert "## 4." not in text
    assert list(tmp_path.iterdir()) == [report]  # no partial write left beside it

    def broken(*args, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(device_check, "block_tril_products", broken)
    monkeypatch.setattr(device_check, "cholesky_libraries", broken)
    run_check(monkeypatch, "--out", str(report), "--append", "--sections", "cholesky", "block_tril", "summary")
    appended = report.read_text()
    assert appended.startswith(text)  # --append: after what the file held
    assert "## 4. Batched Cholesky: failed\n\nRuntimeError: CUDA error: an illegal memory access" in appended
    assert "## 5. RFE's product Phi L by column blocks: failed" in appended
    assert "| 1. Environment | not run (not in --sections) |" in appended
    assert "| 4. Batched Cholesky | failed: RuntimeError: CUDA error" in appended


def test_the_speed_rows_read_their_estimates_from_a_prepared_file(tmp_path, monkeypatch):
    """With --estimates no row is counted on meta (counting raises here); each row shows the file's numbers, and
    a row the file lacks says so."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import gpu_check
    import gpu_estimate

    prepared = gpu_check.prepared_estimates([("svgp", 100, 1)])
    row = prepared[gpu_check.ESTIMATES][0]
    assert row["costs"]["launches"] > 0 and set(row["estimates"]) == set(gpu_estimate.RATE_SETS)
    estimates = tmp_path / "prepared.json"
    estimates.write_text(json.dumps(prepared))

    def counted(*args, **kwargs):
        raise AssertionError("counted on meta although the estimates were prepared")

    monkeypatch.setattr(gpu_estimate, "counts", counted)
    report = tmp_path / "gpu_report.md"
    run_check(
        monkeypatch, "--out", str(report), "--sections", "speed", "--M", "100", "500", "--estimates", str(estimates)
    )
    text = report.read_text()
    expected = " / ".join(f"{time['iteration']:.4f}" for time in row["estimates"].values())
    assert re.search(
        rf"\| svgp \| 100 \| 1 \| [0-9.]+ \| {expected} \| {row['estimates']['central']['gpu']:.4f} \|", text
    )
    assert "| svgp | 500 | 1 |" in text and "| not in the estimates file |" in text
    assert f"read from {estimates}" in text
