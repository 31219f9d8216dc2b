"""Faults and bad input: a result is never silently wrong, and a fault of the machine fails the job.

Each test injects one fault into a tiny run and checks what happens (issue: reliability).
"""

import copy
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from gpstudy.cli import main
from gpstudy.data import (
    ChecksumError,
    DataError,
    FetchError,
    Split,
    fetch_dataset,
    get_dataset,
    load_split,
    load_table,
    prepare_split,
    prepare_table,
    save_split,
)
from gpstudy.data.uci import read_index_split
from gpstudy.io import UnreadableFileError, read_json
from gpstudy.linalg import CholeskyError
from gpstudy.report.results import collect_runs
from gpstudy.study import ConfigError, validate_config
from gpstudy.training import run_splits, train_splits
from gpstudy.training.checkpoint import CheckpointError

REPO = Path(__file__).resolve().parents[2]


def toy_split(n: int = 40, n_test: int = 10, seed: int = 0) -> Split:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, size=(n + n_test, 2))
    y = np.sin(2 * x[:, 0]) + 0.1 * rng.normal(size=n + n_test)
    return Split(x[:n], y[:n], x[n:], y[n:], np.zeros(2), np.ones(2), 0.0, 1.0, {})


def interrupted_checkpoint(tmp_path, settings, monkeypatch):
    """Train until the checkpoint of iteration 10, then crash; returns the checkpoint's path."""
    import gpstudy.training.run as run_module

    real, calls = run_module.task_metrics, {"n": 0}

    def crash_at_third_evaluation(*args):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt("killed")
        return real(*args)

    monkeypatch.setattr(run_module, "task_metrics", crash_at_third_evaluation)
    with pytest.raises(KeyboardInterrupt):
        train_splits({0: toy_split()}, settings, {0: tmp_path / "run"}, tmp_path / "c.pt")
    monkeypatch.setattr(run_module, "task_metrics", real)
    assert (tmp_path / "c.pt").exists()
    return tmp_path / "c.pt"


def test_a_checkpoint_of_other_settings_is_discarded_not_resumed(tmp_path, monkeypatch, settings_for, caplog, capfd):
    settings = settings_for("svgp", 6, iterations=20, batch_size=16, eval_every=5, checkpoint_every=10)
    checkpoint = interrupted_checkpoint(tmp_path, settings, monkeypatch)
    changed = settings_for("svgp", 6, iterations=20, batch_size=16, eval_every=5, checkpoint_every=10, lr=0.01)
    capfd.readouterr()
    with monkeypatch.context() as job:
        job.setattr(sys, "stderr", io.StringIO())  # a job's stderr goes to its log file (gpstudy.runtime.job.log_to)
        resumed = train_splits({0: toy_split()}, changed, {0: tmp_path / "run"}, checkpoint)
    console = capfd.readouterr().err  # the process's own stderr, which Snakemake shows (issue 35, item 11c)
    fresh = train_splits({0: toy_split()}, changed, {0: tmp_path / "fresh"}, tmp_path / "fresh.pt")
    assert "belongs to other settings" in caplog.text
    assert f"checkpoint {checkpoint} belongs to other settings" in console and console.count("\n") == 1
    assert resumed[0]["rmse"] == fresh[0]["rmse"]  # the new settings from the start, not the old run's state


def test_a_checkpoint_of_other_data_is_discarded(tmp_path, monkeypatch, settings_for, caplog):
    settings = settings_for("svgp", 6, iterations=20, batch_size=16, eval_every=5, checkpoint_every=10)
    checkpoint = interrupted_checkpoint(tmp_path, settings, monkeypatch)
    other = train_splits({0: toy_split(seed=1)}, settings, {0: tmp_path / "run"}, checkpoint)
    fresh = train_splits({0: toy_split(seed=1)}, settings, {0: tmp_path / "fresh"}, tmp_path / "fresh.pt")
    assert "belongs to other settings" in caplog.text and other[0]["rmse"] == fresh[0]["rmse"]


def test_a_checkpoint_that_runs_code_is_refused(tmp_path, settings_for, capsys):
    class Planted:
        def __reduce__(self):
            return (print, ("planted code ran",))

    torch.save({"fingerprint": "", "method": Planted()}, tmp_path / "c.pt")
    settings = settings_for("svgp", 6, iterations=5, batch_size=16)
    with pytest.raises(CheckpointError, match=r"(?s)c\.pt cannot be read .*delete it"):
        run_splits({0: toy_split()}, settings, {0: tmp_path / "run"}, tmp_path / "c.pt", {0: {}})
    assert "planted code ran" not in capsys.readouterr().out


def test_a_corrupt_checkpoint_fails_the_job_and_names_the_file(tmp_path, settings_for):
    (tmp_path / "c.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="c.pt cannot be read"):
        run_splits(
            {0: toy_split()}, settings_for("svgp", 6, iterations=5), {0: tmp_path / "run"}, tmp_path / "c.pt", {0: {}}
        )
    assert not (tmp_path / "run/metrics.json").exists()  # no permanent failed row: a rerun retries


KILLED_WHILE_WRITING = """
import os, signal, sys
from pathlib import Path
import gpstudy.training.checkpoint as checkpoint
from gpstudy.data import load_split
from gpstudy.study import load_config, run_settings
from gpstudy.training import train_splits

real_save = checkpoint.torch.save

def save(state, file):  # the second checkpoint is half written when the process is killed
    real_save(state, file)
    if state["step"] == 10:
        file.truncate(1000)
        file.flush()
        os.kill(os.getpid(), signal.SIGKILL)

checkpoint.torch.save = save
split, out, config = sys.argv[1:4]
settings = run_settings(load_config(config), None, method="svgp", M=6, iterations=20, batch_size=16, eval_every=5,
                        checkpoint_every=5)
train_splits({0: load_split(split)}, settings, {0: Path(out) / "run"}, Path(out) / "c.pt")
"""


def test_a_kill_while_a_checkpoint_is_written_resumes_from_the_one_before_bit_identically(tmp_path, settings_for):
    save_split(tmp_path / "split.npz", toy_split())
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            KILLED_WHILE_WRITING,
            str(tmp_path / "split.npz"),
            str(tmp_path / "b"),
            str(REPO / "config.yaml"),
        ],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -9, killed.stderr
    assert torch.load(tmp_path / "b/c.pt", weights_only=True)["step"] == 5  # the previous checkpoint, whole
    partial = list((tmp_path / "b").glob(".c.pt.*"))  # the write the kill cut short (88-288 MB on a real run)
    assert len(partial) == 1 and partial[0].stat().st_size == 1000
    settings = settings_for("svgp", 6, iterations=20, batch_size=16, eval_every=5, checkpoint_every=5)
    split = load_split(tmp_path / "split.npz")
    resumed = train_splits({0: split}, settings, {0: tmp_path / "b/run"}, tmp_path / "b/c.pt")
    assert list((tmp_path / "b").glob(".c.pt.*")) == []  # the partial file removed at the start of the rerun
    uninterrupted = train_splits({0: split}, settings, {0: tmp_path / "a/run"}, tmp_path / "a/c.pt")
    for key in ("rmse", "test_ll", "hyperparameters"):
        assert resumed[0][key] == uninterrupted[0][key]
    curves = [pd.read_csv(tmp_path / f"{run}/run/learning_curve.csv").drop(columns="seconds") for run in ("a", "b")]
    pd.testing.assert_frame_equal(curves[0], curves[1])
    assert len(curves[0]) == 4


def test_a_cholesky_that_no_jitter_saves_is_a_failed_row(tmp_path, settings_for, monkeypatch):
    import gpstudy.training.run as run_module

    def failing(*args, **kwargs):
        raise CholeskyError("not positive definite")

    monkeypatch.setattr(run_module, "fit", failing)
    metrics = run_splits(
        {0: toy_split()},
        settings_for("svgp", 6, iterations=5, dtype="float32"),
        {0: tmp_path / "run"},
        tmp_path / "c.pt",
        {0: {"dataset": "toy"}},
    )
    written = json.loads((tmp_path / "run/metrics.json").read_text())
    assert written["status"] == "failed: CholeskyError: not positive definite" and np.isnan(metrics[0]["rmse"])
    assert written["dtype"] == "float32"  # what it failed at (issue 35, item 11d)


def test_a_nan_training_target_fails_the_job_naming_the_split(tmp_path, settings_for):
    split = toy_split()
    split.y_train[7] = np.nan
    with pytest.raises(DataError, match=r"split 3: 1 missing or infinite value\(s\) in y_train, the first in row 7"):
        run_splits({3: split}, settings_for("svgp", 6, iterations=5), {3: tmp_path / "run"}, tmp_path / "c.pt", {3: {}})
    assert not (tmp_path / "run/metrics.json").exists()  # bad input is no failed row of the method


def test_metrics_that_turn_non_finite_make_a_failed_row_with_the_reason(tmp_path, settings_for, monkeypatch):
    import gpstudy.training.run as run_module

    real = run_module.task_metrics

    def nan_rmse(*args):
        return {**real(*args), "rmse": torch.tensor([float("nan")])}

    monkeypatch.setattr(run_module, "task_metrics", nan_rmse)
    metrics = run_splits(
        {0: toy_split()},
        settings_for("svgp", 6, iterations=10, eval_every=5),
        {0: tmp_path / "run"},
        tmp_path / "c.pt",
        {0: {}},
    )
    assert metrics[0]["status"] == "failed: non-finite rmse at iteration 5 (the method diverged)"


def test_a_rerun_leaves_nothing_of_the_earlier_run(tmp_path, settings_for, monkeypatch):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "learning_curve.csv").write_text("stale")
    (folder / "predictions.csv").write_text("stale")
    import gpstudy.training.run as run_module

    monkeypatch.setattr(run_module, "fit", lambda *args, **kwargs: (_ for _ in ()).throw(CholeskyError("x")))
    run_splits({0: toy_split()}, settings_for("svgp", 6, iterations=5), {0: folder}, tmp_path / "c.pt", {0: {}})
    assert sorted(path.name for path in folder.iterdir()) == ["metrics.json"]


@pytest.mark.parametrize(
    "argument, message",
    [
        (["--M", "0"], "argument --M: 0 is less than 1"),
        (["--M", "-5"], "argument --M: -5 is less than 1"),
        (["--M", "5", "--iterations", "0"], "argument --iterations: 0 is less than 1"),
    ],
)
def test_the_cli_checks_its_arguments_like_the_config(tmp_path, monkeypatch, capsys, argument, message, shared_data):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit:
        main(["train", "--dataset", "boston", "--method", "svgp", *argument, "--mirror", str(shared_data)])
    assert exit.value.code == 2 and capsys.readouterr().err.startswith("gpstudy train: " + message)
    assert not (tmp_path / "results").exists()


def test_a_nan_in_the_config_is_named(study_config):
    config = copy.deepcopy(study_config)
    config["training"]["lr"] = float("nan")
    with pytest.raises(ConfigError, match=r"\$\.training\.lr: a number must be finite"):
        validate_config(config)


def test_a_disk_full_while_writing_results_fails_the_job(tmp_path, settings_for, monkeypatch):
    import gpstudy.training.run as run_module

    def disk_full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(run_module, "write_csv", disk_full)
    with pytest.raises(OSError, match="No space left"):
        run_splits(
            {0: toy_split()}, settings_for("svgp", 6, iterations=5), {0: tmp_path / "run"}, tmp_path / "c.pt", {0: {}}
        )
    assert not (tmp_path / "run/metrics.json").exists()


# The data stage: a fetched file changed since, damaged files of the pipeline, bad index files, the mirror.


def fetched_boston(tmp_path, shared_data, protocol="index_files") -> Path:
    """Boston fetched from the mirror into ``tmp_path/raw``; the manifest's path."""
    manifest = tmp_path / "raw/files.json"
    fetch_dataset(get_dataset("boston"), protocol, manifest.parent, manifest, mirror=str(shared_data))
    return manifest


def test_a_raw_file_changed_after_fetching_is_refused(tmp_path, shared_data):
    manifest = fetched_boston(tmp_path, shared_data)
    prepare_table(get_dataset("boston"), "index_files", manifest, tmp_path / "table.npz")
    with open(tmp_path / "raw/data.txt", "a") as edit:
        edit.write("1 " * 14 + "\n")
    with pytest.raises(ChecksumError, match=r"raw/data\.txt: sha256 \w+ is not the \w+ recorded in .*files\.json"):
        prepare_table(get_dataset("boston"), "index_files", manifest, tmp_path / "again.npz")
    (tmp_path / "raw/data.txt").write_bytes((shared_data / "boston/data.txt").read_bytes())
    (tmp_path / "raw/index_test_0.txt").write_text("1\n2\n")
    with pytest.raises(ChecksumError, match="index_test_0.txt"):
        prepare_split(get_dataset("boston"), "index_files", 0, tmp_path / "table.npz", manifest, tmp_path / "s.npz")


@pytest.mark.parametrize(
    "content, message",
    [
        ("3\n-1\n5\n", r"index_test_0\.txt: line 2 holds -1, not a row of data\.txt's 506"),
        ("3\n506\n", r"line 2 holds 506"),
        ("3\n4\n3\n", r"index_test_0\.txt: row 3 is listed 2 times"),
        ("", r"index_test_0\.txt: no row indices"),
        ("3\nx7\n", r"index_test_0\.txt: not a list of row indices"),
    ],
)
def test_a_bad_index_file_is_refused_naming_it(tmp_path, shared_data, content, message):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "index_train_0.txt").write_text("0\n1\n2\n")
    (raw / "index_test_0.txt").write_text(content)
    with pytest.raises(DataError, match=message):
        read_index_split(raw, 0, 506)


def test_a_damaged_split_names_its_file(tmp_path):
    save_split(tmp_path / "split.npz", toy_split())
    data = (tmp_path / "split.npz").read_bytes()
    (tmp_path / "split.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(UnreadableFileError, match=r"split\.npz: not a split .*delete it and rerun"):
        load_split(tmp_path / "split.npz")


def test_a_split_file_holding_nan_names_the_file_array_and_row(tmp_path):
    split = toy_split()
    split.x_test[4, 1] = np.inf
    save_split(tmp_path / "split.npz", split)
    with pytest.raises(DataError, match=r"split\.npz: 1 missing or infinite value\(s\) in x_test, the first in row 4"):
        load_split(tmp_path / "split.npz")


def test_a_damaged_table_names_its_file(tmp_path):
    (tmp_path / "table.npz").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(UnreadableFileError, match=r"table\.npz: not a table"):
        load_table(tmp_path / "table.npz")


@pytest.mark.parametrize("name", ["metrics.json", "pretrained.json"])
def test_a_truncated_json_names_its_file(tmp_path, name):
    (tmp_path / name).write_text('{"rmse": 0.5, "sta')
    with pytest.raises(UnreadableFileError, match=rf"{name}: not valid JSON"):
        read_json(tmp_path / name)
    if name == "metrics.json":
        with pytest.raises(UnreadableFileError, match=name):
            collect_runs([tmp_path / name])


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_a_mirror_that_is_no_directory_is_reported_once_by_name(tmp_path, kind):
    mirror = tmp_path / "mirror"
    if kind == "file":
        mirror.write_text("")
    reason = "it is a file" if kind == "file" else "it does not exist"
    with pytest.raises(FetchError, match=rf"^mirror '{mirror}': {mirror} is not a directory \({reason}\)$"):
        fetch_dataset(
            get_dataset("boston"), "random", tmp_path / "raw", tmp_path / "raw/files.json", mirror=str(mirror)
        )


def test_a_job_dies_with_its_parent(tmp_path):
    """``start_job`` ties a script to Snakemake: killing the parent with SIGKILL ends the child too."""
    child = (
        "import sys, time; from gpstudy.runtime.job import start_job; start_job(sys.argv[1]); "
        "print('started', flush=True); time.sleep(60)"
    )
    parent = (
        "import subprocess, sys; child = subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2]], "
        "stdout=subprocess.PIPE, text=True); child.stdout.readline(); print(child.pid, flush=True); "
        "import time; time.sleep(60)"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", parent, child, str(tmp_path / "job.log")],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    child_pid = int(process.stdout.readline())
    process.kill()
    process.wait()
    deadline = time.time() + 10
    while Path(f"/proc/{child_pid}").exists() and time.time() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{child_pid}").exists(), "the job outlived its killed parent"
