"""What every Snakemake job's process sets up first: the same code as the plan's, its log, and dying with the
Snakemake that started it; and how a job and its time are named in logs and on the study's console."""

import atexit
import ctypes
import logging
import os
import signal
import sys
import time
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from gpstudy.io import PACKAGE, source_digest

PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process receives when its parent dies (Linux)
logger = logging.getLogger(__name__)


class CodeCopyError(RuntimeError):
    """A process imported another gpstudy than the one that planned the study, and its code differs."""


def start_job(log: str | os.PathLike) -> None:
    """Refuse to start (exit with a one-line message) when this job imported another copy of gpstudy
    than the one that planned it (:func:`check_same_code`); log to ``log``; end this process when its
    parent (Snakemake, or the shell it runs the script in) dies, even by ``kill -9``: a job never trains
    on as an orphan (a training job checkpoints first). The checkpoint and the atomic outputs make the rerun
    pick up where the job stopped. The log names the job first and, when it ends, what it wrote
    (:func:`log_job`): no job's log is empty."""
    if (planned := planned_package()) is not None:
        try:
            check_same_code(planned)
        except CodeCopyError as error:
            sys.exit(f"{type(error).__name__}: {error}")  # stderr, not the log: Snakemake's console shows it
    log_to(log)
    if (job := snakemake_job()) is not None:
        log_job(job)
    die_with_parent()


def snakemake_job() -> Any:
    """The ``snakemake`` object of this Snakemake script job (rule, wildcards, outputs), or None."""
    return getattr(sys.modules["__main__"], "snakemake", None)


def job_name(rule: str, wildcards: Mapping[str, Any]) -> str:
    """``rule (name=value, ...)``, or the rule alone without wildcards."""
    named = ", ".join(f"{name}={value}" for name, value in wildcards.items())
    return rule + (f" ({named})" if named else "")


def duration(seconds: float) -> str:
    """``h:mm:ss`` (days first when there are any)."""
    return str(timedelta(seconds=round(seconds)))


def log_job(job: Any) -> None:
    """Log the job's rule and wildcards now, and at exit how long it ran and which outputs it wrote."""
    name = "rule " + job_name(job.rule, job.wildcards)
    logger.info("%s started, pid %d", name, os.getpid())
    started = time.monotonic()

    def log_end() -> None:
        written = [path for path in job.output if os.path.exists(path)]
        logger.info(
            "%s ended after %.1f s; %d of its %d outputs written%s",
            name,
            time.monotonic() - started,
            len(written),
            len(job.output),
            "".join(f"\n  {path}" for path in written),
        )

    atexit.register(log_end)


def planned_package() -> Path | None:
    """The gpstudy package of the workflow that planned this Snakemake script job: ``gpstudy/`` beside the
    job's ``scripts/`` folder (``snakemake.scriptdir``; Snakemake's planning process imports the package
    beside its Snakefile, ``rules/common.smk`` checks). None in a process that is no Snakemake script job."""
    job = snakemake_job()
    return None if job is None else Path(job.scriptdir).parent / "gpstudy"


def check_same_code(planned: str | os.PathLike, running: Path = PACKAGE) -> None:
    """Check that the gpstudy package ``running`` (default: the one this process imported) is ``planned``,
    or a copy of the same code (``gpstudy.io.source_digest``: a fresh non-editable install of that checkout).

    Raises:
        CodeCopyError: the two differ (say, the checkout was pulled and the installed copy is older); the
            message names both and the two ways out.
    """
    planned, running = Path(planned).resolve(), running.resolve()
    if planned == running or source_digest(planned) == source_digest(running):
        return
    checkout = planned.parent
    raise CodeCopyError(
        f"this process imports gpstudy from {running}, not the workflow's {planned}, and their code "
        f"differs (or the latter is missing): install the checkout editable, `pip install -e "
        f"{checkout}`, so that plan and jobs import one copy, or reinstall it (`pip install "
        f"{checkout}`) after every change"
    )


def log_to(path: str | os.PathLike) -> None:
    """Send logging records and stderr (warnings, tracebacks) of this process to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    stream = open(path, "a", buffering=1)  # line-buffered; lives as long as the process
    sys.stderr = stream
    logging.basicConfig(
        stream=stream, level=logging.INFO, force=True, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def die_with_parent() -> None:
    """Ask the kernel to send this process SIGTERM when its parent dies (Linux; elsewhere nothing). A training
    job then ends its step, writes its checkpoint and exits (:mod:`gpstudy.training.stopping`); any other job dies."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)
