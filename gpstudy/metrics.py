"""Test metrics in the original units of y (STUDY.md, experiment 2)."""

import math

import torch
from torch import Tensor


def rmse(mean: Tensor, y: Tensor, y_std: float) -> float:
    """sqrt(mean((y - mu)^2)) * std_y, for standardized ``mean`` and ``y`` ``[n]``."""
    return (y - mean).square().mean().sqrt().item() * y_std


def average_log_likelihood(mean: Tensor, var: Tensor, y: Tensor, y_std: float) -> float:
    """mean_i log N(y_i | mu_i, var_i) - log std_y: the average predictive log density in original units."""
    log_density = -0.5 * (math.log(2 * math.pi) + var.log() + (y - mean).square() / var)
    return log_density.mean().item() - math.log(y_std)


def error_rate(logits: Tensor, labels: Tensor) -> float:
    """Fraction of ``labels`` ``[n]`` that differ from the arg-max of ``logits`` ``[n, classes]``."""
    return (logits.argmax(-1) != labels).to(torch.float64).mean().item()
