"""GPU slots named by UUID: jobs of runs with different visible devices never share one, spread over
the devices, wait when all are held, never see a stale lock, and tell CUDA which device to use.

No GPU is needed: the machine's GPUs are faked (``gpus=``) and each "run" has its own environment."""

import fcntl
import logging
import os
import re
import signal
import stat
import subprocess
import sys
import threading
from contextlib import ExitStack
from pathlib import Path

import pytest
import torch

from gpstudy.runtime import devices
from gpstudy.runtime.devices import (
    Gpu,
    gpu_slot,
    nvidia_smi_gpus,
    parse_nvidia_smi_list,
    resolve_device,
    visible_devices,
)

REPO = Path(__file__).resolve().parents[2]
CUDA = torch.device("cuda")

# `nvidia-smi -L` of a 3-GPU workstation (driver 550)
THREE_GPUS = """\
GPU 0: NVIDIA GeForce RTX 3090 (UUID: GPU-6f2c2a1e-3b0d-8c47-9e51-0a7d4b1c2e93)
GPU 1: NVIDIA GeForce RTX 3090 (UUID: GPU-b83e5d07-41a9-2f6c-d815-7c3a9e0f4b26)
GPU 2: NVIDIA GeForce RTX 3090 (UUID: GPU-c1d9f4e2-8a7b-5e30-1f62-b94d0a3c7e58)
"""
# `nvidia-smi -L` of a node whose first A100 is in MIG mode with two instances (driver 535)
MIG_NODE = """\
GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)
  MIG 3g.20gb     Device  0: (UUID: MIG-7a9e4c7e-0f59-5d2b-9a3e-2a1b7f3d8c11)
  MIG 3g.20gb     Device  1: (UUID: MIG-e4b8a2c0-93d1-5f7a-b6e2-0c9d8f1a3b45)
GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-a0f3c9b2-6e41-7d58-2b19-e8c5d4f7a036)
"""
# the same under drivers R450/R460, which named MIG instances after their GPU, instance and compute ids
OLD_MIG_NODE = """\
GPU 0: A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)
  MIG 3g.20gb Device 0: (UUID: MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/1/0)
  MIG 3g.20gb Device 1: (UUID: MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/2/0)
"""
GPUS = parse_nvidia_smi_list(THREE_GPUS)
A, B, C = (gpu.uuid for gpu in GPUS)
MIGS = parse_nvidia_smi_list(MIG_NODE)
MIG1, MIG2 = MIGS[0].mig
WHOLE = MIGS[1].uuid


def locked(lock_dir: Path, uuid: str, slot: int = 0) -> bool:
    """Whether some descriptor holds the lock of ``uuid``'s slot."""
    fd = os.open(lock_dir / f"{uuid}.slot{slot}.lock", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


class Run:
    """One Snakemake run: its own environment (``CUDA_VISIBLE_DEVICES=visible``) and its jobs' slots."""

    def __init__(self, lock_dir: Path, visible: str | None, gpus=GPUS, **kwargs) -> None:
        self.lock_dir, self.gpus, self.kwargs = lock_dir, gpus, kwargs
        self.environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
        self.stack = ExitStack()

    def take(self, stack: ExitStack) -> str:
        """Take a slot (in a copy of the run's environment, waiting if need be) until ``stack`` closes;
        the UUID the job is told to use."""
        environ = dict(self.environ)
        device = stack.enter_context(
            gpu_slot(CUDA, self.lock_dir, gpus=self.gpus, environ=environ, poll_seconds=0.02, **self.kwargs)
        )
        assert device == torch.device("cuda:0")
        return environ["CUDA_VISIBLE_DEVICES"]

    def job(self) -> str:
        """Start a job that holds a slot until the run ends; its UUID (an assertion error if it waits 5 s)."""
        job = Waiter(self)
        job.start()
        self.stack.callback(job.finish)
        assert job.got.wait(5), "the job waits for a slot"
        return job.uuid


class Waiter(threading.Thread):
    """A job of ``run`` in a thread, holding its slot until ``release`` is set; ``got`` once it has one."""

    def __init__(self, run: Run) -> None:
        super().__init__(daemon=True)
        self.run_, self.got, self.release = run, threading.Event(), threading.Event()
        self.uuid: str | None = None

    def run(self) -> None:
        with ExitStack() as stack:
            self.uuid = self.run_.take(stack)
            self.got.set()
            self.release.wait(10)

    def finish(self) -> None:
        self.release.set()
        self.join(5)


def test_parse_nvidia_smi_list_with_and_without_mig():
    assert [(gpu.index, gpu.name, gpu.mig) for gpu in GPUS] == [(k, "NVIDIA GeForce RTX 3090", ()) for k in range(3)]
    assert B == "GPU-b83e5d07-41a9-2f6c-d815-7c3a9e0f4b26"
    assert MIGS[0].uuid == "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77"
    assert MIGS[0].devices == ("MIG-7a9e4c7e-0f59-5d2b-9a3e-2a1b7f3d8c11", "MIG-e4b8a2c0-93d1-5f7a-b6e2-0c9d8f1a3b45")
    assert MIGS[1].devices == (WHOLE,)
    old = parse_nvidia_smi_list(OLD_MIG_NODE)
    assert old[0].devices == tuple(f"MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/{g}/0" for g in (1, 2))


@pytest.mark.parametrize(
    "text", ["Failed to initialize NVML: Driver/library version mismatch\n", THREE_GPUS.replace("GPU 2:", "GPU 3:")]
)
def test_parse_refuses_what_it_does_not_know(text):
    with pytest.raises(ValueError, match="nvidia-smi -L"):
        parse_nvidia_smi_list(text)


def test_nvidia_smi_gpus_missing_failing_and_empty(monkeypatch):
    for result, expected in [(None, []), ((6, "No devices were found"), []), ((0, THREE_GPUS), GPUS)]:
        monkeypatch.setattr(devices, "_run_nvidia_smi", lambda: result)
        assert nvidia_smi_gpus() == expected
    monkeypatch.setattr(
        devices,
        "_run_nvidia_smi",
        lambda: (9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."),
    )
    with pytest.raises(RuntimeError, match="exit 9.*couldn't communicate"):
        nvidia_smi_gpus()


@pytest.mark.parametrize(
    "visible, expected",
    [
        (None, [A, B, C]),
        ("", []),
        ("-1", []),
        ("0,1", [A, B]),
        ("2, 0", [C, A]),
        ("1,-1,2", [B]),
        (f"{C},{A}", [C, A]),
        ("GPU-b83e", [B]),
    ],
)
def test_visible_devices_by_index_uuid_and_prefix(visible, expected):
    environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert visible_devices(GPUS, environ) == expected


@pytest.mark.parametrize(
    "visible, expected",
    [
        (None, [MIG1, MIG2, WHOLE]),
        ("0", [MIG1, MIG2]),
        (MIGS[0].uuid, [MIG1, MIG2]),
        ("MIG-e4b8", [MIG2]),
        (f"{WHOLE},{MIG1}", [WHOLE, MIG1]),
    ],
)
def test_mig_instances_are_devices_of_their_own(visible, expected):
    environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert visible_devices(MIGS, environ) == expected


@pytest.mark.parametrize(
    "visible, message",
    [
        ("3", "index 3, but nvidia-smi -L lists 3 GPUs"),
        ("GPU-0000", "start of 0 UUIDs"),
        ("GPU-", "start of 3 UUIDs"),
        ("0,GPU-6f2c", r"\['GPU-6f2c.*'\] twice"),
        ("NoDevFiles", "neither"),
    ],
)
def test_bad_visible_devices_are_errors_naming_the_variable(visible, message):
    with pytest.raises(ValueError, match=f"CUDA_VISIBLE_DEVICES='{visible}'.*{message}"):
        visible_devices(GPUS, {"CUDA_VISIBLE_DEVICES": visible})


def test_indices_on_mixed_models_need_pci_bus_order():
    mixed = [GPUS[0], Gpu(1, "NVIDIA RTX A6000", B)]
    with pytest.raises(ValueError, match="CUDA_DEVICE_ORDER=PCI_BUS_ID"):
        visible_devices(mixed, {"CUDA_VISIBLE_DEVICES": "1"})
    assert visible_devices(mixed, {"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}) == [B]
    assert visible_devices(mixed, {"CUDA_VISIBLE_DEVICES": B}) == [B]


@pytest.mark.parametrize("name", ["cpu", "cuda:2"])
def test_cpu_and_pinned_gpu_pass_through_without_locks(tmp_path, name):
    environ = {"CUDA_VISIBLE_DEVICES": "1,2"}
    with gpu_slot(torch.device(name), tmp_path / "locks", gpus=GPUS, environ=environ) as device:
        assert device == torch.device(name)
        assert environ == {"CUDA_VISIBLE_DEVICES": "1,2"}
        assert not (tmp_path / "locks").exists()


def test_the_job_is_told_its_gpu_by_uuid_before_cuda_starts(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,2")
    with gpu_slot(CUDA, tmp_path, gpus=GPUS) as device:
        assert device == torch.device("cuda:0")
        assert os.environ["CUDA_VISIBLE_DEVICES"] == B
        assert locked(tmp_path, B)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1,2"
    assert not locked(tmp_path, B)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(RuntimeError, match="CUDA has already started.*CUDA_VISIBLE_DEVICES"):
        with gpu_slot(CUDA, tmp_path, gpus=GPUS):
            pass


def test_runs_with_different_visible_devices_never_share_a_gpu(tmp_path):
    first, second, by_uuid = Run(tmp_path, "0,1"), Run(tmp_path, "1,2"), Run(tmp_path, "GPU-c1d9")
    with first.stack, second.stack, by_uuid.stack:
        assert first.job() == A
        assert second.job() == B  # its index 0 is the first run's index 1: free, so it takes it
        waiter = Waiter(by_uuid)  # its only GPU, C, is free
        waiter.start()
        assert waiter.got.wait(5) and waiter.uuid == C
        late = Waiter(first)  # A and B are held (B by the other run): it waits
        late.start()
        assert not late.got.wait(0.3)
        assert all(locked(tmp_path, uuid) for uuid in (A, B, C))
        second.stack.close()  # the second run's job on B ends
        assert late.got.wait(5) and late.uuid == B
        late.finish()
        waiter.finish()


def test_mig_instances_are_slots_of_their_own(tmp_path):
    whole_gpu0, one_instance = Run(tmp_path, "0", gpus=MIGS), Run(tmp_path, "MIG-e4b8", gpus=MIGS)
    with whole_gpu0.stack, one_instance.stack:
        assert [whole_gpu0.job(), whole_gpu0.job()] == [MIG1, MIG2]
        waiter = Waiter(one_instance)
        waiter.start()
        assert not waiter.got.wait(0.3)  # its instance is held by the other run
        assert Run(tmp_path, None, gpus=MIGS).job() == WHOLE
        whole_gpu0.stack.close()
        assert waiter.got.wait(5) and waiter.uuid == MIG2
        waiter.finish()


def test_jobs_spread_over_gpus_before_sharing_one_in_a_shared_folder(tmp_path):
    run = Run(tmp_path / "slots", "0,1", jobs_per_gpu=2)
    with run.stack:
        assert [run.job() for _ in range(4)] == [A, B, A, B]
        names = {f"{uuid}.slot{j}.lock" for uuid in (A, B) for j in (0, 1)}
        assert {p.name for p in (tmp_path / "slots").iterdir()} == names
        assert stat.S_IMODE((tmp_path / "slots").stat().st_mode) == 0o1777  # every user may add locks
        assert {stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "slots").iterdir()} == {0o444}


def test_a_job_waits_while_every_slot_is_held_and_logs_once(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="gpstudy.runtime.devices")
    run = Run(tmp_path, "0,2")
    with run.stack:
        assert [run.job(), run.job()] == [A, C]
        waiter = Waiter(Run(tmp_path, "0,2"))
        waiter.start()
        assert not waiter.got.wait(0.3)  # every slot is held: it waits
    # the run released both slots (C first: the stack unwinds in reverse), so the waiter takes whichever it
    # finds free first: C if it polls between the two releases (seen under load), else A
    assert waiter.got.wait(5) and waiter.uuid in (A, C)
    waiter.finish()
    waits = [r.getMessage() for r in caplog.records if "waiting" in r.getMessage()]
    assert len(waits) == 1 and str(tmp_path) in waits[0]


def test_locks_hold_across_processes_and_die_with_their_holder(tmp_path):
    code = (
        "import os, sys, torch\n"
        "from gpstudy.runtime.devices import gpu_slot, parse_nvidia_smi_list\n"
        "with gpu_slot(torch.device('cuda'), sys.argv[1], gpus=parse_nvidia_smi_list(sys.argv[2])):\n"
        "    print(os.environ['CUDA_VISIBLE_DEVICES'], flush=True)\n"
        "    sys.stdin.read()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path), THREE_GPUS],
        cwd=REPO,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "1,2"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == B
        run = Run(tmp_path, "0,1")
        with run.stack:
            assert run.job() == A  # the other process holds B
            waiter = Waiter(Run(tmp_path, "1"))
            waiter.start()
            assert not waiter.got.wait(0.3)
            child.send_signal(signal.SIGKILL)  # no clean exit: the kernel drops its lock
            child.wait(5)
            assert (tmp_path / f"{B}.slot0.lock").exists()  # the file stays, the lock does not
            assert waiter.got.wait(5) and waiter.uuid == B
            waiter.finish()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_bad_jobs_per_gpu_and_no_visible_gpu_are_errors(tmp_path):
    with pytest.raises(ValueError, match="jobs_per_gpu.*0"):
        with gpu_slot(CUDA, tmp_path, jobs_per_gpu=0, gpus=GPUS, environ={}):
            pass
    for gpus, environ, shown in [(GPUS, {"CUDA_VISIBLE_DEVICES": ""}, "''"), ([], {}, "<unset>")]:
        with pytest.raises(RuntimeError, match=f"no GPU is visible \\(CUDA_VISIBLE_DEVICES={shown}"):
            with gpu_slot(CUDA, tmp_path, gpus=gpus, environ=environ):
                pass


def test_resolve_device_decides_auto_without_starting_cuda(monkeypatch):
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("cuda:1") == torch.device("cuda:1")
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: False)
    assert resolve_device("auto", GPUS, {}) == torch.device("cpu")  # a CPU build of torch
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    assert resolve_device("auto", GPUS, {}) == torch.device("cuda")
    assert resolve_device("auto", GPUS, {"CUDA_VISIBLE_DEVICES": "-1"}) == torch.device("cpu")
    monkeypatch.setattr(devices, "_run_nvidia_smi", lambda: (9, "NVIDIA-SMI has failed"))
    assert resolve_device("auto") == torch.device("cpu")  # a broken driver: the CPU, with a warning
    assert not torch.cuda.is_initialized()


def test_resolve_device_falls_back_to_the_cpu_when_nvidia_smi_hangs(tmp_path, monkeypatch, caplog):
    """A wedged driver makes ``nvidia-smi`` hang: "auto" waits ``NVIDIA_SMI_TIMEOUT_SECONDS``, kills it and
    trains on the CPU with a warning; a job that asks for cuda gets an error naming the hang."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\nexec sleep 30\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(devices, "NVIDIA_SMI_TIMEOUT_SECONDS", 0.2)
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    devices._run_nvidia_smi.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="gpstudy.runtime.devices"):
            assert resolve_device("auto", environ={}) == torch.device("cpu")
        assert "nvidia-smi -L hung: no answer within 0.2 s" in caplog.text and "training on the CPU" in caplog.text
        with pytest.raises(RuntimeError, match="nvidia-smi -L hung"):
            with gpu_slot(CUDA, tmp_path / "locks", environ={}):
                pass
    finally:
        devices._run_nvidia_smi.cache_clear()  # the next test's nvidia-smi is the machine's
    assert not torch.cuda.is_initialized()


@pytest.mark.skipif(torch.backends.cuda.is_built(), reason="needs a CPU build of torch")
def test_auto_on_a_cpu_build_of_torch_with_gpus_listed_warns_naming_the_cuda_build(tmp_path):
    """Issue 49: device=auto where nvidia-smi lists GPUs but torch is a CPU build trained on the CPU saying
    nothing; now one warning (once, however many runs are planned) naming the CUDA build to install."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text(f"#!/bin/sh\ncat <<'EOF'\n{THREE_GPUS}EOF\n")
    fake.chmod(0o755)
    run = subprocess.run(
        [sys.executable, "-m", "gpstudy", "settings", "--dataset", "boston", "--method", "svgp", "--M", "5"]
        + ["--config", "device=auto"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"},
    )
    assert run.returncode == 0 and re.search(r"^device = cpu ", run.stdout, re.M), run.stderr
    warnings = [line for line in run.stderr.splitlines() if "is a CPU build" in line]
    assert len(warnings) == 1, run.stderr
    assert (
        f"nvidia-smi lists 3 GPU(s), but torch {torch.__version__} is a CPU build; training on the CPU" in warnings[0]
    )
    assert "Install torch's CUDA build" in warnings[0]
