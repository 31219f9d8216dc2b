"""Process memory: keep freed CPU tensor memory for reuse instead of returning it to the OS.

glibc's malloc serves large blocks (above a threshold that adapts up to 32 MiB) with fresh ``mmap``
calls and returns them on free, so a CPU training step that allocates the same tensors every
iteration also pays the page faults of touching new memory every iteration (measured here: GPNet 15%
and FBNN 25% of a step). Raising the threshold to its maximum and never trimming the heap lets freed
blocks be reused, as the PyTorch CPU tuning guide's allocator advice intends. Tensors above 32 MiB,
and allocators other than glibc's, are left as they are.
"""

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
_MMAP_THRESHOLD_MAX = 32 * 1024 * 1024  # glibc's ceiling on 64-bit machines


def keep_freed_memory() -> bool:
    """Tune glibc's malloc for repeated large allocations; False (and nothing done) without glibc."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        log.info("no glibc mallopt here (%s); memory allocation left as it is", name)
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX) and mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))
