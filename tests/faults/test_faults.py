"""Faults and bad input: a result is never silently wrong, and a fault of the machine fails the job.

Each test injects one fault into a tiny run and checks what happens (issue: reliability).
"""

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from gpstudy.cli import main
from gpstudy.config import ConfigError, validate_config
from gpstudy.data import Split
from gpstudy.gaussian import CholeskyError
from gpstudy.training import run_splits, train_splits
from gpstudy.training.fit import CheckpointError
from gpstudy.training.settings import SettingsError

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


def test_a_checkpoint_of_other_settings_is_discarded_not_resumed(tmp_path, monkeypatch, settings_for, caplog):
    settings = settings_for("svgp", 6, iterations=20, batch_size=16, eval_every=5, checkpoint_every=10)
    checkpoint = interrupted_checkpoint(tmp_path, settings, monkeypatch)
    changed = settings_for("svgp", 6, iterations=20, batch_size=16, eval_every=5, checkpoint_every=10, lr=0.01)
    resumed = train_splits({0: toy_split()}, changed, {0: tmp_path / "run"}, checkpoint)
    fresh = train_splits({0: toy_split()}, changed, {0: tmp_path / "fresh"}, tmp_path / "fresh.pt")
    assert "belongs to other settings" in caplog.text
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
        run_splits({0: toy_split()}, settings_for("svgp", 6, iterations=5), {0: tmp_path / "run"},
                   tmp_path / "c.pt", {0: {}})
    assert not (tmp_path / "run/metrics.json").exists()  # no permanent failed row: a rerun retries


def test_a_cholesky_that_no_jitter_saves_is_a_failed_row(tmp_path, settings_for, monkeypatch):
    import gpstudy.training.run as run_module

    def failing(*args, **kwargs):
        raise CholeskyError("not positive definite")

    monkeypatch.setattr(run_module, "fit", failing)
    metrics = run_splits({0: toy_split()}, settings_for("svgp", 6, iterations=5), {0: tmp_path / "run"},
                         tmp_path / "c.pt", {0: {"dataset": "toy"}})
    written = json.loads((tmp_path / "run/metrics.json").read_text())
    assert written["status"] == "failed: CholeskyError: not positive definite" and np.isnan(metrics[0]["rmse"])


def test_non_finite_test_data_make_a_failed_row_with_the_reason(tmp_path, settings_for):
    split = toy_split()
    split.x_test[3, 0] = np.nan
    metrics = run_splits({0: split}, settings_for("svgp", 6, iterations=10, eval_every=5), {0: tmp_path / "run"},
                         tmp_path / "c.pt", {0: {}})
    assert metrics[0]["status"] == ("failed: non-finite rmse, test_ll at iteration 5 (a Cholesky that no jitter "
                                    "saved, or non-finite test data)")


def test_a_rerun_leaves_nothing_of_the_earlier_run(tmp_path, settings_for, monkeypatch):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "learning_curve.csv").write_text("stale")
    (folder / "predictions.csv").write_text("stale")
    import gpstudy.training.run as run_module

    monkeypatch.setattr(run_module, "fit", lambda *args, **kwargs: (_ for _ in ()).throw(CholeskyError("x")))
    run_splits({0: toy_split()}, settings_for("svgp", 6, iterations=5), {0: folder}, tmp_path / "c.pt", {0: {}})
    assert sorted(path.name for path in folder.iterdir()) == ["metrics.json"]


@pytest.mark.parametrize("argument, message", [
    (["--M", "0"], "M = 0: a method needs at least one"),
    (["--M", "-5"], "M = -5"),
    (["--M", "5", "--iterations", "0"], r"training settings, \$\.iterations: 0 is less than the minimum of 1"),
])
def test_the_cli_checks_its_arguments_like_the_config(tmp_path, monkeypatch, argument, message, shared_data):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SettingsError, match=message):
        main(["train", "--config", str(REPO / "config.yaml"), "--dataset", "boston", "--method", "svgp", *argument,
              "--mirror", str(shared_data)])
    assert not (tmp_path / "results").exists()


def test_a_nan_in_the_config_is_named(study_config):
    config = copy.deepcopy(study_config)
    config["training"]["lr"] = float("nan")
    with pytest.raises(ConfigError, match=r"\$\.training\.lr: a number must be finite"):
        validate_config(config)
