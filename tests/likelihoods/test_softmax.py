"""The softmax likelihood's Monte Carlo estimates against quadrature, within 5 Monte Carlo standard errors.

An estimate of E g(f) from S samples has standard error std(g(f)) / sqrt(S); the standard deviations come
from the same quadrature as the exact values. A factor of 2 in a variance moves every estimate here by
well over the tolerance.
"""

import math

import numpy as np
import pytest
import torch
from scipy.special import log_expit, log_softmax, softmax

from gpstudy import numerics
from gpstudy.likelihoods import Bernoulli, Softmax

DTYPE = numerics.DEFAULT_DTYPE
SAMPLES = 100_000  # Monte Carlo samples per point and class of the comparisons
TOLERANCE = 5  # standard errors


def gauss_hermite_grid(mean: np.ndarray, var: np.ndarray, points: int) -> tuple[np.ndarray, np.ndarray]:
    """Tensor-product Gauss-Hermite nodes f ``[points^C, C]`` and weights ``[points^C]`` (summing to 1)
    for independent N(mean_c, var_c), ``mean`` and ``var`` ``[C]``."""
    x, w = np.polynomial.hermite.hermgauss(points)
    nodes = np.stack([grid.ravel() for grid in np.meshgrid(*[x] * len(mean), indexing="ij")], -1)
    weights = np.prod(np.meshgrid(*[w] * len(mean), indexing="ij"), axis=0).ravel() / np.pi ** (len(mean) / 2)
    return mean + np.sqrt(2 * var) * nodes, weights


def moments(values: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Quadrature mean and standard deviation of ``values`` ``[P, ...]``."""
    mean = np.tensordot(weights, values, axes=1)
    return mean, np.sqrt(np.maximum(np.tensordot(weights, values**2, axes=1) - mean**2, 0))


def inputs(classes: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Labels ``[4]`` (floats: any dtype is accepted) and latent moments ``[4, C]``."""
    generator = torch.Generator().manual_seed(0)
    mean = torch.randn(4, classes, generator=generator, dtype=DTYPE)
    var = torch.rand(4, classes, generator=generator, dtype=DTYPE) + 0.2
    return torch.arange(4, dtype=DTYPE) % classes, mean, var


def estimates(likelihood: Softmax, y: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> list[np.ndarray]:
    """Expected log density, log predictive density and class probabilities, each from its own seed."""
    return [
        estimate.numpy()
        for estimate in (
            likelihood.expected_log_prob(y, mean, var, torch.Generator().manual_seed(1)),
            likelihood.log_predictive_density(y, mean, var, torch.Generator().manual_seed(2)),
            likelihood.predictive(mean, var, torch.Generator().manual_seed(3)),
        )
    ]


def test_two_classes_are_the_bernoulli_likelihood_of_the_difference():
    """softmax(f)_1 = sigmoid(f1 - f0) with f1 - f0 ~ N(m1 - m0, v0 + v1)."""
    y, mean, var = inputs(2)
    elp, lpd, probabilities = estimates(Softmax(2, SAMPLES, SAMPLES), y, mean, var)
    bernoulli = Bernoulli()
    difference_mean, difference_var = mean[:, 1] - mean[:, 0], var.sum(-1)
    exact = [
        bernoulli.expected_log_prob(y, difference_mean, difference_var).numpy(),
        bernoulli.log_predictive_density(y, difference_mean, difference_var).numpy(),
        bernoulli.predictive(difference_mean, difference_var).numpy(),
    ]
    for i in range(len(y)):
        f, weights = gauss_hermite_grid(difference_mean[i : i + 1].numpy(), difference_var[i : i + 1].numpy(), 64)
        sign = 2 * y[i].item() - 1
        _, log_p_std = moments(log_expit(sign * f[:, 0]), weights)
        p_mean, p_std = moments(np.exp(log_expit(sign * f[:, 0])), weights)
        _, probability_std = moments(np.exp(log_expit(f[:, 0])), weights)
        assert abs(elp[i] - exact[0][i]) < TOLERANCE * log_p_std / math.sqrt(SAMPLES)
        assert abs(lpd[i] - exact[1][i]) < TOLERANCE * p_std / p_mean / math.sqrt(SAMPLES)
        assert abs(probabilities[i, 1] - exact[2][i]) < TOLERANCE * probability_std / math.sqrt(SAMPLES)
    np.testing.assert_allclose(probabilities.sum(-1), 1, rtol=1e-12)


def test_three_classes_match_tensor_product_quadrature():
    y, mean, var = inputs(3)
    elp, lpd, probabilities = estimates(Softmax(3, SAMPLES, SAMPLES), y, mean, var)
    for i in range(len(y)):
        f, weights = gauss_hermite_grid(mean[i].numpy(), var[i].numpy(), 32)
        label = int(y[i])
        log_p_mean, log_p_std = moments(log_softmax(f, axis=-1)[:, label], weights)
        probability_mean, probability_std = moments(softmax(f, axis=-1), weights)  # [C]
        p_mean, p_std = probability_mean[label], probability_std[label]
        assert abs(elp[i] - log_p_mean) < TOLERANCE * log_p_std / math.sqrt(SAMPLES)
        assert abs(lpd[i] - math.log(p_mean)) < TOLERANCE * p_std / p_mean / math.sqrt(SAMPLES)
        assert (abs(probabilities[i] - probability_mean) < TOLERANCE * probability_std / math.sqrt(SAMPLES)).all()


def test_log_prob_matches_torch_categorical():
    y, mean, _ = inputs(3)
    expected = torch.distributions.Categorical(logits=mean).log_prob(y.long())
    torch.testing.assert_close(Softmax(3).log_prob(y, mean), expected)


def test_same_seed_same_numbers():
    y, mean, var = inputs(3)
    likelihood = Softmax(3, num_samples=4, predictive_samples=4)
    first, again, other = (
        likelihood.expected_log_prob(y, mean, var, torch.Generator().manual_seed(seed)) for seed in (7, 7, 8)
    )
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_monte_carlo_without_generators_is_refused():
    y, mean, var = inputs(3)
    likelihood = Softmax(3)
    for estimate in (
        lambda: likelihood.expected_log_prob(y, mean, var),
        lambda: likelihood.log_predictive_density(y, mean, var),
        lambda: likelihood.predictive(mean, var),
    ):
        with pytest.raises(ValueError, match="pass generators"):
            estimate()
