"""The Snakemake workflow: lint, dry run of the full study, the data stage for real on a tiny config."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpstudy.data import load_split

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def snakemake(workdir, *args, config="config.yaml"):
    """Run the repo's workflow in ``workdir``; return the finished process."""
    command = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "--directory", str(workdir),
               "--configfile", str(REPO / config), "--cores", "2", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def job_counts(output: str) -> dict[str, int]:
    """The 'Job stats' table of a dry run."""
    table = output.split("Job stats:")[1].split("\n\n")[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}


def test_lint_is_clean():
    run = subprocess.run([SNAKEMAKE, "--lint"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Congratulations, your workflow is in a good condition!" in run.stdout + run.stderr


def test_dry_run_of_the_full_study_plans_every_split(tmp_path):
    run = snakemake(tmp_path, "-n")
    assert run.returncode == 0, run.stderr
    # 8 data sets: 7 UCI x 20 splits + Snelson's one seeded draw
    assert job_counts(run.stdout) == {"fetch": 8, "table": 8, "split": 141, "all": 1, "total": 158}


def test_dry_run_of_the_quick_study(tmp_path):
    run = snakemake(tmp_path, "-n", config="configs/quick.yaml")
    assert run.returncode == 0, run.stderr
    assert job_counts(run.stdout)["split"] == 5  # boston and concrete x 2, snelson x 1


@pytest.mark.parametrize("override, key", [
    ("datasets=[boston,bostn]", r"\$\.datasets\[1\]: unknown data set 'bostn'"),
    ("splits=-1", r"\$\.splits: -1 is less than the minimum of 1"),
    ("mirrror=/tmp", r"'mirrror' was unexpected"),
])
def test_config_error_stops_before_any_job(tmp_path, override, key):
    run = snakemake(tmp_path, "--config", override)
    assert run.returncode != 0
    assert re.search(key, run.stderr), run.stderr
    assert not (tmp_path / "data").exists() and not (tmp_path / "logs").exists()


def test_data_stage_runs_for_real(tmp_path, shared_data):
    run = snakemake(tmp_path, "--config", f"mirror={shared_data}", "datasets=[snelson,boston]", "splits=2")
    assert run.returncode == 0, run.stderr
    for name, n_train, n_test in (("boston", 455, 51), ("snelson", 100, 100)):
        split = load_split(tmp_path / f"data/splits/{name}/random/split0.npz")
        assert split.x_train.shape[0] == n_train and split.x_test.shape[0] == n_test
        assert abs(split.y_train.mean()) < 1e-10
        assert (tmp_path / f"logs/table/{name}_random.log").exists()
        assert (tmp_path / f"results/benchmarks/table/{name}_random.tsv").exists()
    assert not np.array_equal(load_split(tmp_path / "data/splits/boston/random/split1.npz").y_test,
                              load_split(tmp_path / "data/splits/boston/random/split0.npz").y_test)
    rerun = snakemake(tmp_path, "--config", f"mirror={shared_data}", "datasets=[snelson,boston]", "splits=2")
    assert rerun.returncode == 0 and "Nothing to be done" in rerun.stdout + rerun.stderr
