"""Test metrics: regression in the original units of y (STUDY.md, experiment 2), and classification."""

import math

import torch
from torch import Tensor


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


def average_log_predictive(log_densities: Tensor) -> Tensor:
    """mean_i log p(y_i | data) ``[*batch]`` of the log predictive densities ``[*batch, n]`` of a
    classifier (``Likelihood.log_predictive_density``)."""
    return log_densities.mean(-1)
