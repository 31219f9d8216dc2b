"""benchmarks/gpu_check.py writes its whole report on the CPU (a short pass), so that it cannot rot unnoticed."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_quick_cpu_pass_writes_every_section(tmp_path):
    report = tmp_path / "reports" / "gpu_report.md"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--device", "cpu", "--quick",
                           "--probes", "exact", "svgp", "--speed-methods", "svgp", "--M", "100", "--splits", "1",
                           "--cholesky", "2", "50", "--out", str(report)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    text = report.read_text()
    for heading in ("## 1. Environment", "## 2. Probes", "## 3. speed.py rows", "## 4. Batched Cholesky",
                    "## 5. Summary"):
        assert heading in text
    assert "| pass | exact | not applicable on cpu | 1.00 | none | not applicable on cpu |" in text
    assert "| pass | svgp |" in text and "| svgp | 100 | 1 |" in text and "| lapack |" in text
    assert "| probes trained | 2 of 2 |" in text and "| Cholesky libraries factor and agree | yes |" in text
    assert list(report.parent.iterdir()) == [report]  # written atomically: no temporary file left
