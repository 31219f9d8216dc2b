"""Stopping a job cleanly on a signal: SLURM's warning ahead of a time limit, a preemption, ``scancel``, ``kill``.

SLURM sends SIGTERM to a job at its time limit, on ``scancel`` and on a preemption, then SIGKILL
``KillWait`` seconds later; ``profiles/slurm`` asks for SIGTERM ahead of the limit too (``--signal``), and
a workstation's shutdown or ``kill <pid>`` sends SIGTERM; SIGUSR1 is what other setups send as the warning.
While a training or pretraining loop runs, :func:`stop_signals` turns either signal into a request the loop
reads once per step (a Python attribute: no work in the handler, no device read); the loop then finishes its
step, writes its checkpoint synchronously and raises :class:`Stopped`, which ends the process with
:data:`RERUN_STATUS`.
"""

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
RERUN_STATUS = 75  # EX_TEMPFAIL of sysexits.h, "temporary failure, retry": checkpointed, rerun to resume


class StopRequest:
    """The first stop signal received while :func:`stop_signals` is active, or None."""

    def __init__(self) -> None:
        self.signal: signal.Signals | None = None

    def __bool__(self) -> bool:
        return self.signal is not None

    @property
    def name(self) -> str:
        return self.signal.name if self.signal is not None else ""

    def record(self, number: int, frame: object) -> None:  # the handler: records, nothing else
        if self.signal is None:
            self.signal = signal.Signals(number)


class Stopped(SystemExit):
    """Training stopped on a signal after saving its state: the process exits with :data:`RERUN_STATUS`
    (no traceback), and its rerun resumes. A ``SystemExit``, so no ``except Exception`` on the way holds it."""

    def __init__(self, message: str) -> None:
        super().__init__(RERUN_STATUS)
        self.message = message

    def __str__(self) -> str:
        return self.message


@contextlib.contextmanager
def stop_signals(enabled: bool = True) -> Iterator[StopRequest]:
    """Record SIGTERM and SIGUSR1 (:data:`STOP_SIGNALS`) in the yielded :class:`StopRequest` instead of
    dying, until the block ends; then restore the handlers there were (a notebook's keep theirs; SIGINT,
    Ctrl-C, is never touched). A second signal is recorded no more: it cannot cut a checkpoint write short.
    Off (the request stays empty, nothing installed) when not ``enabled`` or outside the main thread,
    where Python cannot install handlers."""
    request = StopRequest()
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield request
        return
    previous = {number: signal.signal(number, request.record) for number in STOP_SIGNALS}
    try:
        yield request
    finally:
        for number, handler in previous.items():
            signal.signal(number, signal.SIG_DFL if handler is None else handler)  # None: set outside Python


def checkpointed(step: int, request: StopRequest, log: logging.Logger) -> Stopped:
    """The :class:`Stopped` to raise once the state after ``step`` is saved, its line logged: "checkpointed at
    iteration k on SIGTERM; exit status 75: rerun to resume" (the words tests/cluster reads)."""
    message = f"checkpointed at iteration {step} on {request.name}"
    log.info("%s; exit status %d: rerun to resume", message, RERUN_STATUS)
    return Stopped(message)
