"""The process's flags: TF32, the factorizations' library on CUDA, glibc's malloc."""

import platform

import pytest
import torch

from gpstudy.runtime import flags
from gpstudy.runtime.flags import keep_freed_memory


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt only")
def test_keep_freed_memory_is_accepted_by_glibc_and_tensors_still_work():
    assert keep_freed_memory()
    big = torch.ones(5_000_000, dtype=torch.float64)  # 40 MB: above glibc's default mmap threshold
    assert big.sum().item() == 5_000_000


@pytest.mark.parametrize("name, chosen", [("cuda", ["cusolver"]), ("cuda:1", ["cusolver"]), ("cpu", []), ("meta", [])])
def test_a_cuda_job_prefers_cusolver(monkeypatch, name, chosen):
    """On CUDA every factorization of the job's process goes to cuSOLVER; on the CPU nothing is set (a torch
    without CUDA refuses the call). The call is faked: it would refuse here."""
    calls = []
    monkeypatch.setattr(torch.backends.cuda, "preferred_linalg_library", calls.append)
    flags.set_linalg_library(torch.device(name))
    assert calls == chosen


@pytest.fixture
def restore_tf32():
    """Put this process's TF32 flags back as they were after the test."""
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


@pytest.mark.usefixtures("restore_tf32")
def test_set_tf32_sets_cublas_and_cudnn_and_says_so():
    """PyTorch lets cuDNN round float32 convolutions to TF32 by default; a run sets both ways explicitly."""
    names = ("torch.backends.cuda.matmul.allow_tf32", "torch.backends.cudnn.allow_tf32")
    for allowed, precision in ((False, "ieee"), (True, "tf32")):
        assert flags.set_tf32(allowed) == flags.tf32_settings() == dict.fromkeys(names, allowed)
        assert torch.backends.cuda.matmul.fp32_precision == precision  # PyTorch's newer settings follow
        assert torch.backends.cudnn.conv.fp32_precision == ("tf32" if allowed else "none")  # none: not TF32


@pytest.mark.usefixtures("restore_tf32")
def test_tf32_is_in_effect_only_on_a_gpu_that_has_it_with_the_flags_set(monkeypatch):
    capability = {"cuda:0": (8, 0), "cuda:1": (7, 5)}  # an A100 and a T4, faked: no CUDA starts
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: capability[str(device)])
    for allowed in (False, True):
        flags.set_tf32(allowed)
        assert flags.tf32_in_effect(torch.device("cuda:0")) is allowed
        assert flags.tf32_in_effect(torch.device("cuda:1")) is False  # before Ampere: no TF32
        assert flags.tf32_in_effect(torch.device("cpu")) is False
