"""Progress a person can read: "iteration k of T (p%), it/s, elapsed, ETA" at the wall-clock interval and at
each evaluation, by the host's clock alone, and training's final state; a tqdm bar where a person watches
and none in a batch job. (Pretraining's and the exact GP's logs: tests/training/test_fit.py.)"""

import io
import itertools
import logging
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from gpstudy.cli import main
from gpstudy.kernels import RBF
from gpstudy.likelihoods import GaussianLikelihood
from gpstudy.notebook import fit
from gpstudy.runtime.host_sync import HostSyncCounter
from gpstudy.training import progress
from gpstudy.training.pretrain import pretrain_hyperparameters

REPO = Path(__file__).resolve().parents[2]
SHORT = {"iterations": 10, "eval_every": 5, "device": "cpu", "progress": False}


@pytest.fixture
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = np.sort(rng.uniform(0, 6, 40))
    return x, np.sin(x) + 0.1 * rng.standard_normal(40)


def messages(caplog, prefix: str) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.getMessage().startswith(prefix)]


def test_a_short_runs_log_has_k_of_t_percent_rate_elapsed_and_eta_at_the_interval_and_each_evaluation(
    data, monkeypatch, caplog
):
    """A host clock that moves 10 s at each reading (one a step, one at the start): with lines every 30 s, a
    line at iterations 3 and 8 by the clock, and at 5 and 10, the evaluations, by the schedule."""
    monkeypatch.setattr(progress, "clock", itertools.count(10, 10).__next__)
    caplog.set_level(logging.INFO, logger="gpstudy")
    fit(*data, "svgp", M=5, **SHORT)
    lines = messages(caplog, "training")
    assert [line.split(": objective")[0] for line in lines[:-1]] == [
        "training: iteration 3 of 10 (30%), 0.1 it/s, elapsed 0:00:30, ETA 0:01:10",
        "training: iteration 5 of 10 (50%), 0.1 it/s, elapsed 0:00:50, ETA 0:00:50",
        "training: iteration 8 of 10 (80%), 0.1 it/s, elapsed 0:01:20, ETA 0:00:20",
        "training: iteration 10 of 10 (100%), 0.1 it/s, elapsed 0:01:40, ETA 0:00:00",
    ]
    assert [": objective " in line for line in lines[:-1]] == [False, True, False, True]  # the evaluations'
    assert lines[-1].startswith("training done: objective ") and "lengthscale" in lines[-1]


def test_the_rate_and_eta_count_a_resumed_runs_iterations_since_resuming(monkeypatch):
    """Resumed at iteration 41 of 1000, at iteration 60 a minute later: 20 iterations a minute, 940 to go."""
    monkeypatch.setattr(progress, "clock", lambda: 100.0)
    line = progress.Progress("training", 1000, logging.getLogger("gpstudy.test"), start=41).line(60, 160.0)
    assert line == "iteration 60 of 1000 (6%), 0.333 it/s, elapsed 0:01:00, ETA 0:47:00"


def test_progress_lines_add_no_host_synchronisation(data, monkeypatch):
    """A line at every step (interval 0) synchronises as often, and where, as lines 30 s apart (none here)."""

    def synchronisations(every: float) -> list[tuple[str, str, bool]]:
        monkeypatch.setattr(progress, "LOG_SECONDS", every)
        with HostSyncCounter() as counter:
            fit(*data, "svgp", M=5, **SHORT)
        return [(event.where, event.operator, event.deliberate) for event in counter.events]

    every_step = synchronisations(0.0)
    assert every_step == synchronisations(30.0)
    in_the_loop = [event for event in every_step if event[0].split(":")[0] in ("fit.py", "progress.py")]
    assert in_the_loop == [] and sum(deliberate for *_, deliberate in every_step) == SHORT["iterations"]
    monkeypatch.setattr(progress, "LOG_SECONDS", 0.0)
    x, y = torch.as_tensor(data[0])[:, None], torch.as_tensor(data[1])
    kernel, likelihood = RBF(1), GaussianLikelihood(0.1)
    run = dict(subset_size=30, lr=0.01, generators=torch.Generator().manual_seed(0))
    pretrain_hyperparameters(x, y, kernel, likelihood, iterations=2, **run)  # warm-up
    with HostSyncCounter() as counter:  # a line at every step, and only the deliberate one per step
        pretrain_hyperparameters(x, y, kernel, likelihood, iterations=5, **run)
    assert counter.unexpected() == [] and len(counter.events) == 5, counter.summary()


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_person_watches_a_terminal_or_a_notebook_never_a_snakemake_job(monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    assert not progress.watched()  # a file or a pipe: a batch job
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert progress.watched()
    monkeypatch.setattr(
        sys.modules["__main__"], "snakemake", types.SimpleNamespace(scriptdir=str(REPO / "scripts")), raising=False
    )
    assert not progress.watched()
    monkeypatch.delattr(sys.modules["__main__"], "snakemake")
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    assert progress.watched()


def test_gpstudy_train_shows_a_bar_on_a_terminal_and_none_in_a_batch_job(tmp_path, monkeypatch, shared_data):
    pytest.importorskip("tqdm")
    monkeypatch.chdir(tmp_path)
    command = [
        "train",
        "--configfile",
        str(REPO / "configs/quick.yaml"),
        "--dataset",
        "snelson",
        "--method",
        "svgp",
        "--M",
        "5",
        "--iterations",
        "20",
        "--mirror",
        str(shared_data),
    ]
    for stream, bar in ((io.StringIO(), False), (Terminal(), True)):
        monkeypatch.setattr(sys, "stderr", stream)
        main(command + ["--out", str(tmp_path / type(stream).__name__)])
        assert ("20/20 [" in stream.getvalue()) == bar, stream.getvalue()


def test_the_first_iteration_compiling_makes_no_eta_of_days(monkeypatch, caplog):
    """Seen in a loaded paper-cpu run: a compiled FBNN's first iteration took 4.5 minutes and its line said "ETA
    124 days". The first iteration's line gives its time; the rate counts the iterations after it."""
    times = iter([0.0, 270.0, 300.0])  # start; iteration 1 done after 270 s; iteration 301 30 s later
    monkeypatch.setattr(progress, "clock", times.__next__)
    caplog.set_level(logging.INFO, logger="gpstudy")
    loop = progress.Progress("training", 40000, logging.getLogger("gpstudy.test"))
    loop.step(1, "objective 1")
    loop.step(301)
    assert messages(caplog, "training") == [
        "training: iteration 1 of 40000 (0%), elapsed 0:04:30 (the first iteration: compilation, warm-up), ETA at "
        "the next line: objective 1",
        "training: iteration 301 of 40000 (1%), 10.0 it/s, elapsed 0:05:00, ETA 1:06:10",
    ]
