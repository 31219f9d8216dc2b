"""Recovery as the README and the error messages advise it, followed step by step (issue #25).

A finished job that Snakemake marked incomplete is rewritten without training; every message that says
what to delete names what makes Snakemake redo the work (a job's folder for a file inside it, since
Snakemake reruns a job whose directory output is missing and nothing else); a full disk says so.
The Snakemake step is played by hand: ``--rerun-incomplete`` and the advice delete the job's folder,
and Snakemake runs the job again (``run_splits``) because its folder is missing.
"""

import errno
import logging
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import gpstudy.training.run as run_module
from gpstudy.data import Split
from gpstudy.io import UnreadableFileError, atomic_path, write_csv, write_json
from gpstudy.linalg import CholeskyError
from gpstudy.report.results import collect_curves, collect_runs
from gpstudy.training import run_splits
from gpstudy.training.checkpoint import CheckpointError, save
from gpstudy.training.finished import finished_path

NO_SPACE = r"\[Errno 28\] No space left on device: '{}'"  # what a full disk says, naming the file


def toy_split(seed: int = 0) -> Split:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, size=(50, 2))
    y = np.sin(2 * x[:, 0]) + 0.1 * rng.normal(size=50)
    return Split(x[:40], y[:40], x[40:], y[40:], np.zeros(2), np.ones(2), 0.0, 1.0, {})


class Job:
    """A training job of two splits as the workflow lays it out: the folder ``splits0-1`` (the rule's
    directory output) with one folder per split, and the checkpoint beside it."""

    def __init__(self, root: Path, settings):
        self.folder, self.settings = root / "results/splits0-1", settings
        self.checkpoint = root / "results/splits0-1.checkpoint.pt"
        self.splits = {0: toy_split(0), 1: toy_split(1)}
        self.out_dirs = {s: self.folder / f"split{s}" for s in self.splits}
        self.labels = {
            s: {"experiment": "e", "dataset": "toy", "method": "svgp", "M": 6, "split": s} for s in self.splits
        }

    def run(self, settings=None) -> dict[int, dict]:
        """The job, as Snakemake starts it."""
        return run_splits(self.splits, settings or self.settings, self.out_dirs, self.checkpoint, self.labels)

    def files(self) -> dict[str, bytes]:
        return {
            str(path.relative_to(self.folder)): path.read_bytes()
            for path in sorted(self.folder.rglob("*"))
            if path.is_file()
        }

    def metrics_files(self) -> list[Path]:
        return [folder / "metrics.json" for folder in self.out_dirs.values()]


@pytest.fixture
def job(tmp_path, settings_for) -> Job:
    return Job(tmp_path, settings_for("svgp", 6, iterations=20, batch_size=16, eval_every=5, checkpoint_every=5))


@pytest.fixture
def trainings(monkeypatch) -> list[int]:
    """Counts the trainings that start (``fit`` calls) from here on."""
    real, calls = run_module.fit, []

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(run_module, "fit", counted)
    return calls


def test_a_finished_job_marked_incomplete_is_rewritten_bit_identically_without_training(job, trainings, caplog):
    caplog.set_level(logging.INFO)
    first = job.run()
    written = job.files()
    assert not job.checkpoint.exists() and finished_path(job.checkpoint).exists() and len(trainings) == 1
    shutil.rmtree(job.folder)  # Snakemake stopped by SIGINT marked it incomplete; --rerun-incomplete deletes it
    assert job.run() == first and job.files() == written
    assert len(trainings) == 1 and "nothing trained" in caplog.text


def test_a_finished_job_of_other_settings_trains_again(job, trainings):
    first = job.run()
    shutil.rmtree(job.folder)
    changed = job.run(job.settings.__class__(**{**job.settings.__dict__, "lr": 0.02}))
    assert len(trainings) == 2 and changed[0]["rmse"] != first[0]["rmse"]


def test_a_failed_batch_is_kept_too(job, monkeypatch):
    monkeypatch.setattr(run_module, "fit", lambda *args, **kwargs: (_ for _ in ()).throw(CholeskyError("no jitter")))
    failed = job.run()
    shutil.rmtree(job.folder)
    monkeypatch.setattr(run_module, "fit", lambda *args, **kwargs: pytest.fail("trained again"))
    assert job.run()[1]["status"] == failed[1]["status"] == "failed: CholeskyError: no jitter"


def test_a_damaged_record_of_a_finished_job_names_itself_and_deleting_it_trains_afresh(job, trainings):
    first = job.run()
    record = finished_path(job.checkpoint)
    record.write_text(record.read_text()[:50])
    shutil.rmtree(job.folder)
    with pytest.raises(UnreadableFileError, match=rf"{record}: not valid JSON .*delete it and rerun"):
        job.run()
    record.unlink()  # the advice
    assert job.run()[0]["rmse"] == first[0]["rmse"] and len(trainings) == 2


@pytest.mark.parametrize("damage", ["truncated", "deleted"])
def test_a_damaged_metrics_file_names_the_job_folder_whose_deletion_remakes_it(job, damage):
    job.run()
    rows = collect_runs(job.metrics_files())
    metrics = job.out_dirs[1] / "metrics.json"
    if damage == "truncated":
        metrics.write_text(metrics.read_text()[:40])
    else:
        metrics.unlink()  # what the old message advised: Snakemake then never reran the job
    with pytest.raises(UnreadableFileError, match=rf"{metrics}: .*delete its job's folder {job.folder} and rerun"):
        collect_runs(job.metrics_files())
    shutil.rmtree(job.folder)  # the advice; Snakemake then reruns the job, whose folder is missing
    job.run()
    pd.testing.assert_frame_equal(collect_runs(job.metrics_files()), rows)


def test_a_damaged_learning_curve_names_the_job_folder(job):
    job.run()
    curves = collect_curves(job.metrics_files())
    (job.out_dirs[0] / "learning_curve.csv").write_bytes(b'iteration,objective\n\xff\xfe\x00"')
    with pytest.raises(
        UnreadableFileError,
        match=rf"learning_curve\.csv: not a CSV .*delete its job's folder "
        rf"{job.folder} and rerun",
    ):
        collect_curves(job.metrics_files())
    shutil.rmtree(job.folder)
    job.run()
    pd.testing.assert_frame_equal(collect_curves(job.metrics_files()), curves)


def test_an_unreadable_checkpoint_deleted_as_advised_trains_afresh(job):
    job.checkpoint.parent.mkdir(parents=True)
    job.checkpoint.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match=rf"(?s){job.checkpoint} cannot be read .*delete it and rerun"):
        job.run()
    job.checkpoint.unlink()  # the advice (the failed job's folder is gone: Snakemake reruns it)
    assert job.run()[0]["status"] == "ok"


# A full disk: the error says so and names the file; the file before stays whole, no temporary is left.


def test_a_full_disk_under_a_checkpoint_write_says_so_naming_the_checkpoint(tmp_path, monkeypatch):
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full (a device whose writes fail with ENOSPC)")
    import gpstudy.training.checkpoint as checkpoint_module

    path = tmp_path / "c.pt"
    save(path, {"step": 5, "weights": torch.ones(3)})
    monkeypatch.setattr(checkpoint_module, "open", lambda name, mode: open("/dev/full", mode), raising=False)
    with pytest.raises(
        CheckpointError, match=rf"checkpoint {path} cannot be written \(OSError: " + NO_SPACE.format(path)
    ):
        save(path, {"step": 10, "weights": torch.zeros(100_000)})  # torch's own writer: "unexpected pos"
    assert torch.load(path, weights_only=True)["step"] == 5 and [p.name for p in tmp_path.iterdir()] == ["c.pt"]


@pytest.mark.parametrize("writer", ["json", "csv"])
def test_a_full_disk_under_an_atomic_write_says_so_naming_the_file(tmp_path, monkeypatch, writer):
    path = tmp_path / f"out.{writer}"
    path.write_text("before")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")  # the write's error names no file

    if writer == "json":
        monkeypatch.setattr(Path, "write_text", full)
        write = lambda: write_json(path, {"rmse": 0.5})  # noqa: E731
    else:
        monkeypatch.setattr(pd.DataFrame, "to_csv", full)
        write = lambda: write_csv(path, pd.DataFrame({"x": [1]}))  # noqa: E731
    with pytest.raises(OSError, match=NO_SPACE.format(path)) as raised:
        write()
    assert raised.value.errno == errno.ENOSPC
    assert path.read_text() == "before" and [p.name for p in tmp_path.iterdir()] == [path.name]


def test_a_full_disk_buried_under_a_writers_own_error_is_found(tmp_path):
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full (a device whose writes fail with ENOSPC)")
    path = tmp_path / "table.npz"
    with pytest.raises(OSError, match=NO_SPACE.format(path)):
        with atomic_path(path), open("/dev/full", "wb") as full:
            try:
                full.write(b"x" * 100_000)
            except OSError as error:
                raise RuntimeError("unexpected pos 704 vs 598") from error  # as torch's writer reports it
    assert list(tmp_path.iterdir()) == []
