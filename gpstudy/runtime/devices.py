"""Which device a training job runs on: "auto" resolved, and one GPU slot per job, named by UUID.

Snakemake's ``gpu`` resource bounds how many training jobs run at once; :func:`gpu_slot` picks *which*
GPU a job uses. Jobs are separate processes, often of separate runs (two users, two SLURM jobs on one
node) whose ``CUDA_VISIBLE_DEVICES`` differ, so that index 0 means a different GPU in each. The slots
are therefore named by what every process agrees on, the device's UUID:

- ``nvidia-smi -L`` lists the GPUs (:func:`nvidia_smi_gpus`): index (PCI bus order), model, UUID and,
  under a GPU in MIG mode, its MIG instances' UUIDs. It ships with every NVIDIA driver and runs in a
  child process, so this process never starts CUDA to count GPUs: once CUDA's driver has started
  (``torch.cuda.is_available()`` starts it), the process's ``CUDA_VISIBLE_DEVICES`` is read and fixed.
  NVML's Python binding would avoid the child process but is one more dependency; torch's own NVML
  helpers are private and give up on MIG.
- A *device* is a MIG instance, or a whole GPU not in MIG mode (a GPU in MIG mode runs CUDA work only
  in its instances). :func:`visible_devices` keeps those the job's ``CUDA_VISIBLE_DEVICES`` allows:
  indices (positions in nvidia-smi's list; an index of a GPU in MIG mode means its instances), ``GPU-``
  and ``MIG-`` UUIDs or unambiguous prefixes of them; SLURM sets indices or UUIDs. Where CUDA would
  quietly cut the list short (an unknown entry) or empty it (a repeated one), this raises instead.
  CUDA numbers GPUs fastest first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``: on a machine of one model
  that is taken to be nvidia-smi's order (assumed, not checked); with mixed models, indices without
  ``PCI_BUS_ID`` are refused.
- One lock file per (device UUID, slot), held with an exclusive ``flock`` for the job's life; the
  kernel drops it when the process ends, even by ``kill -9``. The folder (the config's
  ``gpu_lock_dir``) is one for all users of the machine (sticky, writable by all, like /tmp), and lock
  files are opened read-only (``flock`` needs no write access), so two users' jobs see each other's
  locks. Its default is in /tmp itself, not in ``$TMPDIR``, which SLURM and some sites set per job or
  per user.
- After taking a slot the job's ``CUDA_VISIBLE_DEVICES`` becomes the device's UUID and the job trains
  on ``cuda:0``. This must happen before CUDA starts in the job; :func:`gpu_slot` refuses when torch
  has initialised CUDA, and :func:`resolve_device` decides "auto" without starting it.
- A pinned device (``cuda:2``) takes no slot and keeps ``CUDA_VISIBLE_DEVICES``: it means what CUDA
  means, the job's third visible device (the SLURM profile's ``cuda:0``: the job's own GPU). It is not
  mapped through :func:`visible_devices`, which would put our reading of the variable in place of
  CUDA's and gain no lock. Pinned jobs and slot-taking jobs on the same GPUs can double-book them.
"""

import fcntl
import functools
import logging
import os
import re
import stat
import subprocess
import time
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import torch

log = logging.getLogger(__name__)


_GPU_LINE = re.compile(r"GPU (\d+): (.+) \(UUID: (GPU-[^)\s]+)\)")
_MIG_LINE = re.compile(r"\s+MIG .+ Device\s+\d+: \(UUID: (MIG-[^)\s]+)\)")


@dataclass(frozen=True)
class Gpu:
    """One GPU as ``nvidia-smi -L`` lists it."""

    index: int  # position in nvidia-smi's list (PCI bus order)
    name: str  # model, e.g. "NVIDIA A100-SXM4-40GB"
    uuid: str  # "GPU-..."
    mig: tuple[str, ...] = ()  # UUIDs of its MIG instances ("MIG-..."); empty when not in MIG mode

    @property
    def devices(self) -> tuple[str, ...]:
        """UUIDs of the CUDA devices it offers: its MIG instances, or itself."""
        return self.mig or (self.uuid,)


def parse_nvidia_smi_list(text: str) -> list[Gpu]:
    """The GPUs in the output of ``nvidia-smi -L`` (MIG instances as lines under their GPU)."""
    gpus: list[Gpu] = []
    for line in filter(str.strip, text.splitlines()):
        if gpu := _GPU_LINE.fullmatch(line.rstrip()):
            if int(gpu[1]) != len(gpus):
                raise ValueError(f"nvidia-smi -L: GPU {gpu[1]} listed as GPU number {len(gpus)}: {line!r}")
            gpus.append(Gpu(int(gpu[1]), gpu[2], gpu[3]))
        elif (mig := _MIG_LINE.fullmatch(line.rstrip())) and gpus:
            gpus[-1] = replace(gpus[-1], mig=(*gpus[-1].mig, mig[1]))
        else:
            raise ValueError(f"nvidia-smi -L: unexpected line {line!r}")
    return gpus


NVIDIA_SMI_TIMEOUT_SECONDS = 60.0  # after this, ``nvidia-smi -L`` is taken to hang (a wedged driver) and killed


@functools.cache
def _run_nvidia_smi() -> tuple[int | None, str] | None:
    """Exit code and output of ``nvidia-smi -L`` (run once per process), the code None if it did not end
    within ``NVIDIA_SMI_TIMEOUT_SECONDS``; None if it is not installed."""
    try:
        done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_SECONDS)
    except FileNotFoundError:
        return None
    except subprocess.TimeoutExpired:
        return None, f"no answer within {NVIDIA_SMI_TIMEOUT_SECONDS:g} s; killed"
    return done.returncode, (done.stdout + done.stderr).strip()


def nvidia_smi_gpus() -> list[Gpu]:
    """This machine's GPUs by ``nvidia-smi -L``, without starting CUDA; none without nvidia-smi.

    Raises:
        RuntimeError: nvidia-smi failed or hung (e.g. no working driver), with its message.
    """
    if (done := _run_nvidia_smi()) is None:
        return []
    code, output = done
    if code is None:
        raise RuntimeError(f"nvidia-smi -L hung: {output}")
    if code != 0:
        if "No devices were found" in output:
            return []
        raise RuntimeError(f"nvidia-smi -L failed (exit {code}): {output}")
    return parse_nvidia_smi_list(output)


def visible_devices(gpus: Sequence[Gpu], environ: Mapping[str, str]) -> list[str]:
    """UUIDs of the devices that ``environ``'s ``CUDA_VISIBLE_DEVICES`` allows, in its order (all when
    unset, none when empty or starting with a negative index); see the module docstring.

    Raises:
        ValueError: an entry names no device or several, a device is named twice, or indices are given
            on a machine of mixed models without ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; naming the variable.
    """
    value = environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return [uuid for gpu in gpus for uuid in gpu.devices]
    where = f"CUDA_VISIBLE_DEVICES={value!r}"
    by_uuid = {
        uuid: devices
        for gpu in gpus
        for uuid, devices in [(gpu.uuid, gpu.devices), *((mig, (mig,)) for mig in gpu.mig)]
    }
    chosen: list[str] = []
    for entry in [entry.strip() for entry in value.split(",")] if value.strip() else []:
        if re.fullmatch(r"[+-]?\d+", entry):
            if int(entry) < 0:  # CUDA hides a negative index and all after it ("-1": no GPU)
                break
            if int(entry) >= len(gpus):
                raise ValueError(f"{where}: index {entry}, but nvidia-smi -L lists {len(gpus)} GPUs")
            if len({gpu.name for gpu in gpus}) > 1 and environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
                raise ValueError(
                    f"{where} names GPUs by index on a machine of mixed models, which CUDA numbers "
                    "fastest first: set CUDA_DEVICE_ORDER=PCI_BUS_ID or give UUIDs (nvidia-smi -L)"
                )
            found = gpus[int(entry)].devices
        elif entry.startswith(("GPU-", "MIG-")):
            matches = [uuid for uuid in by_uuid if uuid.startswith(entry)]
            if len(matches) != 1:
                raise ValueError(
                    f"{where}: {entry!r} is the start of {len(matches)} UUIDs of nvidia-smi -L, not of one"
                )
            found = by_uuid[matches[0]]
        else:
            raise ValueError(f"{where}: {entry!r} is neither a GPU index nor a GPU-/MIG- UUID")
        if twice := set(found) & set(chosen):
            raise ValueError(f"{where} names {sorted(twice)} twice")
        chosen.extend(found)
    return chosen


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (nothing to wait for on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def resolve_device(
    name: str, gpus: Sequence[Gpu] | None = None, environ: Mapping[str, str] = os.environ
) -> torch.device:
    """The device ``name`` means. "auto" is cuda when torch is built with CUDA and ``environ`` lets the
    job see a GPU of ``gpus`` (default :func:`nvidia_smi_gpus`), else cpu (with a warning when nvidia-smi
    fails or hangs, or when a CPU build of torch leaves GPUs unused); deciding starts no CUDA."""
    if name != "auto":
        return torch.device(name)
    if not torch.backends.cuda.is_built():
        try:
            listed = len(nvidia_smi_gpus() if gpus is None else gpus)
        except RuntimeError:
            listed = 0
        if listed:
            _warn_cpu_build(listed)
        return torch.device("cpu")
    try:
        found = visible_devices(nvidia_smi_gpus() if gpus is None else gpus, environ)
    except RuntimeError as error:
        log.warning("device auto: %s; training on the CPU", error)
        return torch.device("cpu")
    return torch.device("cuda" if found else "cpu")


@functools.cache
def _warn_cpu_build(listed: int) -> None:
    """Warn, once a process, that nvidia-smi lists GPUs this torch, a CPU build, cannot use."""
    log.warning(
        "device auto: nvidia-smi lists %d GPU(s), but torch %s is a CPU build; training on the CPU. "
        "Install torch's CUDA build (on x86_64 Linux PyPI's wheel is one: pip install --force-reinstall torch; "
        "or a wheel of https://download.pytorch.org/whl/cu126)",
        listed,
        torch.__version__,
    )


def _shared_folder(path: Path) -> Path:
    """``path``, created if missing as a folder all users may add files to (sticky, like /tmp)."""
    path.mkdir(parents=True, exist_ok=True)
    if path.stat().st_uid == os.getuid() and stat.S_IMODE(path.stat().st_mode) != 0o1777:
        path.chmod(0o1777)
    return path


def _open_lock_file(path: Path) -> int:
    """A read-only descriptor of the lock file ``path``, created readable by all if missing (not by
    O_CREAT on another user's file, which Linux refuses in sticky folders with protected_regular)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW
    try:
        return os.open(path, flags)
    except FileNotFoundError:
        pass
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o444)
    except FileExistsError:  # another job created it just now
        return os.open(path, flags)
    os.fchmod(fd, 0o444)  # whatever the umask
    return fd


def _take_slot(lock_dir: Path, slots: list[tuple[str, int]]) -> tuple[str, int] | None:
    """The first free slot as (device UUID, open descriptor holding its lock), or None if all are held."""
    for uuid, j in slots:
        fd = _open_lock_file(lock_dir / f"{re.sub(r'[^A-Za-z0-9-]', '_', uuid)}.slot{j}.lock")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return uuid, fd
    return None


@contextmanager
def gpu_slot(
    device: torch.device,
    lock_dir: str | os.PathLike,
    jobs_per_gpu: int = 1,
    gpus: Sequence[Gpu] | None = None,
    environ: MutableMapping[str, str] = os.environ,
    poll_seconds: float = 1.0,
) -> Iterator[torch.device]:
    """Hold a free slot of a device the job may use for the duration of the block; yields ``cuda:0``,
    with ``environ["CUDA_VISIBLE_DEVICES"]`` set to that device's UUID (restored after the block).

    A cpu device, or a pinned GPU such as ``cuda:2``, is yielded unchanged and takes no lock. A plain
    ``cuda`` takes the first free slot file ``lock_dir/{UUID}.slot{j}.lock`` among the devices
    ``environ``'s ``CUDA_VISIBLE_DEVICES`` allows (:func:`visible_devices`), trying every device's first
    slot before any device's second, so that jobs spread over the devices first. If every slot is held,
    the job waits (polling every ``poll_seconds``) until one is free.

    Args:
        device: The device the settings ask for (after :func:`resolve_device`).
        lock_dir: Folder of the slot files, shared by all jobs of the machine; created if missing.
        jobs_per_gpu: How many jobs may share one device (at least 1).
        gpus: The machine's GPUs; default :func:`nvidia_smi_gpus`.
        environ: The job's environment: it says which devices the job may use and receives the choice.
        poll_seconds: Seconds between tries while every slot is held.

    Raises:
        ValueError: ``jobs_per_gpu`` is below 1, or ``CUDA_VISIBLE_DEVICES`` is bad.
        RuntimeError: CUDA has already started in this process, or no device is visible.
    """
    if jobs_per_gpu < 1:
        raise ValueError(f"jobs_per_gpu must be at least 1, not {jobs_per_gpu}")
    if device.type != "cuda" or device.index is not None:
        yield device
        return
    if torch.cuda.is_initialized():
        raise RuntimeError(
            "CUDA has already started in this process, so CUDA_VISIBLE_DEVICES can no longer "
            "choose its GPU: take the GPU slot before anything uses CUDA"
        )
    gpus = nvidia_smi_gpus() if gpus is None else gpus
    uuids = visible_devices(gpus, environ)
    before = environ.get("CUDA_VISIBLE_DEVICES")
    if not uuids:
        raise RuntimeError(
            f"CUDA was asked for but no GPU is visible (CUDA_VISIBLE_DEVICES="
            f"{'<unset>' if before is None else repr(before)}; nvidia-smi -L lists {len(gpus)} GPUs)"
        )
    lock_dir = _shared_folder(Path(lock_dir))
    slots = [(uuid, j) for j in range(jobs_per_gpu) for uuid in uuids]
    taken = _take_slot(lock_dir, slots)
    if taken is None:
        log.info("every GPU slot of %s in %s is held; waiting for a free one", uuids, lock_dir)
    while taken is None:
        time.sleep(poll_seconds)
        taken = _take_slot(lock_dir, slots)
    uuid, fd = taken
    environ["CUDA_VISIBLE_DEVICES"] = uuid
    log.info("took a GPU slot in %s: CUDA_VISIBLE_DEVICES=%s", lock_dir, uuid)
    try:
        yield torch.device("cuda:0")
    finally:
        if before is None:
            environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            environ["CUDA_VISIBLE_DEVICES"] = before
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
