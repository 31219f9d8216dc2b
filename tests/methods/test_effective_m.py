"""Every method reports the points it really uses for M (``Method.effective_M``), and a run writes it into
its metrics: an M above the training set's size is capped by the methods that place or draw distinct points."""

import numpy as np
import pytest
import torch

from gpstudy import numerics
from gpstudy.data import Split
from gpstudy.kernels import RBF
from gpstudy.likelihoods import GaussianLikelihood
from gpstudy.methods import METHODS, Problem, build_method
from gpstudy.training.run import train_splits

N, D = 12, 2
CAPPED = {"svgp", "odvgp", "autogp", "gpnet", "fbnn"}  # distinct inducing inputs, k-means centres, training inputs
OPTIONS = {"measurement": "noisy", "mean_basis": 3, "hidden_units": 5}  # for the methods that have these options


def points_used(method) -> int:
    """The points the method's own tensors hold: its inducing set, its basis, or one draw of X_M."""
    for name in ("inducing_inputs", "beta"):
        if hasattr(method, name):
            return getattr(method, name).shape[-2]
    if hasattr(method, "measurement_sampler"):
        return method.measurement_sampler(method.config.M, torch.Generator().manual_seed(1)).shape[-2]
    return method.config.M  # the exact GP: no points of its own


@pytest.mark.parametrize("name", sorted(METHODS))
@pytest.mark.parametrize("M", [5, N + 8])
def test_effective_m_is_the_points_the_method_uses(name, M, method_config):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(N, D, generator=generator, dtype=numerics.DEFAULT_DTYPE)
    options = {key: value for key, value in OPTIONS.items() if key in METHODS[name].options_schema}
    method = build_method(
        name,
        Problem(x, torch.sin(x[:, 0]), RBF(D), GaussianLikelihood(0.1), generator),
        method_config(name, M, N, **options),
    )
    assert method.effective_M == points_used(method)
    assert method.effective_M == (min(M, N) if name in CAPPED else M)


def test_a_box_sampler_draws_all_m_points(method_config):
    x = torch.randn(N, D, dtype=numerics.DEFAULT_DTYPE)
    config = method_config("gpnet", N + 8, N, measurement="box", box=[[-1.0, -1.0], [1.0, 1.0]], hidden_units=5)
    method = build_method("gpnet", Problem(x, x[:, 0], RBF(D), GaussianLikelihood(0.1), torch.Generator()), config)
    assert method.effective_M == points_used(method) == N + 8


def test_a_run_writes_the_effective_m_into_its_metrics(settings_for, tmp_path):
    rng = np.random.default_rng(0)
    split = Split(
        x_train=rng.normal(size=(N, D)),
        y_train=rng.normal(size=N),
        x_test=rng.normal(size=(4, D)),
        y_test=rng.normal(size=4),
        x_mean=np.zeros(D),
        x_std=np.ones(D),
        y_mean=0.0,
        y_std=1.0,
    )
    run = settings_for("svgp", N + 8, iterations=2, batch_size=N, eval_every=1, pretrain=False, device="cpu")
    results = train_splits({0: split}, run, {0: tmp_path}, tmp_path / "checkpoint.pt")
    assert results[0]["M_effective"] == N
