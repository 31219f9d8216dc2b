"""FBNN: the objective over Z = [X_B; X_M] without an N/n factor, and its hyperparameter switch."""

import pytest
import torch
from torch.distributions import MultivariateNormal, kl_divergence as torch_kl

from gpstudy import settings
from gpstudy.kernels import RBF
from gpstudy.likelihoods import GaussianLikelihood
from gpstudy.methods import FBNN, MethodConfig

DTYPE = settings.DEFAULT_DTYPE
N, BATCH = 40, 6


@pytest.fixture(scope="module")
def data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(N, 1, generator=generator, dtype=DTYPE)
    return x, torch.sin(2 * x[:, 0]) + 0.1 * torch.randn(N, generator=generator, dtype=DTYPE)


def build(data, online: bool = False) -> FBNN:
    x, y = data
    kernel, likelihood = RBF(1, lengthscale=0.7), GaussianLikelihood(0.1)
    config = MethodConfig(
        M=4, n_train=N, hidden_units=10, measurement="box", box=((-3.0,), (3.0,)), online_hyperparameters=online
    )
    return FBNN(x, y, kernel, likelihood, config, torch.Generator().manual_seed(1))


def test_loss_is_minus_the_unscaled_function_space_elbo(data):
    method = build(data)
    x, y = data
    loss = method.loss(x[:BATCH], y[:BATCH], 1, torch.Generator().manual_seed(2))

    inputs = method.measurement_set(x[:BATCH], torch.Generator().manual_seed(2))
    assert inputs.shape == (BATCH + 4, 1) and torch.equal(inputs[:BATCH], x[:BATCH])
    assert (inputs[BATCH:].abs() <= 3).all()
    q = MultivariateNormal(*method.network.mean_and_covariance(inputs))
    prior_cov = method.kernel(inputs) + settings.JITTER * torch.eye(BATCH + 4, dtype=DTYPE)
    prior = MultivariateNormal(torch.zeros(BATCH + 4, dtype=DTYPE), prior_cov)
    noise = method.likelihood.noise_variance
    mean, var = q.mean[:BATCH], q.covariance_matrix.diagonal()[:BATCH]
    expected = (-0.5 * torch.log(2 * torch.pi * noise) - ((y[:BATCH] - mean) ** 2 + var) / (2 * noise)).sum()
    torch.testing.assert_close(loss, -(expected - torch_kl(q, prior)))


def test_hyperparameters_learn_only_when_online(data):
    x, y = data
    for online in (False, True):
        method = build(data, online)
        method.loss(x[:BATCH], y[:BATCH], 1, torch.Generator().manual_seed(2)).backward()
        for parameter in [*method.kernel.parameters(), *method.likelihood.parameters()]:
            assert parameter.requires_grad is online
            assert (parameter.grad is not None) is online
