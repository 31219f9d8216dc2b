"""The training loop: batches, checkpoint and bit-identical resume, failures recorded as rows."""

import json

import numpy as np
import pytest
import torch

from gpstudy.data import Split
from gpstudy.training import BatchSampler, RunSettings, train_run, train_split
from gpstudy.training.run import CHECKPOINT


def toy_split(n=60, n_test=20, d=2, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, size=(n + n_test, d))
    y = np.sin(2 * x[:, 0]) + 0.3 * x[:, 1] + 0.1 * rng.normal(size=n + n_test)
    return Split(x[:n], y[:n], x[n:], y[n:], np.zeros(d), np.ones(d), 0.0, 2.0, {})


def test_batch_sampler_visits_every_point_once_per_epoch():
    sampler = BatchSampler(10, 3, torch.Generator().manual_seed(0))
    first_epoch = torch.cat([sampler.next() for _ in range(3)])
    assert sorted(first_epoch.tolist()) == sorted(set(first_epoch.tolist())) and len(first_epoch) == 9
    whole = BatchSampler(10, 50, torch.Generator().manual_seed(0))
    assert whole.next().tolist() == list(range(10))


@pytest.mark.parametrize("method", ["svgp", "gpnet"])
def test_resume_after_a_crash_is_bit_identical(tmp_path, method, monkeypatch):
    settings = RunSettings(method=method, M=8, iterations=30, batch_size=16, hidden_units=16,
                           measurement="train", eval_every=5, checkpoint_every=10)
    uninterrupted = train_split(toy_split(), settings, tmp_path / "a")

    import gpstudy.training.run as run_module
    real_rmse = run_module.rmse
    calls = {"n": 0}

    def crash_at_third_evaluation(*args):
        calls["n"] += 1
        if calls["n"] == 3:  # iteration 15: after the checkpoint of iteration 10
            raise KeyboardInterrupt("killed")
        return real_rmse(*args)

    monkeypatch.setattr(run_module, "rmse", crash_at_third_evaluation)
    with pytest.raises(KeyboardInterrupt):
        train_split(toy_split(), settings, tmp_path / "b")
    assert (tmp_path / "b" / CHECKPOINT).exists()
    monkeypatch.setattr(run_module, "rmse", real_rmse)
    resumed = train_split(toy_split(), settings, tmp_path / "b")
    for key in ("rmse", "test_ll", "hyperparameters"):
        assert resumed[key] == uninterrupted[key]
    curve_a = (tmp_path / "a" / "learning_curve.csv").read_text().splitlines()
    curve_b = (tmp_path / "b" / "learning_curve.csv").read_text().splitlines()
    strip_seconds = [[line.split(",")[i] for i in (0, 1, 3, 4)] for line in curve_a], \
                    [[line.split(",")[i] for i in (0, 1, 3, 4)] for line in curve_b]
    assert strip_seconds[0] == strip_seconds[1] and len(curve_a) == 7


def test_failed_run_is_a_row_with_its_status(tmp_path):
    settings = RunSettings(method="gpnet", M=4, iterations=3, measurement="nowhere")
    metrics = train_run(toy_split(), settings, tmp_path, {"dataset": "toy", "method": "gpnet"})
    written = json.loads((tmp_path / "metrics.json").read_text())
    assert written["status"].startswith("failed: ") and "nowhere" in written["status"]
    assert written["dataset"] == "toy" and np.isnan(metrics["rmse"])


def test_finished_run_leaves_metrics_and_no_checkpoint(tmp_path):
    settings = RunSettings(method="svgp", M=8, iterations=20, batch_size=16, eval_every=10, checkpoint_every=5)
    metrics = train_run(toy_split(), settings, tmp_path, {"dataset": "toy"})
    assert metrics["status"] == "ok" and np.isfinite(metrics["rmse"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["learning_curve.csv", "metrics.json"]
