"""Hyperparameter pretraining on the exact GP marginal likelihood, and saving the result."""

from collections.abc import Iterable
from pathlib import Path

import torch
from torch import Tensor

from gpstudy import generators as draws
from gpstudy.gaussian import inverse_positive
from gpstudy.io import read_json
from gpstudy.kernels import Kernel
from gpstudy.likelihoods import GaussianLikelihood
from gpstudy.methods.exact_gp import log_marginal_likelihood


def pretrain_hyperparameters(
    x: Tensor,
    y: Tensor,
    kernel: Kernel,
    likelihood: GaussianLikelihood,
    *,
    subset_size: int = 1000,
    iterations: int = 1000,
    lr: float = 0.01,
    generators: draws.Generators,
) -> None:
    """Fit kernel and noise in place by Adam on -LML / n of a random subset (STUDY.md, appendix B.2).

    A batch of splits (kernel and likelihood with ``batch_shape=(S,)``) is fitted on the sum of their
    objectives, each split on its own subset.

    Args:
        x: training inputs ``[*batch, N, D]``.
        y: training targets ``[*batch, N]``.
        kernel: trained in place.
        likelihood: trained in place.
        subset_size: the subset holds min(N, subset_size) points, drawn without replacement.
        iterations: Adam steps.
        lr: Adam learning rate.
        generators: draw the subsets (one generator per split).
    """
    subset = draws.randperm(x.shape[-2], generators, x.device)[..., :subset_size]
    x_subset, y_subset = draws.take_rows(x, subset), draws.take_rows(y, subset)
    optimizer = torch.optim.Adam([*kernel.parameters(), *likelihood.parameters()], lr=lr)
    for _ in range(iterations):
        optimizer.zero_grad()
        loss = -log_marginal_likelihood(x_subset, y_subset, kernel, likelihood) / y_subset.shape[-1]
        loss.sum().backward()
        optimizer.step()


def hyperparameters_to_dict(kernel: Kernel, likelihood: GaussianLikelihood) -> dict[str, list | float]:
    """The constrained hyperparameters as JSON-able numbers: lengthscale (list), variance, noise_variance
    (with a leading list over the splits of a batch)."""
    return {
        "lengthscale": kernel.lengthscale.detach().cpu().tolist(),
        "variance": kernel.variance.detach().cpu().tolist(),
        "noise_variance": likelihood.noise_variance.detach().cpu().tolist(),
    }


def stack_hyperparameters(per_split: list[dict]) -> dict[str, list]:
    """One split's ``hyperparameters_to_dict`` each -> one dict of a batch (a leading list over splits)."""
    return {key: [hyperparameters[key] for hyperparameters in per_split] for key in per_split[0]}


def unstack_hyperparameters(batch: dict[str, list]) -> list[dict]:
    """The inverse of ``stack_hyperparameters``."""
    return [dict(zip(batch, values)) for values in zip(*batch.values())]


def load_hyperparameters(kernel: Kernel, likelihood: GaussianLikelihood, hyperparameters: dict) -> None:
    """Set kernel and noise in place from ``hyperparameters_to_dict``'s output (of the same batch shape)."""
    with torch.no_grad():
        for raw, value in (
            (kernel.raw_lengthscale, hyperparameters["lengthscale"]),
            (kernel.raw_variance, hyperparameters["variance"]),
            (likelihood.raw_noise_variance, hyperparameters["noise_variance"]),
        ):
            value = torch.as_tensor(value, dtype=raw.dtype, device=raw.device)
            value = value.reshape(value.shape + (1,) * (raw.ndim - value.ndim))  # one lengthscale for all D
            raw.copy_(inverse_positive(value))


def read_hyperparameters(files: Iterable[str | Path]) -> dict | None:
    """The hyperparameters in the first of ``files`` (a rule's optional input), or None if there is none."""
    files = list(files)
    return read_json(files[0]) if files else None
