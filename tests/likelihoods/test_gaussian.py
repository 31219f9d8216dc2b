"""The Gaussian likelihood: densities, the closed-form expectation, the predictive, positivity."""

import numpy as np
import torch
from torch.distributions import Normal

from gpstudy import numerics
from gpstudy.likelihoods import GaussianLikelihood

DTYPE = numerics.DEFAULT_DTYPE
Y = torch.tensor([0.5, -1.0, 2.0], dtype=DTYPE)
MEAN = torch.tensor([0.0, -0.5, 2.5], dtype=DTYPE)
VAR = torch.tensor([0.2, 1.5, 0.01], dtype=DTYPE)


def test_initial_noise_variance_is_the_constructor_argument():
    torch.testing.assert_close(GaussianLikelihood(0.1).noise_variance, torch.tensor(0.1, dtype=DTYPE))
    torch.testing.assert_close(GaussianLikelihood(2.5).noise_variance, torch.tensor(2.5, dtype=DTYPE))


def test_checkpoints_keep_the_parameter_name():
    assert list(GaussianLikelihood().state_dict()) == ["raw_noise_variance"]


def test_noise_variance_never_drops_below_the_floor():
    likelihood = GaussianLikelihood()
    with torch.no_grad():
        likelihood.raw_noise_variance.fill_(-1e3)
    assert likelihood.noise_variance >= numerics.POSITIVE_FLOOR


def test_log_prob_matches_torch_normal():
    likelihood = GaussianLikelihood(0.3)
    torch.testing.assert_close(likelihood.log_prob(Y, MEAN), Normal(MEAN, 0.3**0.5).log_prob(Y))


def test_expected_log_prob_matches_gauss_hermite_quadrature():
    likelihood = GaussianLikelihood(0.3)
    nodes, weights = (torch.as_tensor(a, dtype=DTYPE) for a in np.polynomial.hermite_e.hermegauss(20))
    f = MEAN.unsqueeze(-1) + VAR.sqrt().unsqueeze(-1) * nodes  # [3, 20]
    quadrature = (likelihood.log_prob(Y.unsqueeze(-1), f) * weights).sum(-1) / weights.sum()
    torch.testing.assert_close(likelihood.expected_log_prob(Y, MEAN, VAR), quadrature)


def test_expected_log_prob_is_the_log_density_at_the_mean_less_the_variance_term():
    """E log N(y | f, s2) = log N(y | mean, s2) - var / (2 s2)."""
    likelihood = GaussianLikelihood(0.3)
    closed_form = Normal(MEAN, 0.3**0.5).log_prob(Y) - VAR / (2 * 0.3)
    torch.testing.assert_close(likelihood.expected_log_prob(Y, MEAN, VAR), closed_form)


def test_log_predictive_density_matches_torch_normal():
    """int N(y | f, s2) N(f | mean, var) df = N(y | mean, var + s2)."""
    likelihood = GaussianLikelihood(0.3)
    expected = Normal(MEAN, (VAR + 0.3).sqrt()).log_prob(Y)
    torch.testing.assert_close(likelihood.log_predictive_density(Y, MEAN, VAR), expected)


def test_predictive_adds_the_noise_variance():
    likelihood = GaussianLikelihood(0.3)
    mean, var = torch.tensor([1.0, 2.0], dtype=DTYPE), torch.tensor([0.5, 0.25], dtype=DTYPE)
    predictive_mean, predictive_var = likelihood.predictive(mean, var)
    torch.testing.assert_close(predictive_mean, mean)
    torch.testing.assert_close(predictive_var, var + 0.3)
