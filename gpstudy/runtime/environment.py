"""What a run's numbers were made with besides its settings and data: the code (gpstudy's version, and the
git commit of the checkout it ran from), the libraries (and the lock file they match), and the device. Every
``metrics.json`` records it (``gpstudy.training.run``), and ``results/runs.csv`` carries it
(``gpstudy.report.results``); none of it is part of what a run or a job is, so a new library or commit never makes
a finished run look stale."""

import contextlib
import functools
import hashlib
import importlib.metadata
import platform
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import gpstudy
from gpstudy.io import PACKAGE
from gpstudy.runtime.flags import tf32_in_effect

# the fields run_environment records beside device, in the order of results/runs.csv's columns
RECORDED = (
    "device_name",
    "cpu_capability",
    "threads",
    "tf32",
    "gpstudy_version",
    "git_commit",
    "git_dirty",
    "torch_version",
    "numpy_version",
    "pandas_version",
    "lock",
)
BOOLEAN_RECORDED = ("tf32", "git_dirty")  # the RECORDED fields that are true or false (or empty), not text
# torch's CPU threads of a pipeline's training job (rules/train.smk), and of gpstudy.notebook.fit and `gpstudy train`
# unless told, so that a fit rounds as the job does; on a shared 2-core machine two threads were up to 9x slower, one
# at most 1.6x (docs/python.md's measurement)
DEFAULT_THREADS = 1
LOCKS = "locks"  # the folder of lock files at a checkout's top (locks/make.sh writes them; docs/installation.md)
UNLOCKED = "unlocked"  # what a run records when the installed libraries match none of them
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.M)  # a lock's "name==version" lines
GIT_SECONDS = 30  # longer for git status (a huge checkout, a hung file system): the commit is recorded as unknown


def run_environment(device: torch.device) -> dict:
    """What a run on ``device`` records of its code, libraries and machine: ``device`` (as named) and its
    ``device_name`` (the GPU's, or the CPU model), torch's ``cpu_capability`` (the vector instructions
    its CPU kernels use: DEFAULT, AVX2, AVX512, ...; they change the rounding of rounding-sensitive runs),
    its intra-op ``threads`` (how CPU reductions are split: rounding too), ``tf32``, whether its float32
    products and convolutions may round to TF32 (``training.tf32`` on a GPU that has TF32:
    :func:`gpstudy.runtime.flags.tf32_in_effect`; false on a CPU), ``gpstudy_version``, the checkout's
    ``git_commit`` and ``git_dirty`` (:func:`checkout_state`; null outside a checkout), and the torch,
    numpy and pandas versions, and the ``lock`` file the installed libraries match (:func:`lock_in_use`)."""
    commit, dirty = package_checkout_state()
    return {
        "device": str(device),
        "device_name": device_name(device),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "tf32": tf32_in_effect(device),
        "gpstudy_version": gpstudy.__version__,
        "git_commit": commit,
        "git_dirty": dirty,
        "torch_version": str(torch.__version__),
        "numpy_version": np.__version__,
        "pandas_version": pd.__version__,
        "lock": package_lock(),
    }


@contextlib.contextmanager
def torch_threads(threads: int) -> Iterator[int]:
    """Within: torch's intra-op CPU threads set to ``threads`` (yielded); the caller's count restored after."""
    if threads < 1:
        raise ValueError(f"threads = {threads}; give 1 or more torch CPU threads")
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield threads
    finally:
        torch.set_num_threads(before)


def device_name(device: torch.device) -> str | None:
    """The model of ``device``: the GPU's name on CUDA, the CPU's (/proc/cpuinfo's first ``model name``,
    else ``platform.processor()``) on the CPU; None where neither says."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "cpu":
        return cpu_model()
    return None


@functools.cache
def cpu_model() -> str | None:
    """The CPU's model name, as /proc/cpuinfo (Linux) or ``platform.processor()`` says; None if neither."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or None


@functools.cache
def package_checkout_state() -> tuple[str | None, bool | None]:
    """:func:`checkout_state` of the gpstudy package this process imported, asked of git once per process."""
    return checkout_state(PACKAGE)


@functools.cache
def package_lock() -> str | None:
    """:func:`lock_in_use` of the locks beside the gpstudy package this process imported, read once per process."""
    return lock_in_use(PACKAGE.parent / LOCKS)


def lock_in_use(folder: Path) -> str | None:
    """The first lock file of ``folder`` (``*.lock``, by name: pip requirements pinned ``name==version``) whose
    every pin is the installed distribution's version, as ``"<name> sha256:<the file's sha256>"``; ``UNLOCKED``
    when none is; None when ``folder`` has no lock file (an installed copy of gpstudy, outside a checkout).
    Libraries installed beside the pinned ones (a test tool) do not matter."""
    locks = sorted(folder.glob("*.lock"))
    for lock in locks:
        text = lock.read_text()
        if all(_installed(name) == version for name, version in PIN.findall(text)):
            return f"{lock.name} sha256:{hashlib.sha256(text.encode()).hexdigest()}"
    return UNLOCKED if locks else None


def _installed(name: str) -> str | None:
    """The installed version of distribution ``name``; None if it is not installed."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def checkout_state(package: Path) -> tuple[str | None, bool | None]:
    """The commit checked out where the gpstudy package folder ``package`` sits at the top of a git work
    tree, and whether that tree's tracked files have local changes (staged or not: ``git describe
    --dirty``'s sense); (None, None) when ``package`` is not at a work tree's top (an installed copy, even
    inside a checkout's venv), the tree has no commit, or git is missing or fails."""
    top = package.parent
    if not (top / ".git").exists():  # a folder in a clone, a file in a worktree of one
        return None, None
    try:  # --no-optional-locks: concurrent jobs never contend for the index's lock
        status = subprocess.run(
            [
                "git",
                "--no-optional-locks",
                "-C",
                str(top),
                "status",
                "--porcelain=v2",
                "--branch",
                "--untracked-files=no",
            ],
            capture_output=True,
            text=True,
            timeout=GIT_SECONDS,
        )
    except (OSError, subprocess.SubprocessError):
        return None, None
    lines = status.stdout.splitlines()
    commit = next((line.split()[2] for line in lines if line.startswith("# branch.oid ")), None)
    if status.returncode != 0 or commit in (None, "(initial)"):
        return None, None
    return commit, any(not line.startswith("#") for line in lines)
