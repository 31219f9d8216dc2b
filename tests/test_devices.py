"""GPU slots: jobs spread over the GPUs, wait when all are held, and never see a stale lock."""

import logging
import signal
import subprocess
import sys
import threading
from contextlib import ExitStack
from pathlib import Path

import pytest
import torch

from gpstudy.devices import gpu_slot, resolve_device

REPO = Path(__file__).resolve().parents[1]
CUDA = torch.device("cuda")


class SlotThread(threading.Thread):
    """Takes a slot in a thread, holds it until ``release`` is set; ``got`` is set once it has one."""

    def __init__(self, lock_dir: Path, **kwargs) -> None:
        super().__init__(daemon=True)
        self.lock_dir, self.kwargs = lock_dir, {"poll_seconds": 0.02, **kwargs}
        self.got, self.release = threading.Event(), threading.Event()
        self.device: torch.device | None = None

    def run(self) -> None:
        with gpu_slot(CUDA, self.lock_dir, **self.kwargs) as device:
            self.device = device
            self.got.set()
            self.release.wait(10)


def hold(stack: ExitStack, lock_dir: Path, **kwargs) -> int:
    """Take a slot until ``stack`` closes; the GPU's index."""
    return stack.enter_context(gpu_slot(CUDA, lock_dir, **kwargs)).index


@pytest.mark.parametrize("name", ["cpu", "cuda:2"])
def test_cpu_and_pinned_gpu_pass_through_without_locks(tmp_path, name):
    with gpu_slot(torch.device(name), tmp_path / "locks", num_gpus=4) as device:
        assert device == torch.device(name)
        assert not (tmp_path / "locks").exists()


def test_jobs_take_distinct_gpus_and_a_released_one_is_taken_again(tmp_path):
    jobs = [ExitStack() for _ in range(4)]
    try:
        devices = [job.enter_context(gpu_slot(CUDA, tmp_path, num_gpus=4)) for job in jobs]
        assert devices == [torch.device(f"cuda:{k}") for k in range(4)]
        jobs[2].close()  # the job on cuda:2 ends
        newcomer = SlotThread(tmp_path, num_gpus=4)
        newcomer.start()
        assert newcomer.got.wait(5)  # (not forever, should the slot stay held)
        assert newcomer.device == torch.device("cuda:2")
        newcomer.release.set()
        newcomer.join(5)
    finally:
        for job in jobs:
            job.close()


def test_jobs_spread_over_gpus_before_sharing_one(tmp_path):
    with ExitStack() as stack:
        assert [hold(stack, tmp_path, jobs_per_gpu=2, num_gpus=2) for _ in range(4)] == [0, 1, 0, 1]
        names = {"cuda0.slot0.lock", "cuda1.slot0.lock", "cuda0.slot1.lock", "cuda1.slot1.lock"}
        assert {p.name for p in tmp_path.iterdir()} == names


def test_a_job_waits_while_every_slot_is_held_and_logs_once(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="gpstudy.devices")
    with ExitStack() as stack:
        assert [hold(stack, tmp_path, num_gpus=2) for _ in range(2)] == [0, 1]
        waiter = SlotThread(tmp_path, num_gpus=2)
        waiter.start()
        assert not waiter.got.wait(0.3)  # every slot is held: it waits
        assert waiter.device is None
    assert waiter.got.wait(5)  # the stack released both slots
    assert waiter.device == torch.device("cuda:0")
    waiter.release.set()
    waiter.join(5)
    waits = [r for r in caplog.records if "waiting" in r.getMessage()]
    assert len(waits) == 1 and str(tmp_path) in waits[0].getMessage()


def test_locks_hold_across_processes_and_die_with_their_holder(tmp_path):
    code = (
        "import sys, torch\n"
        "from gpstudy.devices import gpu_slot\n"
        "with gpu_slot(torch.device('cuda'), sys.argv[1], num_gpus=2) as device:\n"
        "    print(device, flush=True)\n"
        "    sys.stdin.read()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "cuda:0"
        with ExitStack() as stack:
            assert hold(stack, tmp_path, num_gpus=2) == 1  # the other process holds cuda:0
            waiter = SlotThread(tmp_path, num_gpus=2)
            waiter.start()
            assert not waiter.got.wait(0.3)  # both GPUs are held, one by each process
            child.send_signal(signal.SIGKILL)  # no clean exit: the kernel drops its lock
            child.wait(5)
            assert (tmp_path / "cuda0.slot0.lock").exists()  # the file stays, the lock does not
            assert waiter.got.wait(5)
            assert waiter.device == torch.device("cuda:0")
            waiter.release.set()
            waiter.join(5)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_bad_jobs_per_gpu_and_no_visible_gpu_are_errors(tmp_path):
    with pytest.raises(ValueError, match="jobs_per_gpu.*0"):
        with gpu_slot(CUDA, tmp_path, jobs_per_gpu=0, num_gpus=2):
            pass
    with pytest.raises(RuntimeError, match="CUDA_VISIBLE_DEVICES"):
        with gpu_slot(CUDA, tmp_path, num_gpus=0):
            pass


def test_resolve_device():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("cuda:1") == torch.device("cuda:1")
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: auto means cuda here")
    assert resolve_device("auto") == torch.device("cpu")
