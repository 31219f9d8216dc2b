"""Process memory settings."""

import platform

import pytest
import torch

from gpstudy.runtime.flags import keep_freed_memory


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt only")
def test_keep_freed_memory_is_accepted_by_glibc_and_tensors_still_work():
    assert keep_freed_memory()
    big = torch.ones(5_000_000, dtype=torch.float64)  # 40 MB: above glibc's default mmap threshold
    assert big.sum().item() == 5_000_000
