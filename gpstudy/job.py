"""What every Snakemake job's process sets up first: its log, and dying with the Snakemake that started it."""

import ctypes
import logging
import os
import signal
import sys
from pathlib import Path

PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process receives when its parent dies (Linux)


def start_job(log: str | os.PathLike) -> None:
    """Log to ``log`` and end this process when its parent (Snakemake, or the shell it runs the
    script in) dies, even by ``kill -9``: a job never trains on as an orphan. The checkpoint and the
    atomic outputs make the rerun pick up where the job stopped."""
    log_to(log)
    die_with_parent()


def log_to(path: str | os.PathLike) -> None:
    """Send logging records and stderr (warnings, tracebacks) of this process to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    stream = open(path, "a", buffering=1)  # line-buffered; lives as long as the process
    sys.stderr = stream
    logging.basicConfig(stream=stream, level=logging.INFO, force=True,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def die_with_parent() -> None:
    """Ask the kernel to send this process SIGTERM when its parent dies (Linux; elsewhere nothing)."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)
