"""benchmarks/speed.py --against: its rows, its table and a tiny comparison of one row with HEAD (the harness's
logic, not its timings)."""

import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
# imported as ``speed``, as gpu_check.py imports it, so that a worker loads it (and registers its FLOP formulas) once
SPEED = vars(importlib.import_module("speed"))
Row = SPEED["Row"]


def test_the_rows_are_every_method_and_m_the_study_trains_at_paper_sizes(study_config):
    rows = SPEED["study_rows"]()
    for experiment, preset in SPEED["EXPERIMENT_PRESETS"].items():
        for method, Ms in study_config["experiments"][experiment]["methods"].items():
            assert all(Row(preset, method, M) in rows for M in Ms), (experiment, method)
    assert len(rows) == len(set(rows))  # SVGP-300 and -1000 of the odvgp experiment once each


def test_the_table_gives_medians_their_ratio_and_marks_a_row_slower_by_more_than_5_percent():
    times = {
        Row("uci", "svgp", 500): {"this": [43.0, 44.0, 42.0], "ref": [32.0, 33.0, 31.0]},
        Row("uci", "svgp", 100): {"this": [6.0, 5.9, 6.1], "ref": [7.0, 6.9, 7.1]},
        Row("snelson", "svgp", 2): {"this": [2.09, 2.0, 2.2], "ref": [2.0, 2.0, 2.0]},
    }
    lines = SPEED["comparison_table"](times).splitlines()
    assert lines[0] == "| row | ms (this) | ms (REF) | ratio | rounds' ratios |"
    assert lines[2] == "| uci svgp M500 | 43.000 | 32.000 | 1.344 slower | 1.333-1.355 |"
    assert lines[3] == "| uci svgp M100 | 6.000 | 7.000 | 0.857 | 0.855-0.859 |"
    assert lines[4] == "| snelson svgp M2 | 2.090 | 2.000 | 1.045 | 1.000-1.100 |"  # within 5%: not marked


def test_one_row_against_head_runs_both_sides_alternating():
    """Two processes, each timing with its own tree's gpstudy (checked by the side itself), one round."""
    commit, times = SPEED["compare"]("HEAD", [Row("snelson", "svgp", 2)], rounds=2, seconds=0.01)
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert commit == head.strip()
    sides = times[Row("snelson", "svgp", 2)]
    assert len(sides["this"]) == len(sides["ref"]) == 2 and all(ms > 0 for ms in sides["this"] + sides["ref"])


def test_a_side_that_imports_another_gpstudy_is_refused(tmp_path):
    """A tree without its own gpstudy would time the installed one: refused, naming both."""
    (tmp_path / "config.yaml").write_text("")
    (tmp_path / "benchmarks").mkdir()
    shutil.copy(REPO / "benchmarks" / "speed.py", tmp_path / "benchmarks")  # a side runs its own tree's script
    with pytest.raises(RuntimeError, match=f"the side for {tmp_path} imported gpstudy from"):
        SPEED["Side"](tmp_path, 0.01)


def test_an_unknown_ref_is_a_git_error(tmp_path):
    with pytest.raises(subprocess.CalledProcessError):
        SPEED["export_commit"]("no-such-ref", tmp_path)


def test_in_place_products_count_their_flops_as_the_functional_ones_do():
    """BlockTril's and the Gram's GEMMs write in place (baddbmm_, addmm_); uncounted, a row's GFLOP/s fell by a
    quarter."""
    import torch

    a, b, c = torch.randn(3, 4, 5), torch.randn(3, 5, 6), torch.randn(3, 4, 6)
    counts = []
    for product in (
        lambda: torch.baddbmm(c, a, b),
        lambda: c.clone().baddbmm_(a, b),
        lambda: torch.addmm(c[0], a[0], b[0]),
        lambda: c[0].clone().addmm_(a[0], b[0]),
    ):
        with SPEED["FlopCounterMode"](display=False) as counter:
            product()
        counts.append(counter.get_total_flops())
    assert counts == [2 * 3 * 4 * 5 * 6] * 2 + [2 * 4 * 5 * 6] * 2
