"""The Bernoulli-logistic likelihood against the exact integrals (scipy.integrate.quad)."""

import itertools
import math

import pytest
import torch
from scipy.integrate import quad
from scipy.special import expit, log_expit

from gpstudy import numerics
from gpstudy.likelihoods import Bernoulli

DTYPE = numerics.DEFAULT_DTYPE
CASES = list(itertools.product([-3.0, -0.5, 0.0, 1.2, 4.0], [0.01, 0.5, 2.0, 4.0], [0, 1]))  # mean, var, y


def gaussian_expectation(g, mean: float, var: float) -> float:
    """int g(f) N(f | mean, var) df by adaptive quadrature over mean +- 12 standard deviations."""
    sd = math.sqrt(var)
    density = lambda f: math.exp(-0.5 * (f - mean) ** 2 / var) / math.sqrt(2 * math.pi * var)  # noqa: E731
    return quad(
        lambda f: g(f) * density(f),
        mean - 12 * sd,
        mean + 12 * sd,
        points=[mean],
        epsabs=1e-12,
        epsrel=1e-12,
        limit=200,
    )[0]


def as_tensors(*values) -> list[torch.Tensor]:
    return [torch.tensor(value, dtype=DTYPE) for value in values]


@pytest.mark.parametrize("mean, var, y", CASES)
def test_expectations_match_the_exact_integrals(mean, var, y):
    likelihood = Bernoulli()
    sign = 2 * y - 1
    expected_log_prob = gaussian_expectation(lambda f: log_expit(sign * f), mean, var)
    predictive_density = gaussian_expectation(lambda f: expit(sign * f), mean, var)
    probability = gaussian_expectation(expit, mean, var)
    y_, mean_, var_ = as_tensors([y], [mean], [var])
    assert abs(likelihood.expected_log_prob(y_, mean_, var_).item() - expected_log_prob) < 1e-6
    assert abs(likelihood.log_predictive_density(y_, mean_, var_).item() - math.log(predictive_density)) < 1e-6
    assert abs(likelihood.predictive(mean_, var_).item() - probability) < 1e-6


def test_log_prob_is_stable_far_from_the_boundary():
    likelihood = Bernoulli()
    y, f = torch.tensor([1, 0, 1]), torch.tensor([-800.0, 800.0, 800.0], dtype=DTYPE)
    torch.testing.assert_close(likelihood.log_prob(y, f), torch.tensor([-800.0, -800.0, 0.0], dtype=DTYPE))


def test_predictive_without_variance_is_the_sigmoid_of_the_mean():
    mean = torch.linspace(-5, 5, 11, dtype=DTYPE)
    torch.testing.assert_close(
        Bernoulli().predictive(mean, torch.zeros_like(mean)), mean.sigmoid(), rtol=1e-12, atol=1e-12
    )


def test_predictive_is_symmetric():
    """p(y = 1 | m, v) = 1 - p(y = 1 | -m, v), and the densities of the two labels mirror each other."""
    likelihood = Bernoulli()
    mean = torch.linspace(-5, 5, 11, dtype=DTYPE)
    var = torch.linspace(0.1, 3, 11, dtype=DTYPE)
    torch.testing.assert_close(
        likelihood.predictive(mean, var), 1 - likelihood.predictive(-mean, var), rtol=1e-12, atol=1e-12
    )
    ones, zeros = torch.ones_like(mean), torch.zeros_like(mean)
    torch.testing.assert_close(
        likelihood.log_predictive_density(ones, mean, var),
        likelihood.log_predictive_density(zeros, -mean, var),
        rtol=1e-12,
        atol=1e-12,
    )
