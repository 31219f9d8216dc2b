"""Which device a training job runs on: "auto" resolved once, and one GPU slot per job.

Snakemake's ``gpu`` resource bounds how many training jobs run at once; :func:`gpu_slot` picks
*which* GPU a job uses. The jobs are separate processes, so they agree through lock files: one
file per (GPU, slot), held with an exclusive ``flock`` for as long as the job runs.
"""

import fcntl
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

log = logging.getLogger(__name__)

GPU_LOCK_DIR = Path(tempfile.gettempdir()) / f"gpstudy-gpu-slots-{os.getuid()}"  # this machine's slot files


def resolve_device(name: str) -> torch.device:
    """The device ``name`` means: "auto" is cuda when a GPU is visible, else cpu."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _take_slot(lock_dir: Path, slots: list[tuple[int, int]]) -> tuple[int, int] | None:
    """The first free slot as (GPU, open descriptor holding its lock), or None if all are held."""
    for k, j in slots:
        fd = os.open(lock_dir / f"cuda{k}.slot{j}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return k, fd
    return None


@contextmanager
def gpu_slot(
    device: torch.device,
    lock_dir: str | os.PathLike,
    jobs_per_gpu: int = 1,
    num_gpus: int | None = None,
    poll_seconds: float = 1.0,
) -> Iterator[torch.device]:
    """Hold a free GPU slot for the duration of the block; yields the GPU to use.

    A cpu device, or a pinned GPU such as ``cuda:2``, is yielded unchanged and takes no lock. A
    plain ``cuda`` takes the first free slot file ``lock_dir/cuda{k}.slot{j}.lock``, trying every
    GPU's first slot before any GPU's second, so that jobs spread over the GPUs first. If every
    slot is held, the job waits (polling every ``poll_seconds``) until one is free.

    The lock is a ``flock`` on an open file, which the kernel drops when its process ends, even by
    ``kill -9``: a lock file left on disk never blocks a slot; only a live holder does.

    Args:
        device: The device the settings ask for (after :func:`resolve_device`).
        lock_dir: Folder of the slot files, shared by all jobs of a workstation; created if missing.
        jobs_per_gpu: How many jobs may share one GPU (at least 1).
        num_gpus: How many GPUs there are; default ``torch.cuda.device_count()``.
        poll_seconds: Seconds between tries while every slot is held.

    Raises:
        ValueError: ``jobs_per_gpu`` is below 1.
        RuntimeError: CUDA was asked for, but no GPU is visible.
    """
    if jobs_per_gpu < 1:
        raise ValueError(f"jobs_per_gpu must be at least 1, not {jobs_per_gpu}")
    if device.type != "cuda" or device.index is not None:
        yield device
        return
    if num_gpus is None:
        num_gpus = torch.cuda.device_count()
    if num_gpus < 1:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")
        raise RuntimeError(f"CUDA was asked for but no GPU is visible (CUDA_VISIBLE_DEVICES={visible})")
    lock_dir = Path(lock_dir)
    lock_dir.mkdir(parents=True, exist_ok=True)
    slots = [(k, j) for j in range(jobs_per_gpu) for k in range(num_gpus)]
    taken = _take_slot(lock_dir, slots)
    if taken is None:
        log.info("every GPU slot in %s is held; waiting for a free one", lock_dir)
    while taken is None:
        time.sleep(poll_seconds)
        taken = _take_slot(lock_dir, slots)
    k, fd = taken
    try:
        yield torch.device(f"cuda:{k}")
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
