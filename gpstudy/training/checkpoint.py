"""Checkpoints of the training loop (when one is due, a host copy of the state written by a background
thread while training goes on) and of pretraining (:func:`save`, when a signal stops it), the partial
writes a kill left removed, and the state read back on resume under the fingerprint of its run."""

import logging
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from gpstudy.io import atomic_path, partial_writes

log = logging.getLogger(__name__)


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be read or written: a fault of the machine, not of the method (the job fails)."""


class Checkpointer:
    """Writes the training state to ``path`` when due, without stopping training.

    Due (:meth:`due`) when ``every`` iterations divide the step, or when ``minutes`` of wall clock have
    passed since the last checkpoint (or since this session began); None turns either off. The clock is
    the host's: deciding needs no device synchronisation. Tests use ``every`` for checkpoints at known
    steps; long jobs use ``minutes``, so a checkpoint costs the same share of any job, fast or slow.

    :meth:`write` copies the state to host memory (:func:`host_copy`; that memory, the state's size,
    is kept for the next copy) and hands the copy to one background thread, which writes it with
    ``torch.save`` to a temporary file and renames it onto ``path``: a kill during a write leaves the
    previous checkpoint whole, and the partial temporary file it leaves (hidden beside ``path``, as large
    as the checkpoint) is removed when the next session of the run starts (:func:`remove_partial_writes`).
    At most one write is in flight: a write due while the previous one
    runs waits for it (skipping would make the checkpoint steps depend on disk speed; waiting only
    happens when writes take longer than the interval, which the interval is chosen to avoid). A
    write that failed raises :class:`CheckpointError`, naming ``path``, at the next :meth:`write` or
    at :meth:`close`, so a full disk fails the job.

    Used as a context manager: leaving waits for the write in flight, so no checkpoint lands after its
    caller removed it; the write's error is raised then, or logged when another error is leaving.
    """

    def __init__(
        self,
        path: Path | None,
        device: torch.device,
        every: int | None,
        minutes: float | None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.path, self.device, self.every, self.minutes, self.clock = path, device, every, minutes, clock
        if path is not None:
            remove_partial_writes(path)
        self.last = clock()
        self.writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint")
        self.pending: Future | None = None
        self.snapshot: Any = None  # the last copy written: its memory serves the next copy

    def due(self, step: int) -> bool:
        """Whether a checkpoint is due after iteration ``step``."""
        if self.path is None:
            return False
        by_count = self.every is not None and step % self.every == 0
        return by_count or (self.minutes is not None and self.clock() - self.last >= 60 * self.minutes)

    def write(self, state: dict[str, Any]) -> None:
        """Start writing a copy of ``state`` (tensors, numbers, strings in dicts and lists); returns once
        the copy is taken (on a GPU, once the copies are queued)."""
        self.wait()
        self.snapshot, ready = host_copy(state, self.device, self.snapshot)
        self.pending = self.writer.submit(save, self.path, self.snapshot, ready)
        self.last = self.clock()

    def wait(self) -> None:
        """Wait for the write in flight; raise its error."""
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        """Wait for the write in flight (raising its error) and stop the writer thread."""
        try:
            self.wait()
        finally:
            self.writer.shutdown()

    def __enter__(self) -> "Checkpointer":
        return self

    def __exit__(self, kind, error, trace) -> None:
        try:
            self.close()
        except CheckpointError as failed:
            if kind is None:
                raise
            log.error("%s", failed)  # the error already leaving is the one to report


def remove_partial_writes(path: Path) -> None:
    """Remove the temporary files of writes to ``path`` that a kill cut short (:func:`gpstudy.io.partial_writes`);
    only a run that owns ``path``, before its first write."""
    for partial in partial_writes(path):
        log.info("removed %s, a checkpoint write cut short", partial)
        partial.unlink(missing_ok=True)


def host_copy(state: Any, device: torch.device, into: Any = None) -> tuple[Any, torch.cuda.Event | None]:
    """A copy of ``state`` whose tensors live in host memory, and the event after which they are filled.

    Training updates parameters and Adam's moments in place, so the copy must not share their memory.
    Each tensor is copied into the tensor at the same place in ``into`` (an earlier copy no longer being
    written) when it has the same shape and dtype, else into new host memory: fresh memory costs a page
    fault per page (docs/speed.md#what-a-run-costs-beside-the-steps). On ``device`` cuda the host memory is
    pinned and the copies do not block; the returned event, recorded after them on the device's
    current stream, is what the writer thread waits for, so the training thread never does. Later
    steps run on that stream after the copies, so they cannot change what is copied.
    """
    copy = _copy(state, into)
    if device.type != "cuda":
        return copy, None
    ready = torch.cuda.Event()
    ready.record(torch.cuda.current_stream(device))
    return copy, ready


def _copy(value: Any, into: Any) -> Any:
    if isinstance(value, torch.Tensor):
        value = value.detach()
        reusable = isinstance(into, torch.Tensor) and into.shape == value.shape and into.dtype == value.dtype
        host = into if reusable else torch.empty(value.shape, dtype=value.dtype, pin_memory=value.is_cuda)
        return host.copy_(value, non_blocking=value.is_cuda)
    if isinstance(value, dict):
        into = into if isinstance(into, dict) else {}
        return {key: _copy(item, into.get(key)) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        into = list(into) if isinstance(into, (list, tuple)) else []
        return type(value)(_copy(item, into[i] if i < len(into) else None) for i, item in enumerate(value))
    return value  # numbers, strings, None: immutable


def save(path: Path, state: dict, ready: torch.cuda.Event | None = None) -> None:
    """Write ``state`` to ``path`` atomically, once ``ready`` (the host copies' event) has passed.

    ``torch.save`` writes through a Python file: given a file name, its own writer reports a full disk
    only as "unexpected pos" or "iostream error", while the file's ``OSError`` (errno ENOSPC) is what
    :func:`gpstudy.io.atomic_path` recognises.

    Raises:
        CheckpointError: the write failed (disk full: "No space left on device", no permission); the
            message names ``path``.
    """
    if ready is not None:
        ready.synchronize()
    try:
        with atomic_path(path) as tmp, open(tmp, "wb") as file:
            torch.save(state, file)
    except Exception as error:
        raise CheckpointError(f"checkpoint {path} cannot be written ({type(error).__name__}: {error})") from error


def load(path: Path, fingerprint: str, device: torch.device) -> dict | None:
    """The state saved at ``path`` under ``fingerprint``; None if there is none or it belongs to another run
    (then it is deleted, and a warning says so in the log and on the console).

    Loaded with ``weights_only=True``: a checkpoint holds tensors, numbers and strings, never code.
    """
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except Exception as error:  # torch raises pickle, zip and runtime errors alike
        raise CheckpointError(
            f"checkpoint {path} cannot be read ({type(error).__name__}: {error}); delete it and rerun to start afresh"
        ) from error
    if state.get("fingerprint") != fingerprint:
        message = f"checkpoint {path} belongs to other settings, splits, start or code: discarded, starting afresh"
        log.warning("%s", message)
        if sys.stderr is not sys.__stderr__:  # a job's stderr and log go to its log file (gpstudy.runtime.job.log_to)
            print(f"WARNING: {message}", file=sys.__stderr__, flush=True)  # the console, which Snakemake shows
        path.unlink()
        return None
    return state
