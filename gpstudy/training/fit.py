"""The one training loop every method runs: seeded, device-agnostic, checkpointed and resumable."""

import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

from gpstudy import generators as draws
from gpstudy.methods import Method, compile_problem
from gpstudy.runtime.devices import synchronize
from gpstudy.study.settings import SettingsError
from gpstudy.training.checkpoint import Checkpointer, load
from gpstudy.training.optim import adam, optimizer_step
from gpstudy.training.pretrain import readable_hyperparameters
from gpstudy.training.progress import Progress, format_values
from gpstudy.training.stopping import checkpointed, stop_signals

log = logging.getLogger(__name__)


class BatchSampler:
    """Minibatch indices from shuffled epochs: O(batch) per iteration, O(N) once per epoch.

    Each split shuffles with its own generator; all splits of a batch have N points, so they share
    the cursor. A data set smaller than the batch size is used whole at every iteration.
    """

    def __init__(self, n: int, batch_size: int, generators: draws.Generators, device: torch.device):
        self.n, self.batch_size, self.generators = n, min(batch_size, n), generators
        self.order = torch.arange(n, device=device).expand(*draws.batch_shape(generators), n)
        self.cursor = n  # start with a fresh permutation

    def next(self) -> Tensor:
        """Indices ``[*batch, B]`` of the next minibatch."""
        if self.batch_size == self.n:
            return self.order
        if self.cursor + self.batch_size > self.n:
            self.order = draws.randperm(self.n, self.generators, self.order.device)
            self.cursor = 0
        self.cursor += self.batch_size
        return self.order[..., self.cursor - self.batch_size : self.cursor]

    def state_dict(self) -> dict:
        return {"order": self.order, "cursor": self.cursor}

    def load_state_dict(self, state: dict) -> None:
        self.order, self.cursor = state["order"].to(self.order.device), state["cursor"]


def train_iteration(
    method: Method,
    optimizer: torch.optim.Optimizer,
    sampler: BatchSampler,
    x_train: Tensor,
    y_train: Tensor,
    step: int,
    generators: draws.Generators,
    loss: Callable[..., Tensor] | None = None,
) -> Tensor:
    """Iteration ``step`` of training: the next minibatch, one optimizer step on the method's loss (or
    ``loss``, the same function compiled) and its own update (at most one host synchronisation:
    ``gpstudy.training.optim.optimizer_step``). Returns the loss ``[*batch]``."""
    batch = sampler.next()
    x_batch, y_batch = draws.take_rows(x_train, batch), draws.take_rows(y_train, batch)
    objective = method.loss if loss is None else loss
    return optimizer_step(
        optimizer, lambda: objective(x_batch, y_batch, step, generators), generators, method.natural_update
    )


STEP_SOURCE = "L['step']"  # the step argument of ``Method.loss``, as torch.compile names it


def step_as_symbol_supported() -> bool:
    """Whether this torch can be told to compile the loss's step as a symbol from the first call
    (``torch.compiler.config.dynamic_sources``, torch >= 2.7); an older torch compiles the step as the
    constant 1 first and again, as a symbol, at step 2 (the same numbers, one more compile)."""
    return hasattr(getattr(torch.compiler, "config", None), "dynamic_sources")


def fit(
    method: Method,
    x_train: Tensor,
    y_train: Tensor,
    *,
    iterations: int,
    batch_size: int,
    lr: float,
    generators: draws.Generators,
    evaluate: Callable[[], dict[str, Tensor]],
    eval_every: int,
    checkpoint: Path | None = None,
    checkpoint_every: int | None = None,
    checkpoint_minutes: float | None = None,
    fingerprint: str = "",
    torch_compile: bool = False,
) -> tuple[list[dict[str, float]], float]:
    """Train ``method`` with one Adam for ``iterations`` steps (t = 1..T); resume from ``checkpoint``.

    A batch of splits trains on the sum of the splits' losses, so each split's gradient is its own
    (and Adam is elementwise): split s follows the same path in a batch as alone.

    Args:
        method: trained in place.
        x_train: ``[*batch, N, D]`` on the training device.
        y_train: ``[*batch, N]``.
        iterations: T.
        batch_size: B.
        lr: Adam learning rate.
        generators: every random draw of training (batches, measurement points, samples), one per split.
        evaluate: test metrics ``[*batch]`` of the current state (must draw no randomness).
        eval_every: iterations between evaluations; the last iteration is always evaluated.
        checkpoint: file holding the latest state; loaded if present, written (by a background thread,
            while training goes on: :class:`~gpstudy.training.checkpoint.Checkpointer`) after every
            ``checkpoint_every``-th iteration and whenever ``checkpoint_minutes`` of wall clock have
            passed since the last one (None: not by that rule). Resuming gives the same numbers as an
            uninterrupted run. A checkpoint that cannot be written fails the run. With a checkpoint,
            SIGTERM or SIGUSR1 (a cluster's warning ahead of its time limit, a preemption, ``kill``:
            :mod:`gpstudy.training.stopping`) ends the step, writes the checkpoint and waits for it, logs
            "checkpointed at iteration k on SIGTERM" and raises :class:`gpstudy.training.stopping.Stopped` (exit status
            75); the handlers are those of before once ``fit`` returns.
        fingerprint: what the run is (settings, splits, start, code); a checkpoint written under
            another fingerprint is discarded with a warning, never resumed.
        torch_compile: run the method's loss (forward and backward) through ``torch.compile``; its
            compile time, in the first iterations, counts as training time. A torch too old to compile
            the method (``gpstudy.methods.compile_problem``) raises
            :class:`gpstudy.study.settings.SettingsError` before training.

    Returns:
        The learning curve (one dict per evaluation: iteration, seconds, and per split the objective
        and metrics as lists, or floats when unbatched) and the training seconds (evaluation
        excluded, the checkpoints' host copies included, summed over resumed sessions; a checkpoint
        records the host's clock, unsynchronised, so its seconds may miss the device's queued work).
    """
    if torch_compile and (problem := compile_problem(method.name)):  # the job's torch (check_settings: the plan's)
        raise SettingsError(problem)
    optimizer = adam(method.adam_parameters(), lr, x_train.device)
    sampler = BatchSampler(x_train.shape[-2], batch_size, generators, x_train.device)
    start, curve, seconds = 1, [], 0.0
    state = load(checkpoint, fingerprint, x_train.device) if checkpoint is not None else None
    if state is not None:
        method.load_state_dict(state["method"])
        optimizer.load_state_dict(state["optimizer"])
        draws.set_state(generators, state["generators"])
        sampler.load_state_dict(state["sampler"])
        start, curve, seconds = state["step"] + 1, state["curve"], state["seconds"]
        log.info("resumed from %s at iteration %d", checkpoint, start)
    checkpoints = Checkpointer(checkpoint, x_train.device, checkpoint_every, checkpoint_minutes)
    loss_function = torch.compile(method.loss) if torch_compile else None
    # the loss's step (an int, new every iteration) compiled as a symbol from the start, not first as
    # the constant 1 and again at step 2, where this torch can be told so
    step_as_symbol = (
        torch.compiler.config.patch(dynamic_sources=STEP_SOURCE)
        if torch_compile and step_as_symbol_supported()
        else contextlib.nullcontext()
    )
    tic = time.perf_counter()
    progress = Progress("training", iterations, log, start)

    def state(step: int) -> dict:
        return {
            "method": method.state_dict(),
            "optimizer": optimizer.state_dict(),
            "generators": draws.get_state(generators),
            "sampler": sampler.state_dict(),
            "step": step,
            "curve": curve,
            "seconds": seconds + time.perf_counter() - tic,
            "fingerprint": fingerprint,
        }

    # stop signals outermost: a second one while the checkpoint is written (leaving checkpoints) is only recorded
    with stop_signals(enabled=checkpoint is not None) as stop, checkpoints, step_as_symbol, progress:
        for step in range(start, iterations + 1):
            loss = train_iteration(method, optimizer, sampler, x_train, y_train, step, generators, loss_function)
            if step % eval_every == 0 or step == iterations:
                seconds += _elapsed(tic, x_train.device)
                metrics = {key: value.tolist() for key, value in evaluate().items()}
                curve.append({"iteration": step, "objective": loss.detach().tolist(), "seconds": seconds, **metrics})
                progress.step(
                    step, format_values({key: value for key, value in curve[-1].items() if key != "iteration"})
                )
                tic = time.perf_counter()
            else:
                progress.step(step)  # the host's clock alone: no device read
            if stop and step < iterations:  # a signal (gpstudy.training.stopping): save this step's state, then exit
                checkpoints.write(state(step))
                checkpoints.wait()
                raise checkpointed(step, stop, log)
            if checkpoints.due(step) and step < iterations:
                checkpoints.write(state(step))
    log.info(
        "training done: %s",
        format_values(
            {"objective": curve[-1]["objective"], **readable_hyperparameters(method.kernel, method.likelihood)}
        ),
    )
    return curve, seconds


def _elapsed(tic: float, device: torch.device) -> float:
    """Seconds since ``tic``, after the device finished its queued work."""
    synchronize(device)
    return time.perf_counter() - tic
