"""One optimizer step with at most one host synchronisation: what every training loop runs per iteration."""

from collections.abc import Callable, Iterable

import torch
from torch import Tensor, nn

from gpstudy import generators as draws
from gpstudy.linalg import deferred_factor_checks


def adam(parameters: Iterable[nn.Parameter], lr: float, device: torch.device) -> torch.optim.Adam:
    """Adam as every loop uses it: fused (one pass over each tensor per step) on the CPU and CUDA, which
    keeps its step counts on the parameters' device, so that no step reads a count on the host; the plain
    per-tensor loop elsewhere (the ``meta`` device). A step's operators are the same from one step to the next
    (``tests/training/test_step_sequence.py``); capturing it as a CUDA graph would also need ``capturable=True``,
    which fused Adam accepts (torch refuses to capture an optimizer without it) but which warns on an
    uncaptured step: left off while the loop runs eagerly."""
    if device.type in ("cpu", "cuda"):
        return torch.optim.Adam(parameters, lr=lr, fused=True)
    return torch.optim.Adam(parameters, lr=lr, foreach=False)


def optimizer_step(
    optimizer: torch.optim.Optimizer,
    objective: Callable[[], Tensor],
    generators: draws.Generators,
    natural_update: Callable[[], Callable[[], None] | None] = lambda: None,
) -> Tensor:
    """Minimize ``objective()`` (summed over a batch of splits) by one step of ``optimizer``; return it.
    ``natural_update`` (``Method.natural_update``) computes an update of its own from the gradient, and
    the function it returns applies it after the optimizer's step.

    The objective and its gradient run with their Cholesky checks deferred
    (``linalg.deferred_factor_checks``): nothing is read on the host until the gradient is queued, then
    one read says whether any factor failed. If one did, the step is run again from the same random
    draws (the generators are rewound) with every factor checked at once, so that a failed matrix gets
    its jitter (or its split's NaN) exactly as without deferral, and only then is the optimizer stepped;
    so too where an operator refused a failed factor (``torch.linalg.LinAlgError``: ``cholesky_inverse``
    on a CPU). In a batch of splits, failures of splits already lost (a trained parameter non-finite:
    nothing can save them) cost a second read instead of the rerun, unless every split is lost.
    """

    def gradient() -> tuple[Tensor, Callable[[], None] | None]:
        loss = objective()
        optimizer.zero_grad(set_to_none=True)
        loss.sum().backward()
        return loss, natural_update()

    rewind = draws.get_state(generators)
    with deferred_factor_checks() as checks:
        try:
            loss, update = gradient()
            refused = False
        except torch.linalg.LinAlgError:  # an operator refused a failed factor before the check
            refused = True
    rerun = refused or checks.any_failed()  # the step's one host synchronisation
    if rerun and not refused and (lost := _lost_splits(optimizer, generators)) is not None:
        rerun = checks.any_failed(lost)  # a second, where the failures may all be of splits already lost
    if rerun:
        draws.set_state(generators, rewind)
        loss, update = gradient()
    optimizer.step()
    if update is not None:
        update()
    return loss


def _lost_splits(optimizer: torch.optim.Optimizer, generators: draws.Generators) -> Tensor | None:
    """Which splits of a batch ``[S]`` are lost: a parameter the optimizer trains is non-finite in them (its
    leading split dimension); None for one split. Asked only after a factor failed."""
    shape = draws.batch_shape(generators)
    if not shape:
        return None
    flags = [
        ~torch.isfinite(parameter.detach()).reshape(shape[0], -1).all(-1)
        for group in optimizer.param_groups
        for parameter in group["params"]
        if parameter.shape[:1] == shape
    ]
    return torch.stack(flags).any(0) if flags else None
