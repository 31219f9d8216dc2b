"""What a run builds of its settings (the method's config, the kernel), what a checkpoint belongs to (a rerun
on another GPU of the same kind resumes; another device type does not), and what a run records of its data."""

import logging
from dataclasses import fields, replace

import numpy as np
import pytest
import torch

import gpstudy.training.run as run_module
from gpstudy.data import Split
from gpstudy.io import read_json
from gpstudy.linalg import CholeskyError
from gpstudy.study import RunSettings, run_settings
from gpstudy.training.run import (
    PRETRAINING_READS,
    against_the_mean,
    initial_kernel,
    method_config,
    pretrain_splits,
    pretraining_fingerprint,
    run_fingerprint,
    run_splits,
    train_splits,
)
from gpstudy.training.stopping import Stopped

from splits import small_split


def test_box_moves_to_standardized_inputs(study_config):
    settings = run_settings(study_config, "snelson", method="gpnet", M=5, box=[[-1.0], [7.0]])
    config = method_config(settings, 100, x_mean=np.array([3.0]), x_std=np.array([2.0]))
    assert config.box == ((-2.0,), (2.0,)) and config.M == 5 and config.n_train == 100
    batch = method_config(settings, 100, x_mean=np.array([[3.0], [1.0]]), x_std=np.array([[2.0], [4.0]]))
    np.testing.assert_allclose(batch.box, [[[-2.0], [-0.5]], [[2.0], [1.5]]])  # (low, high), each [split, D]
    assert config.beta0 == settings.options["beta0"]  # options read as attributes
    with pytest.raises(AttributeError, match="no 'beta00'"):
        config.beta00


def test_a_fresh_kernel_starts_at_the_initial_lengthscale(settings_for):
    kernel = initial_kernel(settings_for("svgp", 5, initial_lengthscale=10.0, kernel="matern52"), 3, (2,))
    torch.testing.assert_close(kernel.lengthscale, torch.full((2, 3), 10.0, dtype=torch.float64))
    torch.testing.assert_close(kernel.variance, torch.ones(2, dtype=torch.float64))


def test_the_fingerprint_holds_the_device_type_not_the_gpu_index(settings_for):
    settings, splits = settings_for("svgp", 4), {0: small_split()}
    on = {
        device: run_fingerprint(replace(settings, device=device), splits, None)
        for device in ("cuda:0", "cuda:1", "cuda", "cpu")
    }
    assert on["cuda:0"] == on["cuda:1"] == on["cuda"]
    assert on["cpu"] != on["cuda"]
    assert run_fingerprint(replace(settings, dtype="float32", device="cpu"), splits, None) != on["cpu"]


def test_when_checkpoints_are_taken_is_not_what_they_belong_to(settings_for):
    settings, splits = settings_for("svgp", 4), {0: small_split()}
    rescheduled = replace(settings, checkpoint_minutes=1, checkpoint_every=7)
    assert run_fingerprint(rescheduled, splits, None) == run_fingerprint(settings, splits, None)
    assert run_fingerprint(replace(settings, lr=0.1), splits, None) != run_fingerprint(settings, splits, None)


def test_a_run_records_the_rows_and_inputs_it_learned_from(settings_for, tmp_path):
    """n_train, n_test and D in metrics.json: the tables' N and D (after any dropped feature) come from them;
    and the dtype it trained in (issue 35, item 11d)."""
    rng = np.random.default_rng(0)
    n, n_test, d = 12, 5, 3
    split = Split(
        x_train=rng.normal(size=(n, d)),
        y_train=rng.normal(size=n),
        x_test=rng.normal(size=(n_test, d)),
        y_test=rng.normal(size=n_test),
        x_mean=np.zeros(d),
        x_std=np.ones(d),
        y_mean=0.0,
        y_std=1.0,
    )
    run = settings_for(
        "svgp", 4, iterations=2, batch_size=n, eval_every=1, pretrain=False, device="cpu", dtype="float32"
    )
    results = train_splits({0: split}, run, {0: tmp_path}, tmp_path / "checkpoint.pt")
    assert (results[0]["n_train"], results[0]["n_test"], results[0]["D"]) == (n, n_test, d)
    assert results[0]["dtype"] == "float32"


@pytest.mark.parametrize(
    "y_train, y_test, y_mean, y_std, baseline",
    [
        ([-1.0, 1.0], [0.5, 1.5], 10.0, 2.0, np.sqrt(5)),  # standardized: [8, 12] and [11, 13], residuals 1 and 3
        ([2.0, 4.0], [3.0, 6.0], 0.0, 1.0, np.sqrt(4.5)),  # not standardized: the training mean is 3, not 0
    ],
)
def test_the_mean_baseline_is_the_rmse_of_ys_training_mean_in_original_units(y_train, y_test, y_mean, y_std, baseline):
    """Issue 49: rmse_of_mean is the test RMSE of predicting the training mean of y at every test point, in the
    units of the reported rmse; worse_than_mean says whether a run's rmse exceeds it (None for a failed run)."""
    split = replace(small_split(), y_train=np.array(y_train), y_test=np.array(y_test), y_mean=y_mean, y_std=y_std)
    assert against_the_mean(split, baseline * 1.01) == {
        "rmse_of_mean": pytest.approx(baseline),
        "worse_than_mean": True,
    }
    assert against_the_mean(split, baseline * 0.99)["worse_than_mean"] is False
    assert against_the_mean(split, float("nan"))["worse_than_mean"] is None


def test_a_regression_run_records_its_mean_baseline_and_a_failed_one_no_verdict(settings_for, tmp_path, monkeypatch):
    """metrics.json of a finished run holds rmse_of_mean and worse_than_mean beside rmse; a failed run (no
    Cholesky) the baseline and no verdict."""
    run = settings_for("svgp", 4, iterations=2, batch_size=8, eval_every=1, pretrain=False, device="cpu")
    metrics = run_splits({0: small_split()}, run, {0: tmp_path}, tmp_path / "checkpoint.pt", {0: {}})[0]
    expected = against_the_mean(small_split(), metrics["rmse"])
    assert read_json(tmp_path / "metrics.json") | expected == read_json(tmp_path / "metrics.json")
    monkeypatch.setattr(run_module, "fit", lambda *args, **kwargs: (_ for _ in ()).throw(CholeskyError("x")))
    again = tmp_path / "again"  # not the finished record of the first, which a rerun restores untrained
    again.mkdir()
    failed = run_splits({0: small_split()}, run, {0: again}, again / "checkpoint.pt", {0: {}})[0]
    assert failed["rmse_of_mean"] == expected["rmse_of_mean"] and failed["worse_than_mean"] is None


def test_a_job_sets_its_linear_algebra_library_for_its_device(settings_for, monkeypatch):
    """Every job's process (training, pretraining, the exact GP: each builds a ``SplitsProblem``) sets its
    factorizations' library for the device it computes on (``gpstudy.runtime.flags.set_linalg_library``)."""
    devices_seen = []
    monkeypatch.setattr(run_module, "set_linalg_library", devices_seen.append)
    run_module.SplitsProblem({0: small_split()}, settings_for("svgp", 4, device="cpu"), None)
    assert devices_seen == [torch.device("cpu")]


def test_a_run_sets_its_tf32_setting_and_records_whether_tf32_was_in_effect(settings_for, tmp_path, monkeypatch):
    """``training.tf32`` (off in config.yaml) decides whether CUDA may round float32 products and cuDNN
    convolutions to TF32 (cuDNN's default is on); every metrics.json, a failed run's too, records whether
    TF32 was in effect, which on a CPU it never is, whatever the flags say."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        for tf32 in (False, True):
            run = settings_for("svgp", 4, iterations=1, batch_size=8, eval_every=1, device="cpu", tf32=tf32)
            metrics = run_splits({0: small_split()}, run, {0: tmp_path}, tmp_path / "checkpoint.pt", {0: {}})
            assert metrics[0]["tf32"] is read_json(tmp_path / "metrics.json")["tf32"] is False
            assert torch.backends.cuda.matmul.allow_tf32 is torch.backends.cudnn.allow_tf32 is tf32
        monkeypatch.setattr(run_module, "fit", lambda *args, **kwargs: (_ for _ in ()).throw(CholeskyError("x")))
        failed = run_splits(
            {0: small_split()}, replace(run, tf32=False), {0: tmp_path}, tmp_path / "checkpoint.pt", {0: {}}
        )
        assert failed[0]["status"].startswith("failed") and failed[0]["tf32"] is False
        assert settings_for("svgp", 4).tf32 is False
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def test_pretraining_reads_no_setting_beyond_its_params(settings_for):
    """The pretraining job's params are PRETRAINING_READS (rules/common.smk): every other setting, changed,
    leaves its hyperparameters bit-identical, so that no change of it need rerun the job (issue 35, item 11b)."""
    others = {
        "method": "svgp",
        "M": 7,
        "options": {"unread": 1},
        "iterations": 3,
        "batch_size": 5,
        "lr": 0.5,
        "pretrain": True,
        "checkpoint_minutes": 0.5,
        "checkpoint_every": 2,
        "eval_every": 3,
        "torch_compile": True,
    }
    assert set(others) | set(PRETRAINING_READS) == {field.name for field in fields(RunSettings)}
    settings = settings_for("exact", 1, pretrain_iterations=3, pretrain_subset=6)
    assert all(getattr(settings, key) != value for key, value in others.items())
    assert pretrain_splits({0: small_split()}, replace(settings, **others)) == pretrain_splits(
        {0: small_split()}, settings
    )
    assert pretrain_splits({0: small_split()}, replace(settings, pretrain_lr=0.2)) != pretrain_splits(
        {0: small_split()}, settings
    )
    fingerprint = pretraining_fingerprint(settings, {0: small_split()})  # what its checkpoint belongs to: the same
    assert pretraining_fingerprint(replace(settings, **others), {0: small_split()}) == fingerprint
    assert pretraining_fingerprint(replace(settings, pretrain_lr=0.2), {0: small_split()}) != fingerprint


@pytest.mark.parametrize("stopped", ["itself", "split 1", "other data", "pretrain_lr 0.2"])
def test_pretraining_resumes_from_its_own_checkpoint_alone_and_removes_it_when_done(
    stopped, settings_for, tmp_path, caplog, pretraining_steps, recorded_signals
):
    """Split 0 pretrained with the checkpoint a stopped pretraining left: its own is resumed; one of another split
    index (its own seed), data or setting is discarded with a warning, never resumed; either way the numbers
    are an uninterrupted run's, and the checkpoint is gone once pretraining is done."""
    settings, checkpoint = settings_for("exact", 1, pretrain_iterations=8, pretrain_subset=6), tmp_path / "c.pt"
    fresh = pretrain_splits({0: small_split()}, settings)
    splits, changed = {
        "split 1": ({1: small_split()}, settings),
        "other data": ({0: small_split(seed=1)}, settings),
        "pretrain_lr 0.2": ({0: small_split()}, replace(settings, pretrain_lr=0.2)),
    }.get(stopped, ({0: small_split()}, settings))
    pretraining_steps(sigterm_at=3)
    with pytest.raises(Stopped, match="^checkpointed at iteration 3 on SIGTERM$"):
        pretrain_splits(splits, changed, checkpoint)
    caplog.set_level(logging.INFO, logger="gpstudy")
    steps = pretraining_steps()
    assert pretrain_splits({0: small_split()}, settings, checkpoint) == fresh
    resumed = f"resumed from {checkpoint} at iteration 4" in caplog.messages
    discarded = f"checkpoint {checkpoint} belongs to other settings, splits, start or code: discarded, starting afresh"
    assert (resumed, discarded in caplog.messages, len(steps)) == (
        (True, False, 5) if stopped == "itself" else (False, True, 8)
    )
    assert not checkpoint.exists() and list(tmp_path.iterdir()) == []
