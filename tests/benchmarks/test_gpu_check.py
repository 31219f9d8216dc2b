"""benchmarks/gpu_check.py writes its whole report on the CPU (a short pass), so that it cannot rot unnoticed."""

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
