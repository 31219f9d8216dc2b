"""Test metrics: regression in the original units of y (STUDY.md, experiment 2), and classification."""

import math

import torch
from torch import Tensor

from gpstudy import generators as draws
from gpstudy.likelihoods import Likelihood

METRIC_NAMES = {  # every test metric, in results/runs.csv's column order -> its display name
    "rmse": "Test RMSE",
    "error_rate": "Test error rate",
    "test_ll": "Test log-likelihood",
}
TASK_METRICS = {  # a task's test metrics; the first is the learning curves'
    "regression": ("rmse", "test_ll"),
    "classification": ("error_rate", "test_ll"),
}


def rmse(mean: Tensor, y: Tensor, y_std: Tensor | float) -> Tensor:
    """sqrt(mean((y - mu)^2)) * std_y ``[*batch]``, for standardized ``mean`` and ``y`` ``[*batch, n]``
    and each split's ``y_std`` ``[*batch]``."""
    return (y - mean).square().mean(-1).sqrt() * y_std


def average_log_likelihood(mean: Tensor, var: Tensor, y: Tensor, y_std: Tensor | float) -> Tensor:
    """mean_i log N(y_i | mu_i, var_i) - log std_y ``[*batch]``: the average predictive log density in
    original units, for ``[*batch, n]`` values and each split's ``y_std`` ``[*batch]``."""
    log_density = -0.5 * (math.log(2 * math.pi) + var.log() + (y - mean).square() / var)
    return log_density.mean(-1) - torch.log(torch.as_tensor(y_std, dtype=mean.dtype, device=mean.device))


def error_rate(probabilities: Tensor, labels: Tensor) -> Tensor:
    """The fraction ``[*batch]`` of ``labels`` ``[*batch, n]`` that differ from the predicted class: the
    arg-max of class probabilities ``[*batch, n, C]``, or for binary P(y = 1) ``[*batch, n]`` class 1
    where it exceeds 0.5."""
    predicted = probabilities > 0.5 if probabilities.ndim == labels.ndim else probabilities.argmax(-1)
    return (predicted.long() != labels.long()).to(probabilities.dtype).mean(-1)


def task_metrics(
    likelihood: Likelihood,
    mean: Tensor,
    var: Tensor,
    y: Tensor,
    y_std: Tensor | float,
    generators: draws.Generators | None = None,
) -> dict[str, Tensor]:
    """The task's ``TASK_METRICS`` ``[*batch]`` from the latent predictive N(mean, var) at the test inputs:
    regression RMSE and average log density in original units; classification the error rate and the
    average log predictive density of the labels ``y``."""
    if likelihood.task == "regression":
        mean_y, var_y = likelihood.predictive(mean, var)
        return {"rmse": rmse(mean_y, y, y_std), "test_ll": average_log_likelihood(mean_y, var_y, y, y_std)}
    return {
        "error_rate": error_rate(likelihood.predictive(mean, var, generators), y),
        "test_ll": likelihood.log_predictive_density(y, mean, var, generators).mean(-1),
    }
