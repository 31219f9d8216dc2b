"""Host synchronisations, seen on any device: the operations that stall a GPU until the host catches up.

On CUDA the host queues kernels and runs ahead; an operation whose result the host must see (a tensor
read as a Python number, a comparison answered on the host, an output whose size depends on the
data, a tensor built from Python or numpy data and copied to the device) makes it wait for every
kernel queued before it. :class:`HostSyncCounter` counts these operations as they are dispatched, on
the CPU too, and names the file and line of each, so that a test on a machine without a GPU catches
the next one added. Host reads that do not dispatch an operator on the CPU (``.tolist()``,
``.numpy()``, ``.cpu()``) are caught by running on the ``meta`` device, which refuses them.

The one deliberate synchronisation of a training step (``gaussian.deferred_factor_checks``) runs
inside :func:`deliberate`: counted apart, and allowed by CUDA's own sync debug mode.
"""

import traceback
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
PACKAGE = Path(__file__).resolve().parent
SYNC_OPERATORS = {  # operator -> what makes the host wait
    aten._local_scalar_dense.default: "host read (.item(), float(t), bool(t), if t)",
    aten.equal.default: "torch.equal (answered on the host)",
    aten.is_nonzero.default: "host read (bool(t))",
    aten.lift_fresh.default: "tensor from Python or numpy data (a copy to the device)",
    aten.nonzero.default: "nonzero (data-dependent size)",
    aten.masked_select.default: "masked_select (data-dependent size)",
    aten.unique_dim.default: "unique (data-dependent size)",
    aten._unique2.default: "unique (data-dependent size)",
    aten.repeat_interleave.Tensor: "repeat_interleave (data-dependent size)",
}
_deliberate = [False]  # inside ``deliberate()``: the step's one allowed synchronisation


@dataclass(frozen=True)
class SyncEvent:
    """One synchronising operation: what it was, why it waits, where in the code, and whether deliberate."""

    operator: str
    reason: str
    where: str  # file:line of the innermost frame in gpstudy (or the caller outside it)
    deliberate: bool


def _is_boolean_index(func, args) -> bool:
    """``t[mask]`` / ``t[mask] = v``: an index by a boolean tensor (its size depends on the data)."""
    if func not in (aten.index.Tensor, aten.index_put.default, aten.index_put_.default):
        return False
    return any(index is not None and index.dtype == torch.bool for index in args[1])


def in_package(frame: traceback.FrameSummary) -> bool:
    """Whether a traceback frame is in the gpstudy package's code."""
    return PACKAGE in Path(frame.filename).resolve().parents


def place(frame: traceback.FrameSummary) -> str:
    """A frame's file:line."""
    return f"{Path(frame.filename).name}:{frame.lineno}"


def _where() -> str:
    """file:line of the innermost frame of the gpstudy package outside this module, else of the caller."""
    frames = [frame for frame in traceback.extract_stack()[:-3] if "torch" not in Path(frame.filename).parts]
    ours = [frame for frame in frames if in_package(frame) and Path(frame.filename).name != "host_sync.py"]
    return place((ours or frames or traceback.extract_stack()[-4:-3])[-1])


class HostSyncCounter(TorchDispatchMode):
    """Records every synchronising operation dispatched inside its ``with`` block (``events``)."""

    def __init__(self):
        super().__init__()
        self.events: list[SyncEvent] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        reason = SYNC_OPERATORS.get(func)
        if reason is None and _is_boolean_index(func, args):
            reason = "boolean-mask index (data-dependent size)"
        if reason is not None:
            self.events.append(SyncEvent(str(func), reason, _where(), _deliberate[0]))
        return func(*args, **(kwargs or {}))

    def unexpected(self) -> list[SyncEvent]:
        """The events outside :func:`deliberate`."""
        return [event for event in self.events if not event.deliberate]

    def summary(self) -> str:
        """One line per (place, operator) with its count, deliberate ones marked."""
        counts = Counter((event.where, event.operator, event.reason, event.deliberate) for event in self.events)
        return "\n".join(f"{count:4d} x {where} {operator}: {reason}{' (deliberate)' if deliberate else ''}"
                         for (where, operator, reason, deliberate), count in counts.most_common())


@contextmanager
def deliberate() -> Iterator[None]:
    """Mark the synchronisation inside as the step's deliberate one: counted apart, and let through by
    ``torch.cuda.set_sync_debug_mode`` (which ``benchmarks/gpu_check.py`` sets to "error")."""
    mode = torch.cuda.get_sync_debug_mode() if torch.cuda.is_initialized() else None
    if mode:
        torch.cuda.set_sync_debug_mode(0)
    _deliberate[0] = True
    try:
        yield
    finally:
        _deliberate[0] = False
        if mode:
            torch.cuda.set_sync_debug_mode(mode)
