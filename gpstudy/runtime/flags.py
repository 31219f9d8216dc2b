"""Flags of the whole process, set once before a job builds anything: TF32 for CUDA's float32 products, the
factorizations' library on CUDA, and glibc's malloc kept from returning freed memory to the OS.

glibc's malloc serves large blocks with fresh ``mmap`` calls and unmaps them on free, so a CPU
training step that allocates the same tensors every iteration also pays the page faults of touching
new memory every iteration. Serving every block from the heap (no ``mmap``) and never trimming it
lets freed blocks be reused, as the PyTorch CPU tuning guide's allocator advice intends (what it saves:
docs/speed.md#step-times-on-a-cpu). The process keeps its peak memory until it ends. Allocators other than
glibc's are left as they are.
"""

import ctypes
import ctypes.util
import logging

import torch

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's mallopt parameters (malloc.h)
TF32_CAPABILITY = (8, 0)  # the CUDA compute capability from which GPUs have TF32 (Ampere)


def keep_freed_memory() -> bool:
    """Tune glibc's malloc for repeated large allocations; False (and nothing done) without glibc."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        log.info("no glibc mallopt here (%s); memory allocation left as it is", name)
        return False
    return bool(mallopt(_M_MMAP_MAX, 0) and mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


def set_tf32(allowed: bool) -> dict[str, bool]:
    """Let CUDA's float32 matrix products (cuBLAS) and cuDNN's float32 convolutions round their inputs to
    TF32 (a 10-bit mantissa, on Ampere and later GPUs), or hold them to full float32, in this process;
    return :func:`tf32_settings`. Both are set, since PyTorch's defaults differ (cuBLAS full float32,
    cuDNN TF32). Nothing changes on the CPU or in float64. By PyTorch's ``allow_tf32`` flags, which set
    its newer ``fp32_precision`` settings too; setting only those would leave the flag that cuDNN's
    ``flags()`` and ``torch.export`` still read disagreeing with them, an error in torch 2.13."""
    torch.backends.cuda.matmul.allow_tf32 = allowed
    torch.backends.cudnn.allow_tf32 = allowed
    return tf32_settings()


def tf32_settings() -> dict[str, bool]:
    """Whether this process lets CUDA's float32 matrix products and cuDNN's float32 operators use TF32,
    by PyTorch's flag names."""
    return {
        "torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
    }


def set_linalg_library(device: torch.device) -> None:
    """On a CUDA device, make this process's factorizations and solves (``linalg.cholesky``,
    ``cholesky_solve``, ``cholesky_inverse``, ``eigh``, ...) use cuSOLVER wherever it implements them:
    ``torch.backends.cuda.preferred_linalg_library("cusolver")``, a flag of the process that starts no
    CUDA. Without it PyTorch chooses by a heuristic, which sends a batched ``cholesky_solve`` (every split
    of a job at once) to MAGMA where torch is built with it; with it a job's factorizations run in the
    library whose published rates ``benchmarks/gpu_estimate.py`` assumes. Which is the faster at the
    study's sizes only a GPU can tell. Nothing on other devices (a torch built without CUDA refuses the
    call)."""
    if device.type == "cuda":
        torch.backends.cuda.preferred_linalg_library("cusolver")


def tf32_in_effect(device: torch.device) -> bool:
    """Whether float32 products and convolutions on ``device`` may round to TF32 in this process: a GPU
    that has it (compute capability 8.0, Ampere, or later) and a TF32 flag set (:func:`set_tf32`); never
    on a CPU."""
    return (
        device.type == "cuda"
        and torch.cuda.get_device_capability(device) >= TF32_CAPABILITY
        and any(tf32_settings().values())
    )
