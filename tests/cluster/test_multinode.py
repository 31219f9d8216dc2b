"""The multi-node cluster check (issue 50) in CI: its node faults pass, and a check killed mid-case leaves
nothing behind (no namespace, process, mount or /etc file of its own).

Both stand up tests/cluster/slurm_nodes.sh's cluster (a head and 3 nodes, network namespaces) and take
about 9 minutes on 2 cores, most of it waiting for SLURM: they run only with GPSTUDY_CLUSTER_TESTS=1,
which .ci/run sets to run this file beside the suite (the README's pytest skips it), as root on a
machine where network namespaces can be made and Debian's SLURM packages are installed (.ci/run
installs them).
"""

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

CHECK = Path(__file__).with_name("check_slurm_profile.py")
_spec = importlib.util.spec_from_file_location("check_slurm_profile", CHECK)
check_slurm_profile = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_slurm_profile)
HEAD, NODES, NODES_STATE = check_slurm_profile.HEAD, check_slurm_profile.NODES, check_slurm_profile.NODES_STATE
PACKAGES = subprocess.run(  # what the cluster runs on, as slurm_common.sh names them
    ["bash", str(CHECK.with_name("slurm_common.sh")), "packages"], capture_output=True, text=True, check=True
).stdout.split()
DAEMONS = {"slurmctld", "slurmd", "slurmdbd", "slurmstepd", "munged", "mariadbd"}  # what its hosts run


def unavailable() -> str | None:
    """Why the cluster cannot stand up here, or None."""
    if os.environ.get("GPSTUDY_CLUSTER_TESTS") != "1":
        return (
            "the multi-node cluster check (~9 min as root): .ci/run runs it beside the suite (GPSTUDY_CLUSTER_TESTS=1)"
        )
    if os.geteuid() != 0:
        return "the multi-node cluster needs root (network namespaces, mounts, slurmd)"
    if subprocess.run(["unshare", "--net", "--mount", "true"], capture_output=True).returncode != 0:
        return "network and mount namespaces cannot be made here (unshare --net --mount failed)"
    missing = [p for p in PACKAGES if subprocess.run(["dpkg", "-s", p], capture_output=True).returncode != 0]
    if missing:
        return f"Debian packages not installed: {' '.join(missing)} (.ci/run installs them)"
    return None


pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))


def check_command(mirror: Path, workdir: Path, cases: str) -> list[str]:
    return [
        sys.executable,
        str(CHECK),
        "--mirror",
        str(mirror),
        "--workdir",
        str(workdir),
        "--nodes",
        "3",
        "--cases",
        cases,
    ]


def test_node_faults(shared_data: Path, tmp_path: Path):
    """Cases 2 and 3: the training job's node dies past its first checkpoint, with SLURM's requeue (hold
    released) and with --slurm-no-requeue; each resumes at k + 1 elsewhere with the uninterrupted metrics."""
    result = subprocess.run(
        check_command(shared_data, tmp_path, "requeue,no-requeue"), capture_output=True, text=True, timeout=1200
    )
    summary = (tmp_path / "summary.json").read_text() if (tmp_path / "summary.json").exists() else result.stdout
    assert result.returncode == 0, summary[-6000:] + result.stderr[-3000:]
    checks = json.loads(summary)["checks"]
    for case in ("requeue", "no-requeue"):
        names = [name for name in checks if name.startswith(f"{case}:")]
        assert len(names) == 2 and all(checks[name]["ok"] for name in names), checks


def snapshot() -> dict:
    """What the cluster could leave behind: namespaces, mounts, /etc files, daemons' processes."""
    etc = {p: p.read_bytes() for p in [Path("/etc/hosts"), *sorted(Path("/etc/slurm").rglob("*"))] if p.is_file()}
    processes = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            processes[proc.name] = (
                (proc / "comm").read_text().strip(),
                (proc / "cmdline").read_bytes(),
                os.readlink(proc / "ns" / "net"),
            )
        except OSError:
            continue
    return {
        "netns": subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout,
        "mounts": set(Path("/proc/mounts").read_text().splitlines()),
        "run_netns": Path("/run/netns").exists(),
        "etc": etc,
        "processes": processes,
    }


def test_killed_mid_case_leaves_nothing(shared_data: Path, tmp_path: Path):
    """SIGTERM to the check while a job runs on a node: it tears the cluster down all the same."""
    before = snapshot()
    assert "gpstudy-" not in before["netns"], "a gpstudy cluster is up already"
    log = open(tmp_path / "check.log", "w")
    check = subprocess.Popen(check_command(shared_data, tmp_path, "spread"), stdout=log, stderr=subprocess.STDOUT)
    try:

        def job_running() -> bool:
            if f"{HEAD}\n" not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout + "\n":
                return False
            squeue = subprocess.run(
                [str(NODES), "exec", HEAD, "--", "squeue", "-h", "-t", "RUNNING", "-o", "%N"],
                capture_output=True,
                text=True,
            )
            return squeue.returncode == 0 and "gpstudy-n" in squeue.stdout

        deadline = time.monotonic() + 600
        while check.poll() is None and not job_running() and time.monotonic() < deadline:
            time.sleep(1)
        assert check.poll() is None and job_running(), (tmp_path / "check.log").read_text()[-3000:]
        during = snapshot()
        assert "gpstudy-n1" in during["netns"] and during["mounts"] != before["mounts"]  # it was up: something to undo
        check.send_signal(signal.SIGTERM)
        assert check.wait(timeout=120) != 0
    finally:
        if check.poll() is None:
            check.kill()
            check.wait()
            subprocess.run([str(NODES), "down"])
        log.close()
    after = snapshot()
    assert after["netns"] == before["netns"]
    assert after["mounts"] == before["mounts"], after["mounts"] ^ before["mounts"]
    assert after["run_netns"] == before["run_netns"]
    assert after["etc"] == before["etc"]
    new = {pid: info for pid, info in after["processes"].items() if pid not in before["processes"]}
    own_net = os.readlink("/proc/self/ns/net")
    left = {  # a host's process (another network namespace), a daemon, or one of the check's
        pid: comm
        for pid, (comm, cmdline, net) in new.items()
        if net != own_net
        or comm in DAEMONS
        or str(tmp_path).encode() in cmdline
        or str(NODES_STATE).encode() in cmdline
    }
    assert not left, left
    assert sorted(p.name for p in NODES_STATE.iterdir()) == ["log"]
    shutil.rmtree(NODES_STATE)
