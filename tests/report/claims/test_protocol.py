"""A run supports a claim only at config.yaml's settings: configs/paper-cpu.yaml differs in none that
decide a number, the quick study in several, each named with the paper's value."""

from pathlib import Path

import pytest

from gpstudy.methods import compile_problem
from gpstudy.report.claims import settings_gaps
from gpstudy.report.claims.evidence import cell_key
from gpstudy.study import load_config, study_jobs

REPO = Path(__file__).resolve().parents[3]


def test_the_paper_cpu_overlay_trains_figure_4_and_svgp_100_at_the_papers_settings(study_config):
    if problem := compile_problem("gpnet"):  # the overlay compiles GPNet: its validation refuses this torch
        pytest.skip(problem)
    overlay = load_config(REPO / "config.yaml", REPO / "configs" / "paper-cpu.yaml")
    assert settings_gaps(overlay, study_config) == {}
    cells = {(job.experiment, job.dataset, job.method, job.M, len(job.splits)) for job in study_jobs(overlay)}
    snelson = {("snelson", "snelson", method, M, 1) for method in ("svgp", "gpnet", "fbnn") for M in (2, 5, 20)}
    uci = {
        ("uci", dataset, "svgp", 100, 10) for dataset in study_config["experiments"]["uci"]["datasets"]
    }  # 2 jobs each
    assert cells == snelson | uci


def test_the_quick_study_names_each_setting_it_changes(study_config):
    quick = load_config(REPO / "config.yaml", REPO / "configs" / "quick.yaml")
    gaps = settings_gaps(quick, study_config)
    assert set(gaps) == {cell_key(job.experiment, job.dataset, job.method, job.M) for job in study_jobs(quick)}
    boston = gaps[cell_key("uci", "boston", "gpnet", 500)].split("; ")
    assert {"iterations 100, not 10000", "hidden_units 50, not 1000", "2 splits, not 20"} <= set(boston)
    assert "iterations 500, not 40000" in gaps[cell_key("snelson", "snelson", "svgp", 20)]
    assert "pretrain_iterations 100, not 1000" in boston  # GPNet pretrains on Boston ...
    assert "pretrain_iterations" not in gaps[cell_key("uci", "boston", "svgp", 100)]  # ... SVGP does not


def test_where_and_when_a_run_computes_is_no_gap(study_config):
    elsewhere = load_config(REPO / "config.yaml", overrides={"device": "cpu", "seed": 7})
    elsewhere["training"] = {**elsewhere["training"], "checkpoint_every": 5, "eval_every": 10, "torch_compile": True}
    assert settings_gaps(elsewhere, study_config) == {}


def test_a_cell_of_a_variant_the_paper_has_not_is_no_gap_and_a_changed_one_is(study_config):
    """Cells of a user's own variant (the paper has none) are left out, as a user's data sets are; a variant
    config.yaml has too is compared with config.yaml's."""
    overlay = {"variants": {"svgp_fast": {"method": "svgp", "lr": 0.01}, "orthnat": {"method": "odvgp", "lr": 0.1}}}
    overlay["experiments"] = {"uci": {"methods": {"svgp_fast": [10]}}}
    mine = load_config(REPO / "config.yaml", overrides=overlay)
    gaps = settings_gaps(mine, study_config)
    assert all("svgp_fast" not in key for key in gaps) and "svgp_fast" in {job.method for job in study_jobs(mine)}
    assert gaps[cell_key("odvgp", "boston", "orthnat", 300)] == "lr 0.1, not 0.003"
