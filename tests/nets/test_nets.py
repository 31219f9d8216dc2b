"""Every inference network passes the same battery; RFE's initialization and implied prior."""

import math

import pytest
import torch

from gpstudy import settings
from gpstudy.kernels import RBF
from gpstudy.nets import RFE, InferenceNetwork
from gpstudy.nets.block_tril import BlockTril

DTYPE = settings.DEFAULT_DTYPE


def build_rfe(hidden_units: int = 10, lengthscale=(0.5, 2.0), variance: float = 1.7, seed: int = 0) -> RFE:
    kernel = RBF(len(lengthscale), lengthscale=list(lengthscale), variance=variance)
    generator = torch.Generator().manual_seed(seed)
    return RFE(kernel.input_dim, hidden_units, kernel.lengthscale, kernel.variance, generator)


NETWORKS = {"rfe": build_rfe}  # every network with a 2-D input


@pytest.fixture
def inputs() -> torch.Tensor:
    return torch.randn(6, 2, generator=torch.Generator().manual_seed(1), dtype=DTYPE)


@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_shapes_covariance_and_marginals(name, inputs):
    network: InferenceNetwork = NETWORKS[name]()
    mean, factor = network(inputs)
    assert mean.shape == (6,) and factor.shape[0] == 6 and factor.dim() == 2
    _, cov = network.mean_and_covariance(inputs)
    torch.testing.assert_close(cov, factor @ factor.mT + settings.JITTER * torch.eye(6, dtype=DTYPE))
    assert torch.linalg.eigvalsh(cov).min() > 0
    torch.testing.assert_close(network.marginal_variance(inputs), cov.diagonal())
    marginal_mean, _ = network.marginals(inputs)
    torch.testing.assert_close(marginal_mean, mean)


@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_gradients_reach_every_parameter(name, inputs):
    network = NETWORKS[name]()
    mean, cov = network.mean_and_covariance(inputs)
    (mean.sum() + cov.sum()).backward()
    for parameter_name, parameter in network.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, parameter_name


def test_rfe_initialization_follows_the_study():
    network = build_rfe(hidden_units=1000, lengthscale=(0.5, 2.0), variance=1.7)
    torch.testing.assert_close(network.lengthscale, torch.tensor([0.5, 2.0], dtype=DTYPE))
    torch.testing.assert_close(network.prior_variance, torch.tensor(1.7, dtype=DTYPE))
    softplus_one = math.log1p(math.e)
    torch.testing.assert_close(network.weight_scale_tril, softplus_one * torch.eye(2000, dtype=DTYPE))
    assert network.weight_mean.shape == (2000,)
    assert 0.8e-3 < network.weight_mean.std() < 1.2e-3
    assert 0.8 < network.frequencies.std() < 1.2 and abs(network.frequencies.mean()) < 0.1
    assert not network.prior_variance.requires_grad


def test_rfe_prior_approaches_the_rbf_kernel_as_features_grow():
    lengthscale, variance = (0.7, 1.5), 2.0
    kernel = RBF(2, lengthscale=list(lengthscale), variance=variance)
    x = torch.randn(30, 2, generator=torch.Generator().manual_seed(2), dtype=DTYPE)
    errors = {}
    for hidden_units in (100, 2000):
        seed_errors = []
        for seed in range(5):
            network = build_rfe(hidden_units, lengthscale, variance, seed=seed)
            with torch.no_grad():  # q(w) = N(0, I): f = w^T phi(x) is the random-feature prior
                network.weight_mean.zero_()
                network.weight_scale = BlockTril(2 * hidden_units, 1.0, like=network.weight_mean)  # L = I
                _, cov = network.mean_and_covariance(x)
            seed_errors.append((cov - kernel(x)).abs().mean().item())
        errors[hidden_units] = sum(seed_errors) / len(seed_errors)
    assert errors[2000] < errors[100] / 2.5  # Monte Carlo rate: sqrt(20) = 4.5
    assert errors[2000] < 0.02 * variance
