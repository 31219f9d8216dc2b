"""What a run records of its code, libraries and device (issue 36, item 5): in every metrics.json, a failed
run's too, and in runs.csv; the commit and local changes of a checkout, null outside one; never a part of what
a run is, so a finished run stays finished under a new library or commit."""

import importlib.metadata
import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import gpstudy
import gpstudy.runtime.environment as provenance
import gpstudy.training.run as run_module
from gpstudy.io import read_json
from gpstudy.linalg import CholeskyError
from gpstudy.report.results import collect_runs, read_runs
from gpstudy.runtime.environment import LOCKS, RECORDED, checkout_state, cpu_model, lock_in_use
from gpstudy.training.run import run_splits

from splits import small_split

REPO = Path(__file__).resolve().parents[2]


def git(folder: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def package_repository(folder: Path) -> Path:
    """A git repository at ``folder`` holding a package folder ``gpstudy/`` at its top; that folder."""
    package = folder / "gpstudy"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("x = 1\n")
    git(folder, "init", "-q")
    return package


def labels(s: int) -> dict[int, dict]:
    return {s: {"experiment": "uci", "dataset": "boston", "method": "svgp", "M": 4, "split": s}}


def test_a_checkout_records_its_commit_and_whether_it_has_local_changes(tmp_path):
    package = package_repository(tmp_path)
    assert checkout_state(package) == (None, None)  # no commit yet
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "first")
    head = git(tmp_path, "rev-parse", "HEAD")
    assert checkout_state(package) == (head, False)
    (tmp_path / "notes.txt").write_text("untracked")  # an untracked file is no change of the code
    assert checkout_state(package) == (head, False)
    (package / "__init__.py").write_text("x = 2\n")
    assert checkout_state(package) == (head, True)
    git(tmp_path, "add", ".")  # staged is still not committed
    assert checkout_state(package) == (head, True)


def test_no_checkout_no_git_no_commit(tmp_path, monkeypatch):
    """An installed copy (even in a venv inside a checkout), a plain folder, or no git: null, never an error."""
    plain = tmp_path / "plain" / "gpstudy"
    plain.mkdir(parents=True)
    assert checkout_state(plain) == (None, None)
    repository = tmp_path / "repository"
    package_repository(repository)
    git(repository, "add", ".")
    git(repository, "commit", "-qm", "first")
    installed = repository / ".venv" / "lib" / "site-packages" / "gpstudy"
    installed.mkdir(parents=True)
    assert checkout_state(installed) == (None, None)
    monkeypatch.setenv("PATH", str(tmp_path / "no-git-here"))
    assert checkout_state(repository / "gpstudy") == (None, None)


def test_the_cpu_model_is_the_machines():
    model = cpu_model()
    assert model
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file() and "model name" in cpuinfo.read_text():
        assert f": {model}\n" in cpuinfo.read_text()


def test_every_run_records_its_code_libraries_and_device(settings_for, tmp_path, monkeypatch, request):
    """An ok run and a failed one: the versions as the installed distributions say, the commit as git says, the
    device and torch's threads; and runs.csv carries them (read back as text: a version "2.10" never becomes 2.1)."""
    run = settings_for("svgp", 4, iterations=1, batch_size=8, eval_every=1, device="cpu")
    threads = torch.get_num_threads()
    torch.set_num_threads(threads + 1)  # the count in effect when the run ran, not a default
    request.addfinalizer(lambda: torch.set_num_threads(threads))
    ok = run_splits({0: small_split()}, run, {0: tmp_path / "ok"}, tmp_path / "ok.pt", labels(0))[0]
    monkeypatch.setattr(run_module, "fit", lambda *args, **kwargs: (_ for _ in ()).throw(CholeskyError("x")))
    failed = run_splits(
        {1: small_split()}, replace(run, seed=1), {1: tmp_path / "failed"}, tmp_path / "failed.pt", labels(1)
    )[1]
    assert failed["status"].startswith("failed")
    if (REPO / ".git").exists():  # the tests run from a checkout: its commit, and whether it has local changes
        changes = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        commit = (git(REPO, "rev-parse", "HEAD"), bool(changes))
    else:
        commit = (None, None)
    expected = {
        "device": "cpu",
        "device_name": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": threads + 1,
        "tf32": False,
        "gpstudy_version": gpstudy.__version__,
        "git_commit": commit[0],
        "git_dirty": commit[1],
        "torch_version": torch.__version__,
        "numpy_version": importlib.metadata.version("numpy"),
        "pandas_version": importlib.metadata.version("pandas"),
        "lock": lock_in_use(REPO / LOCKS),  # tests/test_lock.py checks the matching itself
    }
    assert expected["torch_version"].split("+")[0] == importlib.metadata.version("torch").split("+")[0]
    for folder, metrics in (("ok", ok), ("failed", failed)):
        written = read_json(tmp_path / folder / "metrics.json")
        assert {key: written[key] for key in expected} == {key: metrics[key] for key in expected} == expected
    runs = collect_runs([tmp_path / folder / "metrics.json" for folder in ("ok", "failed")])
    assert [runs[column].tolist() for column in RECORDED] == [[expected[column]] * 2 for column in RECORDED]
    runs.assign(git_commit="1234567890" * 4, torch_version="2.10").to_csv(tmp_path / "runs.csv", index=False)
    read = read_runs(tmp_path / "runs.csv")
    assert read["git_commit"].tolist() == ["1234567890" * 4] * 2 and read["torch_version"].tolist() == ["2.10"] * 2


def test_a_new_library_or_commit_never_makes_a_finished_run_stale(settings_for, tmp_path, monkeypatch):
    """The recorded fields are no part of a job's identity: its rerun under another commit rewrites its
    outputs from the finished record (training nothing), and they say what the run was trained with."""
    run = settings_for("svgp", 4, iterations=1, batch_size=8, eval_every=1, device="cpu")
    first = run_splits({0: small_split()}, run, {0: tmp_path}, tmp_path / "job.pt", labels(0))[0]
    monkeypatch.setattr(provenance, "package_checkout_state", lambda: ("f" * 40, True))
    monkeypatch.setattr(provenance.torch, "__version__", "9.9.9")
    monkeypatch.setattr(run_module, "fit", lambda *args, **kwargs: pytest.fail("a finished run trained again"))
    again = run_splits({0: small_split()}, run, {0: tmp_path}, tmp_path / "job.pt", labels(0))[0]
    assert again == first == json.loads((tmp_path / "metrics.json").read_text())
