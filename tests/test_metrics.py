"""Regression metrics in original units against torch.distributions; classification metrics by hand."""

import math

import torch
from torch.distributions import Normal

from gpstudy.likelihoods import Bernoulli, GaussianLikelihood
from gpstudy.metrics import METRIC_NAMES, TASK_METRICS, average_log_likelihood, error_rate, rmse, task_metrics
from gpstudy.report.results import RUN_COLUMNS


def test_rmse_in_original_units():
    y, mean = torch.tensor([0.0, 1.0, -1.0, 2.0], dtype=torch.float64), torch.zeros(4, dtype=torch.float64)
    assert math.isclose(rmse(mean, y, 3.0), 3.0 * math.sqrt(6 / 4))


def test_average_log_likelihood_matches_normal_density_in_original_units():
    generator = torch.Generator().manual_seed(0)
    y, mean = (
        torch.randn(50, generator=generator, dtype=torch.float64),
        torch.randn(50, generator=generator, dtype=torch.float64),
    )
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


def test_error_rate_of_class_probabilities_per_split():
    probabilities = torch.tensor(
        [[[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.2, 0.5, 0.3]], [[0.1, 0.1, 0.8], [0.4, 0.5, 0.1], [0.3, 0.3, 0.4]]],
        dtype=torch.float64,
    )
    labels = torch.tensor([[0, 2, 0], [1, 0, 2]])  # predicted [0, 2, 1] and [2, 1, 2]
    torch.testing.assert_close(error_rate(probabilities, labels), torch.tensor([1 / 3, 2 / 3], dtype=torch.float64))
    assert error_rate(probabilities[1], labels[1]) == 2 / 3


def test_error_rate_of_binary_probabilities_per_split():
    probabilities = torch.tensor([[0.9, 0.2, 0.6, 0.4], [0.5, 0.51, 0.1, 0.7]], dtype=torch.float64)
    labels = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0]])  # predicted [1, 0, 1, 0] and [0, 1, 0, 1]
    torch.testing.assert_close(error_rate(probabilities, labels), torch.tensor([1 / 4, 2 / 4], dtype=torch.float64))
    assert error_rate(probabilities[0], labels[0].double()) == 1 / 4


def test_metrics_follow_the_likelihoods_task():
    mean, var = torch.tensor([[0.0, 2.0]], dtype=torch.float64), torch.tensor([[0.5, 0.5]], dtype=torch.float64)
    regression = task_metrics(
        GaussianLikelihood(0.5, batch_shape=(1,)),
        mean,
        var,
        torch.tensor([[1.0, 2.0]], dtype=torch.float64),
        torch.tensor([2.0], dtype=torch.float64),
    )
    expected_ll = Normal(mean, 1.0).log_prob(torch.tensor([[1.0, 2.0]], dtype=torch.float64)).mean(-1) - math.log(2)
    torch.testing.assert_close(regression["rmse"], torch.tensor([2 * math.sqrt(0.5)], dtype=torch.float64))
    torch.testing.assert_close(regression["test_ll"], expected_ll)
    labels = torch.tensor([[1, 1]])
    logits = torch.tensor([[-1.0, 2.0]], dtype=torch.float64)  # class 0, then class 1
    classification = task_metrics(Bernoulli(), logits, var, labels, 1.0)
    assert set(classification) == {"error_rate", "test_ll"} and classification["error_rate"].item() == 0.5
    torch.testing.assert_close(
        classification["test_ll"], Bernoulli().log_predictive_density(labels, logits, var).mean(-1)
    )


def test_every_metric_is_named_once_and_is_some_tasks():
    assert {metric for metrics in TASK_METRICS.values() for metric in metrics} == set(METRIC_NAMES)
    assert [column for column in RUN_COLUMNS if column in METRIC_NAMES] == list(METRIC_NAMES)
