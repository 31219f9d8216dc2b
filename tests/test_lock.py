"""The locks (issue 48, item 2): locks/requirements-cpu.lock and locks/requirements-cuda.lock pin every runtime
dependency by version and sha256, the README's torch in its CPU and its CUDA build, and a run records the lock
that the installed libraries match (``gpstudy.runtime.environment.lock_in_use``).

The proof that a lock installs and runs, into a fresh venv, downloads ~80 wheels (torch's CPU build ~190 MB) and
takes minutes: it runs only with GPSTUDY_LOCK_TESTS=1."""

import hashlib
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from gpstudy.runtime.environment import LOCKS, PIN, UNLOCKED, lock_in_use

REPO = Path(__file__).resolve().parents[1]
LOCK_FILES = {"cpu": REPO / LOCKS / "requirements-cpu.lock", "cuda": REPO / LOCKS / "requirements-cuda.lock"}


def canonical(name: str) -> str:
    """A distribution's name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def test_a_run_records_the_lock_whose_every_pin_is_installed(tmp_path):
    numpy, torch = importlib.metadata.version("numpy"), importlib.metadata.version("torch")
    assert lock_in_use(tmp_path) is None  # no lock beside the package: an installed copy, nothing to say
    (tmp_path / "a-other.lock").write_text(f"numpy=={numpy} \\\n    --hash=sha256:{'0' * 64}\ntorch==0.0.1\n")
    assert lock_in_use(tmp_path) == UNLOCKED  # one pin not installed: not this lock
    matching = f"# a comment\nnumpy=={numpy} \\\n    --hash=sha256:{'1' * 64}\n    # via gpstudy\ntorch=={torch}\n"
    (tmp_path / "b-this.lock").write_text(matching)
    assert lock_in_use(tmp_path) == f"b-this.lock sha256:{hashlib.sha256(matching.encode()).hexdigest()}"
    (tmp_path / "b-this.lock").write_text(matching + "no-such-distribution-here==1.0\n")
    assert lock_in_use(tmp_path) == UNLOCKED


@pytest.mark.parametrize("build", sorted(LOCK_FILES))
def test_each_lock_pins_every_dependency_with_hashes_and_the_readmes_torch(build):
    text = LOCK_FILES[build].read_text()
    pins = dict(PIN.findall(text))
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {canonical(re.match(r"[A-Za-z0-9._-]+", requirement)[0]) for requirement in declared}
    assert names - {canonical(name) for name in pins} == set()
    entries = re.split(r"\n(?=[A-Za-z0-9])", text[text.index("\n" + next(iter(pins))) + 1 :])
    assert len(entries) == len(pins) and all("--hash=sha256:" in entry for entry in entries)  # every pin hashed
    (readme_torch,) = set(re.findall(r"pip install -q torch==(\S+) ", (REPO / "README.md").read_text()))
    nvidia = [name for name in pins if name.startswith("nvidia-")]
    if build == "cpu":
        assert (pins["torch"], nvidia) == (f"{readme_torch}+cpu", [])
    else:  # PyPI's Linux torch: the CUDA build, its CUDA libraries as wheels
        assert pins["torch"] == readme_torch and "nvidia-cublas" in nvidia and "triton" in pins


def test_the_image_installs_the_cpu_lock_and_is_the_workflows_container():
    """Read, not built (no Docker or Apptainer here): the Dockerfile's Python is the locks', it installs the CPU
    lock alone with --require-hashes (its build context that file alone), and the Snakefile's container is the
    image file that docs/installation.md's command builds."""
    steps = re.findall(r"^(FROM|COPY|RUN) (.*(?:\\\n.*)*)", (REPO / "Dockerfile").read_text(), re.M)
    made = (REPO / LOCKS / "make.sh").read_text()
    (python,) = re.findall(r"--python-version (\S+)", made)
    assert [step for step, _ in steps] == ["FROM", "COPY", "RUN"]
    assert steps[0][1] == f"python:{python}-slim-bookworm"
    source, copied = steps[1][1].split()
    assert source == f"{LOCKS}/requirements-cpu.lock"
    assert re.match(rf"pip install --no-cache-dir --require-hashes -r {copied} ", steps[2][1])
    assert (REPO / ".dockerignore").read_text().splitlines()[1:] == ["*", f"!{source}"]
    (image,) = re.findall(r'^container: "(.+)"$', (REPO / "Snakefile").read_text(), re.M)
    assert f"apptainer build {image} docker-daemon://" in (REPO / "docs/installation.md").read_text()


@pytest.mark.skipif(os.environ.get("GPSTUDY_LOCK_TESTS") != "1", reason="installs a lock into a fresh venv (minutes)")
def test_the_cpu_lock_installs_into_a_fresh_venv_and_trains(tmp_path, checkout_copy, outside_env, shared_data):
    """As docs/installation.md says: a venv, the lock with --require-hashes, gpstudy without dependencies; pip
    check is clean, the workflow plans, and a run trains and records the lock it ran under."""
    source = checkout_copy(tmp_path / "checkout")
    venv = tmp_path / "venv"
    run = {"env": outside_env, "capture_output": True, "text": True, "timeout": 1200}

    def ok(*words, cwd: Path = tmp_path) -> str:
        done = subprocess.run([str(word) for word in words], cwd=cwd, **run)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        return done.stdout

    ok(sys.executable, "-m", "venv", venv)
    bin = venv / "bin"
    ok(bin / "pip", "install", "-q", "--require-hashes", "-r", source / LOCKS / "requirements-cpu.lock")
    ok(bin / "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", source)
    ok(bin / "pip", "check")
    ok(bin / "snakemake", "-n", "--cores", "1", "--configfile", "configs/quick.yaml", cwd=source)
    train = [
        "train",
        "--dataset",
        "boston",
        "--method",
        "svgp",
        "--M",
        "5",
        "--iterations",
        "5",
        "--config",
        "device=cpu",
    ]
    ok(bin / "gpstudy", *train, "--mirror", shared_data, cwd=source)
    metrics = json.loads((source / "results/cli/boston/svgp/M5/split0/metrics.json").read_text())
    lock = source / LOCKS / "requirements-cpu.lock"
    assert (metrics["status"], metrics["torch_version"]) == ("ok", dict(PIN.findall(lock.read_text()))["torch"])
    assert metrics["lock"] == f"requirements-cpu.lock sha256:{hashlib.sha256(lock.read_bytes()).hexdigest()}"
