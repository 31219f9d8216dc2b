"""Hyperparameter pretraining on the exact GP marginal likelihood, and saving the result."""

import logging
from collections.abc import Iterable
from pathlib import Path

import torch
from torch import Tensor

from gpstudy import generators as draws
from gpstudy.io import read_json
from gpstudy.kernels import Kernel
from gpstudy.likelihoods import GaussianLikelihood, Likelihood
from gpstudy.linalg import positive
from gpstudy.methods.exact_gp import log_marginal_likelihood
from gpstudy.training.checkpoint import load, remove_partial_writes, save
from gpstudy.training.optim import adam, optimizer_step
from gpstudy.training.progress import Progress
from gpstudy.training.stopping import RERUN_STATUS, Stopped, checkpointed, stop_signals

log = logging.getLogger(__name__)


def pretrain_hyperparameters(
    x: Tensor,
    y: Tensor,
    kernel: Kernel,
    likelihood: GaussianLikelihood,
    *,
    subset_size: int,
    iterations: int,
    lr: float,
    generators: draws.Generators,
    checkpoint: Path | None = None,
    fingerprint: str = "",
) -> Tensor:
    """Fit kernel and noise in place by Adam on -LML / n of a random subset (STUDY.md, appendix B.2); return
    the objective ``[*batch]`` of the last step (before its update), unread: no host synchronisation.

    A batch of splits (kernel and likelihood with ``batch_shape=(S,)``) is fitted on the sum of their
    objectives, each split on its own subset.

    Args:
        x: training inputs ``[*batch, N, D]``.
        y: training targets ``[*batch, N]``.
        kernel: trained in place.
        likelihood: trained in place.
        subset_size: the subset holds min(N, subset_size) points, drawn without replacement (the config's
            ``pretrain_subset``).
        iterations: Adam steps (``pretrain_iterations``).
        lr: Adam learning rate (``pretrain_lr``).
        generators: draw the subsets (one generator per split).
        checkpoint: where a signal's stop saves the state (parameters, Adam's moments and step counts, the
            iteration, the subsets, the generators), and which is resumed from when present: to the same
            numbers as an uninterrupted run. Written only on a signal, synchronously and atomically
            (:func:`gpstudy.training.checkpoint.save`): pretraining is a minute or less at the study's sizes, shorter
            than training's periodic interval. The caller removes it once pretraining is done.
        fingerprint: what the pretraining is (settings, splits, code); a checkpoint saved under another
            is discarded with a warning, never resumed (:func:`gpstudy.training.checkpoint.load`).

    Raises:
        gpstudy.training.stopping.Stopped: SIGTERM or SIGUSR1 came (a cluster's time limit or preemption, ``kill``):
            it ends the step, writes ``checkpoint`` and logs "checkpointed at iteration k on SIGTERM"
            (without a checkpoint it just stops: its rerun starts again).
    """
    optimizer = adam([*kernel.parameters(), *likelihood.parameters()], lr, x.device)
    state = load(checkpoint, fingerprint, x.device) if checkpoint is not None else None
    if state is None:
        start, subset = 1, draws.randperm(x.shape[-2], generators, x.device)[..., :subset_size]
    else:
        kernel.load_state_dict(state["kernel"])
        likelihood.load_state_dict(state["likelihood"])
        optimizer.load_state_dict(state["optimizer"])
        draws.set_state(generators, state["generators"])  # ending as an uninterrupted run's (the steps draw none)
        start, subset = state["step"] + 1, state["subset"]
        log.info("resumed from %s at iteration %d", checkpoint, start)
    if checkpoint is not None:
        remove_partial_writes(checkpoint)
    x_subset, y_subset = draws.take_rows(x, subset), draws.take_rows(y, subset)
    # the checkpoint is written inside: a second signal during the write is only recorded
    with stop_signals() as stop, Progress("pretraining", iterations, log, start) as progress:
        for step in range(start, iterations + 1):
            objective = optimizer_step(
                optimizer, lambda: negative_lml_per_point(x_subset, y_subset, kernel, likelihood), generators
            )
            progress.step(step)  # the host's clock alone: no device read
            if stop and step < iterations:  # a signal (gpstudy.training.stopping): save this step's state, then exit
                if checkpoint is None:
                    message = f"pretraining stopped at iteration {step} on {stop.name}, no checkpoint"
                    log.info("%s; exit status %d: rerun to start it again", message, RERUN_STATUS)
                    raise Stopped(message)
                save(
                    checkpoint,
                    {
                        "kernel": kernel.state_dict(),
                        "likelihood": likelihood.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "generators": draws.get_state(generators),
                        "subset": subset,
                        "step": step,
                        "fingerprint": fingerprint,
                    },
                )
                raise checkpointed(step, stop, log)
    return objective.detach()


def negative_lml_per_point(x: Tensor, y: Tensor, kernel: Kernel, likelihood: GaussianLikelihood) -> Tensor:
    """Pretraining's objective, -log N(y | 0, K + sigma^2 I) / n ``[*batch]`` (Rasmussen & Williams, eq. 2.30)."""
    return -log_marginal_likelihood(x, y, kernel, likelihood) / y.shape[-1]


def hyperparameters_to_dict(kernel: Kernel, likelihood: Likelihood) -> dict[str, dict]:
    """The kernel's and the likelihood's state dicts as JSON-able nested lists (raw, unconstrained
    values; with a leading list over the splits of a batch): ``{"kernel": {...}, "likelihood": {...}}``."""
    return {
        part: {name: value.detach().cpu().tolist() for name, value in module.state_dict().items()}
        for part, module in (("kernel", kernel), ("likelihood", likelihood))
    }


def load_hyperparameters(kernel: Kernel, likelihood: Likelihood, hyperparameters: dict[str, dict]) -> None:
    """Set kernel and likelihood in place from ``hyperparameters_to_dict``'s output (of the same batch shape)."""
    for part, module in (("kernel", kernel), ("likelihood", likelihood)):
        state = module.state_dict()
        module.load_state_dict(
            {
                name: torch.as_tensor(value, dtype=state[name].dtype, device=state[name].device)
                for name, value in hyperparameters[part].items()
            }
        )


def stack_hyperparameters(per_split: list[dict[str, dict]]) -> dict[str, dict]:
    """One split's ``hyperparameters_to_dict`` each -> one dict of a batch (a leading list over splits)."""
    return {
        part: {name: [split[part][name] for split in per_split] for name in per_split[0][part]} for part in per_split[0]
    }


def unstack_hyperparameters(batch: dict[str, dict]) -> list[dict[str, dict]]:
    """The inverse of ``stack_hyperparameters``."""
    size = len(next(iter(next(iter(batch.values())).values())))
    return [
        {part: {name: values[s] for name, values in state.items()} for part, state in batch.items()}
        for s in range(size)
    ]


def readable_hyperparameters(kernel: Kernel, likelihood: Likelihood) -> dict[str, list | float]:
    """Every positive hyperparameter by its constrained name (``raw_lengthscale`` -> ``lengthscale``),
    as JSON-able numbers (with a leading list over the splits of a batch)."""
    return {
        name.removeprefix("raw_"): positive(value).detach().cpu().tolist()
        for module in (kernel, likelihood)
        for name, value in module.named_parameters()
        if name.startswith("raw_")
    }


def read_hyperparameters(files: Iterable[str | Path]) -> dict | None:
    """The hyperparameters in the first of ``files`` (a rule's optional input), or None if there is none."""
    files = list(files)
    return read_json(files[0]) if files else None
