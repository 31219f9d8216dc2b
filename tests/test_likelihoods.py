"""The Gaussian likelihood: densities, the closed-form expectation, the predictive, positivity."""

import numpy as np
import torch
from torch.distributions import Normal

from gpstudy import settings
from gpstudy.likelihoods import GaussianLikelihood

DTYPE = settings.DEFAULT_DTYPE


def test_initial_noise_variance_is_the_constructor_argument():
    torch.testing.assert_close(GaussianLikelihood(0.1).noise_variance, torch.tensor(0.1, dtype=DTYPE))
    torch.testing.assert_close(GaussianLikelihood(2.5).noise_variance, torch.tensor(2.5, dtype=DTYPE))


def test_noise_variance_never_drops_below_the_floor():
    likelihood = GaussianLikelihood()
    with torch.no_grad():
        likelihood.raw_noise_variance.fill_(-1e3)
    assert likelihood.noise_variance >= settings.POSITIVE_FLOOR


def test_log_prob_matches_torch_normal():
    likelihood = GaussianLikelihood(0.3)
    y, f = torch.tensor([0.5, -1.0, 2.0], dtype=DTYPE), torch.tensor([0.0, -0.5, 2.5], dtype=DTYPE)
    torch.testing.assert_close(likelihood.log_prob(y, f), Normal(f, 0.3**0.5).log_prob(y))


def test_expected_log_prob_matches_gauss_hermite_quadrature():
    likelihood = GaussianLikelihood(0.3)
    y = torch.tensor([0.5, -1.0, 2.0], dtype=DTYPE)
    mean = torch.tensor([0.0, -0.5, 2.5], dtype=DTYPE)
    var = torch.tensor([0.2, 1.5, 0.01], dtype=DTYPE)
    nodes, weights = (torch.as_tensor(a, dtype=DTYPE) for a in np.polynomial.hermite_e.hermegauss(20))
    f = mean.unsqueeze(-1) + var.sqrt().unsqueeze(-1) * nodes  # [3, 20]
    quadrature = (likelihood.log_prob(y.unsqueeze(-1), f) * weights).sum(-1) / weights.sum()
    torch.testing.assert_close(likelihood.expected_log_prob(y, mean, var), quadrature)


def test_predictive_adds_the_noise_variance():
    likelihood = GaussianLikelihood(0.3)
    mean, var = torch.tensor([1.0, 2.0], dtype=DTYPE), torch.tensor([0.5, 0.25], dtype=DTYPE)
    predictive_mean, predictive_var = likelihood.predictive(mean, var)
    torch.testing.assert_close(predictive_mean, mean)
    torch.testing.assert_close(predictive_var, var + 0.3)
