"""The exact GP against torch.distributions and the closed-form posterior with explicit inverses."""

import torch
from torch.distributions import MultivariateNormal

from gpstudy import numerics
from gpstudy.kernels import RBF
from gpstudy.likelihoods import GaussianLikelihood
from gpstudy.methods import ExactGP, MethodConfig, Problem
from gpstudy.methods.exact_gp import log_marginal_likelihood

DTYPE = numerics.DEFAULT_DTYPE
N = 25


def setup() -> tuple[ExactGP, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(N, 2, generator=generator, dtype=DTYPE)
    y = torch.cos(x[:, 0]) * x[:, 1] + 0.1 * torch.randn(N, generator=generator, dtype=DTYPE)
    kernel, likelihood = RBF(2, lengthscale=[0.7, 1.3], variance=1.4), GaussianLikelihood(0.05)
    method = ExactGP(Problem(x, y, kernel, likelihood, generator), MethodConfig(M=0, n_train=N))
    return method, x, y


def noisy_covariance(method: ExactGP, x: torch.Tensor) -> torch.Tensor:
    """K + (JITTER + sigma^2) I, the model's Cov[y]."""
    noise = numerics.JITTER + method.likelihood.noise_variance
    return method.kernel(x) + noise * torch.eye(x.shape[0], dtype=DTYPE)


def test_log_marginal_likelihood_matches_torch_mvn():
    method, x, y = setup()
    expected = MultivariateNormal(torch.zeros(N, dtype=DTYPE), noisy_covariance(method, x)).log_prob(y)
    torch.testing.assert_close(log_marginal_likelihood(x, y, method.kernel, method.likelihood), expected)


def test_loss_is_minus_the_marginal_likelihood_per_point():
    method, x, y = setup()
    batch = slice(3, 13)
    expected = -log_marginal_likelihood(x[batch], y[batch], method.kernel, method.likelihood) / 10
    torch.testing.assert_close(method.loss(x[batch], y[batch], 1, torch.Generator()), expected)


def test_predictions_match_the_closed_form_posterior():
    method, x, y = setup()
    x_test = torch.randn(7, 2, generator=torch.Generator().manual_seed(1), dtype=DTYPE)
    inverse = torch.linalg.inv(noisy_covariance(method, x))
    cross = method.kernel(x_test, x)
    expected_mean = cross @ inverse @ y
    expected_var = method.kernel(x_test).diagonal() - (cross @ inverse @ cross.mT).diagonal()
    mean, var = method.predict(x_test)
    torch.testing.assert_close(mean, expected_mean)
    torch.testing.assert_close(var, expected_var + method.likelihood.noise_variance)
