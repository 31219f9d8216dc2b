"""A job stopped by a signal (a cluster's warning ahead of its time limit, a preemption, ``kill``) checkpoints,
exits with the rerun status, and its rerun resumes to an uninterrupted run's numbers (issue 38)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from gpstudy import paths
from gpstudy.data import Split, save_split
from gpstudy.training.stopping import RERUN_STATUS, stop_signals

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
WAIT_SECONDS = 120  # at most, for a state the subprocess reaches in seconds on an idle machine


def wait_for(condition, process: subprocess.Popen, what: str) -> None:
    """Poll until ``condition()`` holds; fail if ``process`` ends first or WAIT_SECONDS pass."""
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        assert process.poll() is None, f"the process ended (status {process.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} within {WAIT_SECONDS} s"
        time.sleep(0.01)


ITERATIONS = 400  # of which some ms each: the run goes on for seconds after its first checkpoint, at 5


def train_command(shared_data: Path, out: Path) -> list[str]:
    """``gpstudy train`` of SVGP on Snelson (configs/quick.yaml), ITERATIONS steps, a checkpoint every 5
    (the file ``every5.yaml`` beside ``out``)."""
    (out.parent / "every5.yaml").write_text("training: {checkpoint_every: 5, eval_every: 100}\n")
    return [
        sys.executable,
        "-c",
        "from gpstudy.cli import main; main()",
        "train",
        "--configfile",
        str(REPO / "configs/quick.yaml"),
        str(out.parent / "every5.yaml"),
        "--dataset",
        "snelson",
        "--method",
        "svgp",
        "--M",
        "5",
        "--iterations",
        str(ITERATIONS),
        "--mirror",
        str(shared_data),
        "--out",
        str(out),
        "--threads",
        "1",
    ]


def run(command: list[str], cwd: Path, log: Path) -> int:
    with open(log, "w") as stderr:
        return subprocess.run(
            command,
            cwd=cwd,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            timeout=600,
        ).returncode


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, shared_data) -> dict:
    """The metrics of the run uninterrupted."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    assert run(train_command(shared_data, folder / "run"), folder, folder / "run.log") == 0
    return json.loads((folder / "run/metrics.json").read_text())


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGUSR1])
def test_a_signalled_train_checkpoints_exits_for_a_rerun_which_resumes_to_the_same_numbers(
    tmp_path, shared_data, stop, uninterrupted
):
    out = tmp_path / "stopped"
    with open(tmp_path / "first.log", "w") as stderr:
        process = subprocess.Popen(
            train_command(shared_data, out),
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        try:
            wait_for((out / "checkpoint.pt").exists, process, "first checkpoint")  # training under way
            process.send_signal(stop)
            status = process.wait(timeout=WAIT_SECONDS)
        finally:
            process.kill()
    first = (tmp_path / "first.log").read_text()
    assert status == RERUN_STATUS, first
    logged = [
        int(line.split("checkpointed at iteration ")[1].split()[0])
        for line in first.splitlines()
        if f"on {stop.name}; exit status {RERUN_STATUS}" in line
    ]
    assert len(logged) == 1 and 5 <= logged[0] < ITERATIONS, first
    assert torch.load(out / "checkpoint.pt", weights_only=True)["step"] == logged[0]
    assert not (out / "metrics.json").exists()

    assert run(train_command(shared_data, out), tmp_path, tmp_path / "rerun.log") == 0
    assert f"resumed from {out / 'checkpoint.pt'} at iteration {logged[0] + 1}" in (tmp_path / "rerun.log").read_text()
    resumed = json.loads((out / "metrics.json").read_text())
    for key in ("rmse", "test_ll", "hyperparameters", "status"):
        assert resumed[key] == uninterrupted[key]  # bit for bit: the same steps on the same device


SIGNALLED_TWICE = """
import logging, os, signal, sys, time
from pathlib import Path
import gpstudy.training.checkpoint as checkpoint
from gpstudy.data import load_split
from gpstudy.study import load_config, run_settings
from gpstudy.training import train_splits

real_save = checkpoint.torch.save

def save(state, file):  # in the writer thread: SIGTERM during the periodic write at 5, again during the stop's write
    if state["step"] != 5:
        real_save(state, file)  # the new checkpoint half written: flushed, not yet renamed into place
        file.flush()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.5)  # the main thread, waiting for this write, runs its handler meanwhile
    else:
        os.kill(os.getpid(), signal.SIGTERM)
        real_save(state, file)

checkpoint.torch.save = save
logging.basicConfig(level=logging.INFO)
split, out, config = sys.argv[1:4]
settings = run_settings(load_config(config), None, method="svgp", M=6, iterations=40, batch_size=16, eval_every=5,
                        checkpoint_every=5)
train_splits({0: load_split(split)}, settings, {0: Path(out) / "run"}, Path(out) / "c.pt")
"""


def test_a_second_sigterm_during_the_checkpoint_write_leaves_it_whole(tmp_path):
    toy_split(tmp_path / "split.npz")
    stopped = subprocess.run(
        [sys.executable, "-c", SIGNALLED_TWICE, str(tmp_path / "split.npz"), str(tmp_path), str(REPO / "config.yaml")],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert stopped.returncode == RERUN_STATUS, stopped.stderr
    step = torch.load(tmp_path / "c.pt", weights_only=True)["step"]  # whole: it loads
    assert 5 < step < 40 and f"checkpointed at iteration {step} on SIGTERM" in stopped.stderr
    assert list(tmp_path.glob(".c.pt.*")) == []  # the write finished and was renamed into place


def toy_split(path: Path) -> None:
    """A split of 40 training and 10 test points of two inputs, saved at ``path``."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, size=(50, 2))
    y = np.sin(2 * x[:, 0]) + 0.1 * rng.normal(size=50)
    save_split(path, Split(x[:40], y[:40], x[40:], y[40:], np.zeros(2), np.ones(2), 0.0, 1.0, {}))


PRETRAIN_ITERATIONS = 300  # of a few ms each: a second or more of pretraining, far more than the signal takes
STOPPED, TWIN = ({"dataset": name, "protocol": "random", "split": 0} for name in ("stopped", "twin"))  # their jobs


def pretraining_workflow(workdir: Path) -> list[str]:
    """A work folder whose config pretrains two user data sets, ``stopped`` and ``twin``, alike
    (PRETRAIN_ITERATIONS steps) on the same split 0, made by hand; the Snakemake command that runs the two
    pretrain jobs alone, each whatever becomes of the other (``--keep-going``)."""
    options = {
        "format": "csv",
        "target": -1,
        "task": "regression",
        "pretrain": True,
        "pretrain_iterations": PRETRAIN_ITERATIONS,
    }
    for job in (STOPPED, TWIN):
        toy_split(workdir / paths.SPLIT.format(**job))
    (workdir / "config.yaml").write_text(
        yaml.safe_dump(
            {
                "datasets": ["stopped", "twin"],
                "splits": 1,
                "device": "cpu",
                "dataset_options": {
                    job["dataset"]: {"source": {"file": "data.csv", "sha256": "0" * 64}, **options}
                    for job in (STOPPED, TWIN)
                },
                "experiments": {"pretrained": {"datasets": ["stopped", "twin"], "methods": {"svgp": [5]}}},
            }
        )
    )
    return [
        SNAKEMAKE,
        "-s",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(workdir / "config.yaml"),
        "--cores",
        "1",
        "--allowed-rules",
        "pretrain",
        "--keep-going",
        "--",
        *(paths.PRETRAINED.format(**job) for job in (STOPPED, TWIN)),
    ]


def job_pid(log: Path) -> int | None:
    """The pid a Snakemake job's log names (``gpstudy.runtime.job.log_job``), once it does."""
    started = [line for line in log.read_text().splitlines() if " started, pid " in line] if log.exists() else []
    return int(started[-1].rsplit(" ", 1)[1]) if started else None


def catches(pid: int, number: signal.Signals) -> bool:
    """Whether process ``pid`` has a handler of its own for signal ``number`` (Linux: /proc/<pid>/status)."""
    caught = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) >> (number - 1) & 1)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads signal handlers from Linux's /proc")
def test_a_signalled_pretraining_job_checkpoints_exits_for_a_rerun_which_resumes_to_the_same_numbers(tmp_path):
    """The pretrain rule's job sent SIGTERM while it pretrains (its handler installed: the loop runs) checkpoints and
    exits 75; Snakemake's rerun resumes it at the next iteration, to the hyperparameters of an uninterrupted run:
    its twin's, the same pretraining on the same split, run meanwhile by the same Snakemake."""
    command = pretraining_workflow(tmp_path)
    log = tmp_path / "logs/pretrain/stopped/random/split0.log"
    checkpoint, output = (
        tmp_path / pattern.format(**STOPPED) for pattern in (paths.PRETRAIN_CHECKPOINT, paths.PRETRAINED)
    )
    with open(tmp_path / "first.log", "w") as stderr:
        snakemake = subprocess.Popen(
            command, cwd=tmp_path, stdout=stderr, stderr=stderr, env={**os.environ, "PYTHONPATH": str(REPO)}
        )
        try:
            wait_for(lambda: job_pid(log) is not None, snakemake, "the pretraining job's start")
            wait_for(lambda: catches(job_pid(log), signal.SIGTERM), snakemake, "pretraining under way")
            os.kill(job_pid(log), signal.SIGTERM)
            snakemake.wait(timeout=WAIT_SECONDS)
        finally:
            snakemake.kill()
    first = log.read_text()
    assert snakemake.returncode != 0 and f"exit status {RERUN_STATUS}" in (tmp_path / "first.log").read_text(), first
    logged = [
        int(line.split("checkpointed at iteration ")[1].split()[0])
        for line in first.splitlines()
        if f"on SIGTERM; exit status {RERUN_STATUS}: rerun to resume" in line
    ]
    assert len(logged) == 1 and 1 <= logged[0] < PRETRAIN_ITERATIONS, first
    assert torch.load(checkpoint, weights_only=True)["step"] == logged[0] and not output.exists()

    assert run(command, tmp_path, tmp_path / "rerun.log") == 0, (tmp_path / "rerun.log").read_text()
    resumed_at = f"resumed from {paths.PRETRAIN_CHECKPOINT.format(**STOPPED)} at iteration {logged[0] + 1}"
    assert resumed_at in log.read_text() and not checkpoint.exists()
    uninterrupted = tmp_path / paths.PRETRAINED.format(**TWIN)
    assert "resumed from" not in (tmp_path / "logs/pretrain/twin/random/split0.log").read_text()
    assert json.loads(output.read_text()) == json.loads(uninterrupted.read_text())  # bit for bit: the same steps


PRETRAINING_SIGNALLED_TWICE = """
import logging, os, signal, sys
from pathlib import Path
import gpstudy.training.checkpoint as checkpoint
import gpstudy.training.pretrain as pretrain
from gpstudy.data import load_split
from gpstudy.study import load_config, run_settings
from gpstudy.training import pretrain_splits

real_step, real_save, steps = pretrain.optimizer_step, checkpoint.torch.save, []

def step(*args, **kwargs):  # SIGTERM during step 3
    steps.append(1)
    if len(steps) == 3:
        os.kill(os.getpid(), signal.SIGTERM)
    return real_step(*args, **kwargs)

def save(state, file):  # SIGTERM again during the checkpoint's write: flushed, not yet renamed into place
    real_save(state, file)
    file.flush()
    os.kill(os.getpid(), signal.SIGTERM)

pretrain.optimizer_step, checkpoint.torch.save = step, save
logging.basicConfig(level=logging.INFO)
split, out, config = sys.argv[1:4]
settings = run_settings(load_config(config), None, method="exact", M=1, pretrain_iterations=40, pretrain_subset=30)
pretrain_splits({0: load_split(split)}, settings, Path(out) / "c.pt")
"""


def test_a_second_sigterm_during_the_pretraining_checkpoints_write_leaves_it_whole(tmp_path):
    toy_split(tmp_path / "split.npz")
    stopped = subprocess.run(
        [
            sys.executable,
            "-c",
            PRETRAINING_SIGNALLED_TWICE,
            str(tmp_path / "split.npz"),
            str(tmp_path),
            str(REPO / "config.yaml"),
        ],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert stopped.returncode == RERUN_STATUS, stopped.stderr
    assert torch.load(tmp_path / "c.pt", weights_only=True)["step"] == 3  # whole: it loads
    assert "checkpointed at iteration 3 on SIGTERM; exit status 75: rerun to resume" in stopped.stderr
    assert list(tmp_path.glob(".c.pt.*")) == []  # the write finished and was renamed into place


def test_stop_signals_are_recorded_inside_and_the_handlers_before_are_back_after(recorded_signals):
    handlers = [signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGUSR1)]
    with stop_signals() as stop:
        assert not stop
        signal.raise_signal(signal.SIGUSR1)
        signal.raise_signal(signal.SIGTERM)  # a second signal: recorded no more
        assert stop and stop.name == "SIGUSR1" and recorded_signals == []
    assert [signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGUSR1)] == handlers
    signal.raise_signal(signal.SIGTERM)
    assert recorded_signals == [signal.SIGTERM]  # the handler of before
    with stop_signals(enabled=False) as stop:
        signal.raise_signal(signal.SIGUSR1)
    assert not stop and recorded_signals == [signal.SIGTERM, signal.SIGUSR1]
