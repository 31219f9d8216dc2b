"""Test metrics in the original units of y (STUDY.md, experiment 2)."""

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


def error_rate(logits: Tensor, labels: Tensor) -> float:
    """Fraction of ``labels`` ``[n]`` that differ from the arg-max of ``logits`` ``[n, classes]``."""
    return (logits.argmax(-1) != labels).to(torch.float64).mean().item()
