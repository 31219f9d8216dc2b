"""FBNN: the objective over Z = [X_B; X_M] without an N/n factor, and its hyperparameter switch."""

import pytest
import torch
from torch.distributions import MultivariateNormal
from torch.distributions import kl_divergence as torch_kl

from gpstudy import numerics
from gpstudy.kernels import RBF
from gpstudy.likelihoods import GaussianLikelihood
from gpstudy.methods import FBNN, Problem

DTYPE = numerics.DEFAULT_DTYPE
N, BATCH = 40, 6


@pytest.fixture(scope="module")
def data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(N, 1, generator=generator, dtype=DTYPE)
    return x, torch.sin(2 * x[:, 0]) + 0.1 * torch.randn(N, generator=generator, dtype=DTYPE)


def build(method_config, data, online: bool = False, **options) -> FBNN:
    x, y = data
    kernel, likelihood = RBF(1, lengthscale=0.7), GaussianLikelihood(0.1)
    config = method_config(
        "fbnn",
        4,
        N,
        hidden_units=10,
        measurement="box",
        box=((-3.0,), (3.0,)),
        online_hyperparameters=online,
        **options,
    )
    return FBNN(Problem(x, y, kernel, likelihood, torch.Generator().manual_seed(1)), config)


def test_loss_is_minus_the_unscaled_function_space_elbo(data, method_config):
    method = build(method_config, data)
    x, y = data
    loss = method.loss(x[:BATCH], y[:BATCH], 1, torch.Generator().manual_seed(2))

    inputs = method.measurement_set(x[:BATCH], torch.Generator().manual_seed(2))
    assert inputs.shape == (BATCH + 4, 1) and torch.equal(inputs[:BATCH], x[:BATCH])
    assert (inputs[BATCH:].abs() <= 3).all()
    q = MultivariateNormal(*method.network.mean_and_covariance(inputs))
    prior_cov = method.kernel(inputs) + numerics.JITTER * torch.eye(BATCH + 4, dtype=DTYPE)
    prior = MultivariateNormal(torch.zeros(BATCH + 4, dtype=DTYPE), prior_cov)
    noise = method.likelihood.noise_variance
    mean, var = q.mean[:BATCH], q.covariance_matrix.diagonal()[:BATCH]
    expected = (-0.5 * torch.log(2 * torch.pi * noise) - ((y[:BATCH] - mean) ** 2 + var) / (2 * noise)).sum()
    torch.testing.assert_close(loss, -(expected - torch_kl(q, prior)))


def test_hyperparameters_learn_only_when_online(data, method_config):
    x, y = data
    for online in (False, True):
        method = build(method_config, data, online)
        method.loss(x[:BATCH], y[:BATCH], 1, torch.Generator().manual_seed(2)).backward()
        for parameter in [*method.kernel.parameters(), *method.likelihood.parameters()]:
            assert parameter.requires_grad is online
            assert (parameter.grad is not None) is online


def test_online_hyperparameter_objectives(data, method_config):
    """measurement_set: the kernel trains on the FBNN objective over Z; batch (the authors' code): on
    KL[q(f_B) || p(f_B)] alone, with q held fixed; the network's gradient is the same in both."""
    x, y = data
    methods = {
        objective: build(method_config, data, online=True, hyperparameter_objective=objective)
        for objective in ("measurement_set", "batch")
    }
    for method in methods.values():
        method.loss(x[:BATCH], y[:BATCH], 1, torch.Generator().manual_seed(2)).backward()
    for over_z, over_batch in zip(
        methods["measurement_set"].network.parameters(), methods["batch"].network.parameters()
    ):
        torch.testing.assert_close(over_z.grad, over_batch.grad)
    batch = methods["batch"]
    inputs = batch.measurement_set(x[:BATCH], torch.Generator().manual_seed(2))[:BATCH]
    with torch.no_grad():
        q = MultivariateNormal(*batch.network.mean_and_covariance(inputs))
    kernel = batch.kernel
    kernel.zero_grad()
    prior_cov = kernel(inputs) + numerics.JITTER * torch.eye(BATCH, dtype=DTYPE)
    torch_kl(q, MultivariateNormal(torch.zeros(BATCH, dtype=DTYPE), prior_cov)).backward()
    expected = [parameter.grad.clone() for parameter in kernel.parameters()]
    kernel.zero_grad()
    batch.loss(x[:BATCH], y[:BATCH], 1, torch.Generator().manual_seed(2)).backward()
    for parameter, grad in zip(kernel.parameters(), expected):
        torch.testing.assert_close(parameter.grad, grad)
    grads_over_z = [parameter.grad for parameter in methods["measurement_set"].kernel.parameters()]
    assert not torch.allclose(grads_over_z[0], expected[0], rtol=0.1)  # the two objectives do differ
