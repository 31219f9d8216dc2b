"""One copy of the code per study (issue 36, item 4): a Snakemake job whose process imports another gpstudy
than the checkout that planned it, with other code, refuses to start with a one-line error naming both and
the way out; a copy of the same code (a fresh non-editable install) runs."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpstudy.io import PACKAGE
from gpstudy.runtime.job import CodeCopyError, check_same_code, duration, job_name

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
MANIFEST = "data/raw/snelson/files_random.json"  # a small job: Snelson's files fetched from the mirror


def test_the_same_package_or_a_copy_of_its_code_is_one_copy(tmp_path, package_copy):
    check_same_code(PACKAGE)
    check_same_code(PACKAGE, running=package_copy(tmp_path, changed=False) / "gpstudy")


def test_another_copy_of_the_code_is_refused_naming_both_and_the_way_out(tmp_path, package_copy):
    changed = package_copy(tmp_path, changed=True) / "gpstudy"
    for planned, running in ((PACKAGE, changed), (changed, PACKAGE), (tmp_path / "missing", PACKAGE)):
        with pytest.raises(CodeCopyError) as refused:
            check_same_code(planned, running=running)
        message = str(refused.value)
        assert f"from {running.resolve()}, not the workflow's {planned.resolve()}" in message
        assert f"pip install -e {planned.resolve().parent}" in message and "\n" not in message


@pytest.mark.parametrize("path", ["job", "plan"])
def test_a_snakemake_job_refuses_another_gpstudy(tmp_path, shared_data, package_copy, path):
    """``job``: a changed copy first on the jobs' path (PYTHONPATH; the plan imports the checkout, Snakemake
    puts it first): the job stops before its script does anything, the message on Snakemake's console.
    ``plan``: the checkout on PYTHONPATH behind the changed copy, so that the plan itself imports the copy:
    Snakemake stops before any job. (A copy of the same code runs: the test above, and tests/test_wheel.py's.)"""
    copy = package_copy(tmp_path / "copy", changed=True)
    search = [str(copy), str(REPO)] if path == "plan" else [str(copy)]
    workdir = tmp_path / "work"
    command = [
        SNAKEMAKE,
        "-s",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(REPO / "configs/quick.yaml"),
        "--config",
        f"mirror={shared_data}",
        "--cores",
        "1",
        MANIFEST,
    ]
    run = subprocess.run(
        command, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": os.pathsep.join(search)}
    )
    output = run.stdout + run.stderr
    assert run.returncode != 0 and not (workdir / MANIFEST).is_file(), output
    named = f"this process imports gpstudy from {copy.resolve() / 'gpstudy'}, not the workflow's {REPO / 'gpstudy'}"
    assert named in output, output
    assert ('rules/common.smk", line' in output) == (path == "plan"), output  # where it stopped


def test_every_job_log_names_the_job_and_what_it_wrote(tmp_path, shared_data):
    """Issue 37: a split job's log was empty. Fetch, tabulate and split of Snelson, three real jobs: each log
    starts with its rule and wildcards and ends with its run time and outputs; the split's says its rows."""
    target = "data/splits/snelson/random/split0.npz"
    command = [
        SNAKEMAKE,
        "-s",
        str(REPO / "Snakefile"),
        "--directory",
        str(tmp_path),
        "--configfile",
        str(REPO / "configs/quick.yaml"),
        "--config",
        f"mirror={shared_data}",
        "--cores",
        "1",
        target,
    ]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    logs = {
        path.relative_to(tmp_path / "logs").parts[0]: path.read_text() for path in (tmp_path / "logs").rglob("*.log")
    }
    assert set(logs) == {"fetch", "tabulate", "split"}
    split = logs["split"]
    assert "rule split (dataset=snelson, protocol=random, split=0) started, pid" in split.splitlines()[0]
    assert "snelson split 0 (random): " in split and " training and " in split
    assert "rule split (dataset=snelson, protocol=random, split=0) ended after " in split
    assert split.rstrip().endswith(f"1 of its 1 outputs written\n  {target}")
    for rule, text in logs.items():
        assert text.splitlines()[0].split(" INFO gpstudy.runtime.job: ")[1].startswith(f"rule {rule} ("), text
        assert "outputs written" in text, text


def test_a_job_and_its_time_read_as_its_log_and_the_studys_console_name_them():
    assert job_name("train", {"dataset": "boston", "M": 100}) == "train (dataset=boston, M=100)"
    assert job_name("collect", {}) == "collect"
    assert [duration(s) for s in (0, 59.6, 61, 3600 * 25 + 7)] == ["0:00:00", "0:01:00", "0:01:01", "1 day, 1:00:07"]
