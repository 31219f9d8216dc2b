"""Checkpoints: when they are due, the host copy training cannot change, the background write and its errors."""

import logging
import threading

import pytest
import torch

from gpstudy.training.checkpoint import Checkpointer, CheckpointError, load

CPU = torch.device("cpu")


class Clock:
    """A wall clock the test moves by hand."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_checkpoint_is_due_when_its_minutes_have_passed_or_its_iterations(tmp_path):
    clock = Clock()
    by_time = Checkpointer(tmp_path / "c.pt", CPU, every=None, minutes=2, clock=clock)
    clock.now = 119.0
    assert not by_time.due(1)
    clock.now = 120.0
    assert by_time.due(2)
    with by_time:
        by_time.write({"step": 2})
    clock.now = 239.0  # two minutes since the start, 119 s since the last checkpoint
    assert not by_time.due(3)
    both = Checkpointer(tmp_path / "d.pt", CPU, every=5, minutes=2, clock=clock)
    assert [step for step in range(1, 12) if both.due(step)] == [5, 10]
    clock.now += 120
    assert both.due(11)
    assert not Checkpointer(None, CPU, every=1, minutes=1e-9, clock=clock).due(1)  # no file, no checkpoint


def blocked_save(monkeypatch) -> threading.Event:
    """Make the writer thread wait before it writes until the returned event is set."""
    import gpstudy.training.checkpoint as checkpoint_module

    release, real = threading.Event(), checkpoint_module.save

    def save(*args):
        release.wait()
        real(*args)

    monkeypatch.setattr(checkpoint_module, "save", save)
    return release


def test_what_is_written_is_the_state_when_the_checkpoint_was_taken(tmp_path, monkeypatch):
    release = blocked_save(monkeypatch)
    weights, curve = torch.arange(6.0).reshape(2, 3), [{"iteration": 1, "objective": [1.0, 2.0]}]
    with Checkpointer(tmp_path / "c.pt", CPU, every=1, minutes=None) as checkpoints:
        checkpoints.write({"method": {"weights": weights}, "curve": curve, "fingerprint": "run"})
        weights.mul_(-1)  # training goes on in place while the writer waits
        curve.append({"iteration": 2, "objective": [0.0, 0.0]})
        curve[0]["objective"][0] = 5.0
        release.set()
        checkpoints.wait()
        assert torch.equal(load(tmp_path / "c.pt", "run", CPU)["method"]["weights"], torch.arange(6.0).reshape(2, 3))
        assert load(tmp_path / "c.pt", "run", CPU)["curve"] == [{"iteration": 1, "objective": [1.0, 2.0]}]
        checkpoints.write(
            {"method": {"weights": weights}, "curve": curve, "fingerprint": "run"}
        )  # into the same memory
        weights.mul_(2)
    state = load(tmp_path / "c.pt", "run", CPU)
    assert torch.equal(state["method"]["weights"], -torch.arange(6.0).reshape(2, 3))
    assert state["curve"] == curve[:1] + [{"iteration": 2, "objective": [0.0, 0.0]}]


def disk_full(monkeypatch):
    import gpstudy.training.checkpoint as checkpoint_module

    def full(state, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint_module.torch, "save", full)


def test_a_failed_write_is_raised_at_the_next_checkpoint_naming_the_file(tmp_path, monkeypatch):
    disk_full(monkeypatch)
    checkpoints = Checkpointer(tmp_path / "c.pt", CPU, every=1, minutes=None)
    checkpoints.write({"step": 1})
    with pytest.raises(CheckpointError, match=r"c\.pt cannot be written \(OSError: .*No space left"):
        checkpoints.write({"step": 2})
    checkpoints.close()
    assert list(tmp_path.iterdir()) == []  # no file, no leftover temporary


def test_a_failed_last_write_fails_fit(tmp_path, monkeypatch):
    from gpstudy.training import fit

    disk_full(monkeypatch)
    x = torch.randn(1, 20, 2, dtype=torch.float64)
    method = torch.nn.Linear(2, 1, dtype=torch.float64)  # a stand-in with the Method interface fit uses
    method.adam_parameters = method.parameters
    method.loss = lambda x, y, step, generators: ((method(x).squeeze(-1) - y) ** 2).mean(-1)
    method.natural_update = lambda: None
    with pytest.raises(CheckpointError, match=r"c\.pt cannot be written"):
        fit(
            method,
            x,
            x[..., 0],
            iterations=12,
            batch_size=5,
            lr=0.01,
            generators=[torch.Generator()],
            evaluate=dict,
            eval_every=100,
            checkpoint=tmp_path / "c.pt",
            checkpoint_every=10,
        )


def test_a_failed_write_while_another_error_leaves_is_logged_not_raised(tmp_path, monkeypatch, caplog):
    disk_full(monkeypatch)
    with pytest.raises(KeyboardInterrupt), caplog.at_level(logging.ERROR):
        with Checkpointer(tmp_path / "c.pt", CPU, every=1, minutes=None) as checkpoints:
            checkpoints.write({"step": 1})
            raise KeyboardInterrupt
    assert "c.pt cannot be written" in caplog.text


def test_leaving_waits_for_the_write_in_flight(tmp_path, monkeypatch):
    """A run that stops (an error, a failed method) finds its checkpoint written, never landing later."""
    release = blocked_save(monkeypatch)
    threading.Timer(0.2, release.set).start()
    with pytest.raises(KeyboardInterrupt):
        with Checkpointer(tmp_path / "c.pt", CPU, every=1, minutes=None) as checkpoints:
            checkpoints.write({"step": 1, "fingerprint": "run"})
            raise KeyboardInterrupt
    assert load(tmp_path / "c.pt", "run", CPU)["step"] == 1
