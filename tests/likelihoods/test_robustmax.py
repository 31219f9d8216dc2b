"""The robust-max likelihood's quadrature against Monte Carlo (within 4 standard errors), against the closed
form of two classes, and at its limits: scale invariance, zero variance, probabilities summing to 1.

Latent standard deviations here stay within a factor of 2 of each other, where the default quadrature is
accurate to far below the tolerances (but for the sum of C = 10 probabilities, which needs more nodes); a
factor of 2 in a variance moves P(argmax) by well over them.
"""

import math

import pytest
import torch

from gpstudy import generators as draws
from gpstudy import numerics
from gpstudy.likelihoods import RobustMax
from gpstudy.likelihoods.robustmax import QUADRATURE_POINTS

DTYPE = numerics.DEFAULT_DTYPE
SAMPLES = 1_000_000  # Monte Carlo draws of f per point
TOLERANCE = 4  # standard errors


def inputs(classes: int, points: int = 4) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Labels ``[points]`` (floats: any dtype is accepted), latent means ``[points, C]`` and variances in [0.3, 1]."""
    generator = torch.Generator().manual_seed(0)
    mean = torch.randn(points, classes, generator=generator, dtype=DTYPE)
    var = 0.3 + 0.7 * torch.rand(points, classes, generator=generator, dtype=DTYPE)
    return torch.arange(points, dtype=DTYPE) % classes, mean, var


def test_probabilities_match_monte_carlo():
    """P(argmax = c) against the fraction of draws f_s ~ N(mean, var) whose arg-max is c, within 4 standard
    errors sqrt(P (1 - P) / S); the class probabilities, E log p(y | f) and int p(y | f) N(f) df against the
    averages of p(c | f_s), log p(y | f_s) and p(y | f_s), each two-valued, |a - b| times that error."""
    y, mean, var = inputs(4)
    likelihood = RobustMax(4, epsilon=0.05)
    f = mean + var.sqrt() * draws.randn((SAMPLES, *mean.shape), torch.Generator().manual_seed(1), like=mean)
    exact = torch.stack([likelihood.probability_is_largest(torch.full_like(y, c), mean, var) for c in range(4)], -1)
    standard_error = (exact * (1 - exact) / SAMPLES).sqrt()  # [n, C]
    assert (exact * SAMPLES > 50).all()  # every class wins in dozens of draws: each comparison has teeth
    classes = torch.arange(4, dtype=DTYPE).reshape(4, 1, 1)  # [C, 1, 1] against f [S, n, C]
    label = exact.gather(-1, y.long().unsqueeze(-1)).squeeze(-1)
    label_error = standard_error.gather(-1, y.long().unsqueeze(-1)).squeeze(-1)
    high, low = math.log(0.95), math.log(0.05 / 3)  # log p(y | f) at and off the arg-max
    comparisons = {  # name -> (quadrature, Monte Carlo average, standard error)
        "P(argmax)": (exact, (f.argmax(-1, keepdim=True) == torch.arange(4)).to(DTYPE).mean(0), standard_error),
        "predictive": (
            likelihood.predictive(mean, var),
            likelihood.log_prob(classes, f).exp().mean(1).T,
            (math.exp(high) - math.exp(low)) * standard_error,
        ),
        "expected_log_prob": (
            likelihood.expected_log_prob(y, mean, var),
            likelihood.log_prob(y, f).mean(0),
            (high - low) * label_error,
        ),
        "predictive_density": (
            likelihood.log_predictive_density(y, mean, var).exp(),
            likelihood.log_prob(y, f).exp().mean(0),
            (math.exp(high) - math.exp(low)) * label_error,
        ),
    }
    torch.testing.assert_close(comparisons["expected_log_prob"][0], high * label + low * (1 - label))
    for name, (quadrature, monte_carlo, error) in comparisons.items():
        assert ((monte_carlo - quadrature).abs() < TOLERANCE * error).all(), (name, monte_carlo - quadrature, error)


def test_two_classes_match_the_closed_form():
    """P(f_1 > f_0) = Phi((m_1 - m_0) / sqrt(v_0 + v_1)), and the class probabilities from it."""
    _, mean, var = inputs(2, points=6)
    likelihood = RobustMax(2, epsilon=0.1)
    exact = torch.special.ndtr((mean[:, 1] - mean[:, 0]) / var.sum(-1).sqrt())  # [n]
    ones = torch.ones(len(mean), dtype=DTYPE)
    close = {"rtol": 0, "atol": 1e-6}
    torch.testing.assert_close(likelihood.probability_is_largest(ones, mean, var), exact, **close)
    probabilities = torch.stack([0.9 * (1 - exact) + 0.1 * exact, 0.9 * exact + 0.1 * (1 - exact)], -1)
    torch.testing.assert_close(likelihood.predictive(mean, var), probabilities, **close)
    torch.testing.assert_close(likelihood.log_predictive_density(ones, mean, var), probabilities[:, 1].log(), **close)
    torch.testing.assert_close(
        likelihood.expected_log_prob(ones, mean, var), math.log(0.9) * exact + math.log(0.1) * (1 - exact), **close
    )


def test_invariant_to_the_latent_scale():
    """Means and standard deviations times 100 (variances times 10^4) give the same numbers."""
    y, mean, var = inputs(5)
    likelihood = RobustMax(5)
    for scaled, original in (
        (likelihood.predictive(100 * mean, 1e4 * var), likelihood.predictive(mean, var)),
        (likelihood.expected_log_prob(y, 100 * mean, 1e4 * var), likelihood.expected_log_prob(y, mean, var)),
    ):
        torch.testing.assert_close(scaled, original, rtol=1e-12, atol=1e-12)


def test_zero_variance_is_the_hard_arg_max():
    """var = 0 (or 1e-300) gives p(y | argmax of the means): 1 - epsilon or epsilon / (C - 1), exactly, and the
    expectations are log p(y | mean); gradients stay finite."""
    y, mean, _ = inputs(3, points=6)
    likelihood = RobustMax(3, epsilon=0.01)
    hard = torch.full_like(mean, 0.005).scatter(-1, mean.argmax(-1, keepdim=True), 0.99)
    for value in (0.0, 1e-300):
        var = torch.full_like(mean, value, requires_grad=True)
        mean_ = mean.clone().requires_grad_()
        torch.testing.assert_close(likelihood.predictive(mean_, var), hard, rtol=0, atol=1e-14)
        expected = likelihood.expected_log_prob(y, mean_, var)
        torch.testing.assert_close(expected, likelihood.log_prob(y, mean), rtol=0, atol=1e-14)
        torch.testing.assert_close(
            likelihood.log_predictive_density(y, mean_, var), likelihood.log_prob(y, mean), rtol=0, atol=1e-14
        )
        expected.sum().backward()
        assert torch.isfinite(mean_.grad).all() and torch.isfinite(var.grad).all()


@pytest.mark.parametrize("points, tolerance", [(QUADRATURE_POINTS, 1e-3), (100, 1e-9)])
def test_class_probabilities_sum_to_one(points, tolerance):
    """Each class's P(argmax) has its own quadrature: their sum is 1 to the quadrature's accuracy."""
    _, mean, var = inputs(10, points=20)
    probabilities = RobustMax(10, quadrature_points=points).predictive(mean, var)
    assert (probabilities > 0).all()
    torch.testing.assert_close(probabilities.sum(-1), torch.ones(20, dtype=DTYPE), rtol=0, atol=tolerance)


def test_log_prob_is_the_robust_max():
    """log(1 - epsilon) at the arg-max of f, log(epsilon / (C - 1)) elsewhere."""
    f = torch.tensor([[0.3, -1.0, 2.0], [5.0, 4.0, 4.5]], dtype=DTYPE)
    log_prob = RobustMax(3, epsilon=0.2).log_prob(torch.tensor([[2, 0], [1, 0]]), f.expand(2, 2, 3))
    torch.testing.assert_close(
        log_prob, torch.tensor([[math.log(0.8), math.log(0.8)], [math.log(0.1), math.log(0.8)]], dtype=DTYPE)
    )


def test_gradients_match_finite_differences():
    y, mean, var = inputs(3, points=2)
    likelihood = RobustMax(3, epsilon=0.05)
    mean.requires_grad_(), var.requires_grad_()
    assert torch.autograd.gradcheck(lambda m, v: likelihood.expected_log_prob(y, m, v), (mean, var))
    assert torch.autograd.gradcheck(lambda m, v: likelihood.log_predictive_density(y, m, v), (mean, var))
    assert torch.autograd.gradcheck(likelihood.predictive, (mean, var))
