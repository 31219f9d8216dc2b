"""Host synchronisations, seen on any device: the operations that stall a GPU until the host catches up.

On CUDA the host queues kernels and runs ahead; an operation whose result the host must see (a tensor
read as a Python number, a comparison answered on the host, an output whose size depends on the
data, a tensor built from Python or numpy data and copied to the device) makes it wait for every
kernel queued before it. :class:`HostSyncCounter` counts these operations as they are dispatched, on
the CPU too, and names the file and line of each, so that a test on a machine without a GPU catches
the next one added. Host reads that do not dispatch an operator on the CPU (``.tolist()``,
``.numpy()``, ``.cpu()``) are caught by running on the ``meta`` device, which refuses them.

Some operators read on the host inside their own CUDA kernel, where no dispatch mode sees the read, and
return early on ``meta`` (``_linalg_check_errors`` checks nothing there): those are counted by name
(:data:`SYNC_OPERATORS`, and :func:`_conditional_reason` for those that read only with some arguments),
as PyTorch's ATen source (``BatchLinearAlgebra.cpp``, ``SummaryOps.cu``, ``Distributions.cpp``,
``LinearAlgebra.cpp``) has them. Not synchronising on CUDA, and not counted: ``linalg.cholesky_ex``,
``inv_ex``, ``solve_ex`` and ``lu_factor_ex`` without ``check_errors``, ``linalg.solve_triangular``,
``linalg.qr``, ``linalg.det``/``slogdet``, and ``cholesky_solve``/``cholesky_inverse`` (cuSOLVER's
``potrs``, whose ``info`` is never read in a release build).

The one deliberate synchronisation of a training step (``linalg.deferred_factor_checks``) runs
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

from gpstudy.io import PACKAGE

PACKAGE_FOLDER = PACKAGE.resolve()  # frames' files are compared resolved

aten = torch.ops.aten
SYNC_OPERATORS = {  # operator -> what makes the host wait
    aten._local_scalar_dense.default: "host read (.item(), float(t), bool(t), if t)",
    aten.equal.default: "torch.equal (answered on the host)",
    aten.is_nonzero.default: "host read (bool(t))",
    aten.lift_fresh.default: "tensor from Python or numpy data (a copy to the device)",
    aten.nonzero.default: "nonzero (data-dependent size)",
    aten.masked_select.default: "masked_select (data-dependent size)",
    aten.unique_dim.default: "unique (data-dependent size)",
    aten._unique2.default: "unique (data-dependent size)",
    aten._unique.default: "unique (data-dependent size)",
    aten.unique_consecutive.default: "unique_consecutive (data-dependent size)",
    aten.repeat_interleave.Tensor: "repeat_interleave (data-dependent size)",
    aten.bincount.default: "bincount (its size is read from the data's maximum)",
    aten._linalg_check_errors.default: (
        "linalg error check of linalg.cholesky, inv, solve, lu_factor, ldl_factor (info read on the host)"
    ),
    aten.cholesky.default: "torch.cholesky (info read on the host)",
    aten._linalg_eigh.default: "linalg.eigh or eigvalsh (info read on the host)",
    aten.linalg_eig.default: "linalg.eig or eigvals (info read on the host)",
    aten._linalg_svd.default: "linalg.svd, svdvals, pinv or matrix_rank (info read on the host)",
}
_deliberate = [False]  # inside ``deliberate()``: the step's one allowed synchronisation


@dataclass(frozen=True)
class SyncEvent:
    """One synchronising operation: what it was, why it waits, where in the code, and whether deliberate."""

    operator: str
    reason: str
    where: str  # file:line of the innermost frame in gpstudy (or the caller outside it)
    deliberate: bool


def _conditional_reason(func, args, kwargs) -> str | None:
    """Why an operator that synchronises only with some arguments does so with these; None if it does not."""
    if kwargs.get("check_errors"):
        return f"{func.overloadpacket.__name__} with check_errors=True (info read on the host)"
    if func in (aten.index.Tensor, aten.index_put.default, aten.index_put_.default):
        if any(index is not None and index.dtype == torch.bool for index in args[1]):
            return "boolean-mask index (data-dependent size)"
    elif func == aten.histc.default:  # histc(input, bins=100, min=0, max=0): no range, read from the data
        if (args[2] if len(args) > 2 else 0) == (args[3] if len(args) > 3 else 0) and args[0].numel() > 0:
            return "histc without a range (the data's min and max read on the host)"
    elif func == aten.multinomial.default:  # its fast path checks the probabilities on the host
        if not (len(args) > 2 and args[2]) or args[1] == 1:  # multinomial(input, num_samples, replacement=False)
            return "multinomial without replacement or of one draw (probabilities checked on the host)"
    elif func == aten.linalg_matrix_exp.default:  # the norms, to choose the approximation; n = 1 is exp
        if args[0].shape[-1] > 1:
            return "matrix_exp (the matrices' norms read on the host)"
    return None


def in_package(frame: traceback.FrameSummary) -> bool:
    """Whether a traceback frame is in the gpstudy package's code."""
    return PACKAGE_FOLDER in Path(frame.filename).resolve().parents


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
        reason = SYNC_OPERATORS.get(func) or _conditional_reason(func, args, kwargs or {})
        if reason is not None:
            self.events.append(SyncEvent(str(func), reason, _where(), _deliberate[0]))
        return func(*args, **(kwargs or {}))

    def unexpected(self) -> list[SyncEvent]:
        """The events outside :func:`deliberate`."""
        return [event for event in self.events if not event.deliberate]

    def summary(self) -> str:
        """One line per (place, operator) with its count, deliberate ones marked."""
        counts = Counter((event.where, event.operator, event.reason, event.deliberate) for event in self.events)
        return "\n".join(
            f"{count:4d} x {where} {operator}: {reason}{' (deliberate)' if deliberate else ''}"
            for (where, operator, reason, deliberate), count in counts.most_common()
        )


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
