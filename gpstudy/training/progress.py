"""Progress a person can read: "iteration k of T (p%), it/s, elapsed, ETA" in the log every
:data:`LOG_SECONDS` of wall clock and at each evaluation, and a tqdm bar where a person watches.

Only the host's clock is read, never a device tensor: a progress line adds no host synchronisation to a
training step (docs/gpus.md). The host runs at most a step ahead of the device (the step's one deliberate
synchronisation, ``gpstudy.training.optim.optimizer_step``), so the rate is the device's within a step.
"""

import contextlib
import logging
import sys
import time
from collections.abc import Iterator

from gpstudy.runtime.job import duration, planned_package

LOG_SECONDS = 30.0  # wall-clock seconds between a loop's progress lines (besides its evaluations)
clock = time.monotonic  # the host clock progress reads (a test replaces it)
_bars_shown = [False]  # inside ``bars(True)``: each loop shows a tqdm bar on stderr


@contextlib.contextmanager
def bars(shown: bool) -> Iterator[None]:
    """Within: each :class:`Progress` shows a tqdm bar (and the log's lines on the console above it) if
    ``shown``; outside, none does (a batch job's default)."""
    before = _bars_shown[0]
    _bars_shown[0] = shown
    try:
        yield
    finally:
        _bars_shown[0] = before


def watched() -> bool:
    """Whether a person watches this process: its stderr is a terminal, or it is a Jupyter kernel; never in a
    Snakemake job (whose stderr is its log file)."""
    if planned_package() is not None:
        return False
    return sys.stderr.isatty() or "ipykernel" in sys.modules


def format_values(values: dict) -> str:
    """``key value`` pairs; a batch's (or a vector's) values as ``[a, b, ...]``, nested as they are."""

    def number(value: float | list) -> str:
        return "[" + ", ".join(map(number, value)) + "]" if isinstance(value, list) else f"{value:.4g}"

    return ", ".join(f"{key} {number(value)}" for key, value in values.items())


class Progress:
    """The progress of iterations ``start..total`` of a loop, logged to ``log`` as "``what``: iteration k of T
    (p%), r it/s, elapsed h:mm:ss, ETA h:mm:ss": when :data:`LOG_SECONDS` have passed since the last line,
    and at every iteration given details (an evaluation). A context manager: leaving closes the bar."""

    def __init__(self, what: str, total: int, log: logging.Logger, start: int = 1):
        self.what, self.total, self.log, self.start = what, total, log, start
        self.began = self.last = clock()
        self.since = (start - 1, self.began)  # (iteration, time) the rate counts from: the first's end, once done
        self.bar, self.console = None, contextlib.nullcontext()
        if _bars_shown[0]:
            from tqdm.auto import tqdm
            from tqdm.contrib.logging import logging_redirect_tqdm

            self.bar = tqdm(total=total, initial=start - 1, desc=what, unit="it", dynamic_ncols=True)
            # the log's console lines printed above the bar, not through it, by the loggers that print them
            self.console = logging_redirect_tqdm(
                [logger for logger in (logging.root, logging.getLogger("gpstudy")) if logger.handlers]
            )

    def __enter__(self) -> "Progress":
        self.console.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.console.__exit__(*exc)
        if self.bar is not None:
            self.bar.close()

    def step(self, k: int, details: str | None = None) -> None:
        """Iteration ``k`` is done: move the bar; log a line, ending in ``details`` when given, if there are
        details or :data:`LOG_SECONDS` have passed since the last line."""
        if self.bar is not None:
            self.bar.update(k - self.bar.n)
        now = clock()
        if k == self.start:  # the first iteration compiles and warms up: the rate counts the iterations after it
            self.since = (k, now)
        if details is not None or now - self.last >= LOG_SECONDS:
            self.last = now
            self.log.info("%s: %s%s", self.what, self.line(k, now), "" if details is None else f": {details}")

    def line(self, k: int, now: float) -> str:
        """ "iteration k of T (p%), r it/s, elapsed h:mm:ss, ETA h:mm:ss" at the clock's ``now``: the rate of this
        session's iterations (a resumed run's since resuming) after its first, whose compilation and warm-up
        would make an ETA of days; at the first, its time instead."""
        elapsed, (counted, since) = now - self.began, self.since
        where = f"iteration {k} of {self.total} ({100 * k / self.total:.0f}%)"
        if k <= counted:
            return (
                f"{where}, elapsed {duration(elapsed)} (the first iteration: compilation, warm-up), "
                "ETA at the next line"
            )
        rate = (k - counted) / max(now - since, 1e-9)
        shown = f"{rate:,.1f}" if rate >= 1 else f"{rate:.3g}"
        return f"{where}, {shown} it/s, elapsed {duration(elapsed)}, ETA {duration((self.total - k) / rate)}"
