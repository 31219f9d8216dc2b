"""Hyperparameter pretraining on the exact GP marginal likelihood, and saving the result."""

import json
from collections.abc import Iterable
from pathlib import Path

import torch
from torch import Tensor

from gpstudy.gaussian import inverse_positive
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
    generator: torch.Generator,
) -> None:
    """Fit kernel and noise in place by Adam on -LML / n of a random subset (STUDY.md, appendix B.2).

    Args:
        x: training inputs ``[N, D]``.
        y: training targets ``[N]``.
        kernel: trained in place.
        likelihood: trained in place.
        subset_size: the subset holds min(N, subset_size) points, drawn without replacement.
        iterations: Adam steps.
        lr: Adam learning rate.
        generator: draws the subset.
    """
    order = torch.randperm(x.shape[0], generator=generator, device=generator.device)
    subset = order[:subset_size].to(x.device)
    x_subset, y_subset = x[subset], y[subset]
    optimizer = torch.optim.Adam([*kernel.parameters(), *likelihood.parameters()], lr=lr)
    for _ in range(iterations):
        optimizer.zero_grad()
        loss = -log_marginal_likelihood(x_subset, y_subset, kernel, likelihood) / y_subset.shape[-1]
        loss.backward()
        optimizer.step()


def hyperparameters_to_dict(kernel: Kernel, likelihood: GaussianLikelihood) -> dict[str, list[float] | float]:
    """The constrained hyperparameters as JSON-able numbers: lengthscale (list), variance, noise_variance."""
    return {
        "lengthscale": kernel.lengthscale.detach().cpu().tolist(),
        "variance": kernel.variance.item(),
        "noise_variance": likelihood.noise_variance.item(),
    }


def load_hyperparameters(kernel: Kernel, likelihood: GaussianLikelihood, hyperparameters: dict) -> None:
    """Set kernel and noise in place from ``hyperparameters_to_dict``'s output."""
    with torch.no_grad():
        for raw, value in (
            (kernel.raw_lengthscale, hyperparameters["lengthscale"]),
            (kernel.raw_variance, hyperparameters["variance"]),
            (likelihood.raw_noise_variance, hyperparameters["noise_variance"]),
        ):
            raw.copy_(inverse_positive(torch.as_tensor(value, dtype=raw.dtype, device=raw.device)))


def read_hyperparameters(files: Iterable[str | Path]) -> dict | None:
    """The hyperparameters in the first of ``files`` (a rule's optional input), or None if there is none."""
    files = list(files)
    return json.loads(Path(files[0]).read_text()) if files else None
