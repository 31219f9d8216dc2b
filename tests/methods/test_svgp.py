"""SVGP: k-means initialization, the starting q, and exactness with Z = X and the optimal q."""

import logging

import pytest
import torch

from gpstudy import settings
from gpstudy.gaussian import inverse_positive
from gpstudy.kernels import RBF
from gpstudy.likelihoods import GaussianLikelihood
from gpstudy.methods import SVGP, ExactGP
from gpstudy.methods.exact_gp import log_marginal_likelihood
from gpstudy.methods.svgp import kmeans_centres

DTYPE = settings.DEFAULT_DTYPE
N = 20


@pytest.fixture
def data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = 8 * torch.rand(N, 1, generator=generator, dtype=DTYPE) - 4
    return x, torch.sin(3 * x[:, 0]) + 0.1 * torch.randn(N, generator=generator, dtype=DTYPE)


def build(method_config, x: torch.Tensor, y: torch.Tensor, num_inducing: int, seed: int = 0) -> SVGP:
    kernel, likelihood = RBF(1, lengthscale=0.4, variance=1.2), GaussianLikelihood(0.1)
    config = method_config("svgp", num_inducing, x.shape[0])
    return SVGP(x, y, kernel, likelihood, config, torch.Generator().manual_seed(seed))


def test_kmeans_finds_the_cluster_centres():
    generator = torch.Generator().manual_seed(1)
    centres = torch.tensor([[-5.0, 0.0], [0.0, 5.0], [5.0, 0.0]], dtype=DTYPE)
    x = (centres.unsqueeze(1) + 0.1 * torch.randn(3, 30, 2, generator=generator, dtype=DTYPE)).reshape(90, 2)
    found = kmeans_centres(x, 3, torch.Generator().manual_seed(2))
    found = found[torch.argsort(found[:, 0] + 0.1 * found[:, 1])]
    torch.testing.assert_close(found, centres, rtol=0, atol=0.1)


def test_kmeans_is_seeded_by_the_generator_and_caps_at_n(data, caplog):
    x, _ = data
    first = kmeans_centres(x, 5, torch.Generator().manual_seed(3))
    assert torch.equal(first, kmeans_centres(x, 5, torch.Generator().manual_seed(3)))
    with caplog.at_level(logging.WARNING):
        assert kmeans_centres(x, N + 5, torch.Generator().manual_seed(3)).shape == (N, 1)
    assert "only 20 training points" in caplog.text


def test_q_starts_at_the_prior(data, method_config):
    x, y = data
    method = build(method_config, x, y, 5)
    assert method.inducing_inputs.shape == (5, 1)
    assert torch.equal(method.q_mean, torch.zeros(5, dtype=DTYPE))
    torch.testing.assert_close(method.q_scale_tril, torch.eye(5, dtype=DTYPE))
    mean, var = method.predict_f(x)  # q(f) = p(f) when q(u) = p(u)
    torch.testing.assert_close(mean, torch.zeros(N, dtype=DTYPE))
    torch.testing.assert_close(var, method.kernel(x, diag=True))


def set_optimal_q(method: SVGP, x: torch.Tensor, y: torch.Tensor) -> None:
    """The optimal q(u) for fixed Z (Titsias 2009), whitened, with explicit inverses."""
    k_uu = method.kernel(method.inducing_inputs) + settings.JITTER * torch.eye(N, dtype=DTYPE)
    k_uf = method.kernel(method.inducing_inputs, x)
    noise = method.likelihood.noise_variance
    middle = torch.linalg.inv(k_uu + k_uf @ k_uf.mT / noise)
    mean_u = k_uu @ middle @ k_uf @ y / noise
    cov_u = k_uu @ middle @ k_uu
    chol_uu = torch.linalg.cholesky(k_uu)
    whiten = torch.linalg.inv(chol_uu)
    scale = torch.linalg.cholesky(whiten @ cov_u @ whiten.mT)
    with torch.no_grad():
        method.q_mean.copy_(whiten @ mean_u)
        method.raw_q_scale.copy_(scale.tril(-1) + torch.diag_embed(inverse_positive(scale.diagonal())))


def test_optimal_q_with_z_at_the_data_recovers_the_exact_gp(data, method_config):
    x, y = data
    method = build(method_config, x, y, N)
    with torch.no_grad():
        method.inducing_inputs.copy_(x)
        set_optimal_q(method, x, y)
        elbo = -method.loss(x, y, 1, torch.Generator())  # the full batch: N/n = 1
        exact = log_marginal_likelihood(x, y, method.kernel, method.likelihood)
        torch.testing.assert_close(elbo, exact, rtol=0, atol=1e-4)
        x_test = torch.linspace(-5, 5, 13, dtype=DTYPE).unsqueeze(-1)
        reference = ExactGP(x, y, method.kernel, method.likelihood, method.config, torch.Generator())
        for got, expected in zip(method.predict(x_test), reference.predict(x_test)):
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-4)


def test_elbo_is_a_lower_bound_scaled_by_n_over_batch(data, method_config):
    x, y = data
    method = build(method_config, x, y, 6)
    with torch.no_grad():
        exact = log_marginal_likelihood(x, y, method.kernel, method.likelihood)
        assert -method.loss(x, y, 1, torch.Generator()) < exact
        mean, var = method.predict_f(x[:5])
        expected_log_prob = method.likelihood.expected_log_prob(y[:5], mean, var).sum()
        torch.testing.assert_close(-method.loss(x[:5], y[:5], 1, torch.Generator()), N / 5 * expected_log_prob)
