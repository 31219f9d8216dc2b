"""Metrics in original units against torch.distributions."""

import math

import torch

from gpstudy.metrics import error_rate, rmse, average_log_likelihood


def test_rmse_in_original_units():
    y, mean = torch.tensor([0.0, 1.0, -1.0, 2.0], dtype=torch.float64), torch.zeros(4, dtype=torch.float64)
    assert math.isclose(rmse(mean, y, 3.0), 3.0 * math.sqrt(6 / 4))


def test_average_log_likelihood_matches_normal_density_in_original_units():
    generator = torch.Generator().manual_seed(0)
    y, mean = torch.randn(50, generator=generator, dtype=torch.float64), torch.randn(50, generator=generator, dtype=torch.float64)
    var = torch.rand(50, generator=generator, dtype=torch.float64) + 0.1
    y_mean, y_std = 4.0, 2.5
    original = torch.distributions.Normal(mean * y_std + y_mean, var.sqrt() * y_std)
    expected = original.log_prob(y * y_std + y_mean).mean().item()
    assert math.isclose(average_log_likelihood(mean, var, y, y_std), expected, rel_tol=1e-12)


def test_metrics_of_a_batch_are_each_splits_own():
    generator = torch.Generator().manual_seed(1)
    y, mean = torch.randn(2, 3, 20, generator=generator, dtype=torch.float64)
    var = torch.rand(3, 20, generator=generator, dtype=torch.float64) + 0.1
    y_std = torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64)
    batched = rmse(mean, y, y_std), average_log_likelihood(mean, var, y, y_std)
    for s in range(3):
        assert batched[0][s] == rmse(mean[s], y[s], y_std[s].item())
        assert batched[1][s] == average_log_likelihood(mean[s], var[s], y[s], y_std[s].item())


def test_error_rate():
    logits = torch.tensor([[2.0, 1.0], [0.0, 3.0], [1.0, 0.0]])
    assert error_rate(logits, torch.tensor([0, 1, 1])) == 1 / 3
