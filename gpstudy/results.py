"""Aggregation of run folders into tidy tables: one row per run, one row per learning-curve point."""

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from gpstudy.io import UnreadableFileError, read_json

METRICS = ["rmse", "error_rate", "test_ll"]  # every task's test metrics (gpstudy.metrics.TASK_METRICS)
RUN_COLUMNS = ["experiment", "dataset", "method", "M", "split", *METRICS, "iterations", "seconds",
               "device", "status"]  # results/runs.csv, in this order; a metric not of the run's task is empty
LABELS = ["experiment", "dataset", "method", "M", "split"]  # what identifies a run


def collect_runs(metrics_files: Iterable[Path]) -> pd.DataFrame:
    """One row per ``metrics.json`` (failed runs included, with their status)."""
    rows = [read_run(path) for path in metrics_files]
    frame = pd.DataFrame(rows, columns=RUN_COLUMNS)
    return frame.sort_values(LABELS, ignore_index=True)


def collect_curves(metrics_files: Iterable[Path]) -> pd.DataFrame:
    """Every run's ``learning_curve.csv`` (beside its ``metrics.json``) with the run's labels."""
    frames = []
    for path in map(Path, metrics_files):
        curve = path.with_name("learning_curve.csv")
        if curve.exists():  # a failed run may have none
            labels = read_run(path)
            frames.append(read_run_csv(curve).assign(**{label: labels[label] for label in LABELS}))
    columns = [*LABELS, "iteration", "objective", "seconds", *METRICS]
    return pd.concat(frames, ignore_index=True).reindex(columns=columns) if frames else pd.DataFrame(columns=columns)


def collect_predictions(metrics_files: Iterable[Path]) -> pd.DataFrame:
    """Every run's ``predictions.csv`` with its method and M (Snelson's figure)."""
    frames = []
    for path in map(Path, metrics_files):
        labels = read_run(path)
        predictions = path.with_name("predictions.csv")
        if predictions.exists():
            frames.append(read_run_csv(predictions).assign(method=labels["method"], M=labels["M"]))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def remake_run(path: Path) -> str:
    """How to make a file of a run folder again: delete its training job's folder (``paths.BATCH``, the
    rule's directory output, two levels up) and rerun. Deleting the file alone makes nothing: Snakemake
    sees the folder and never reruns the job."""
    return f"delete its job's folder {Path(path).parents[1]} and rerun to make it again"


def read_run(path: Path) -> dict:
    """A run's ``metrics.json``.

    Raises:
        UnreadableFileError: the file is missing or damaged (the message says which folder to delete).
    """
    if not Path(path).is_file():
        raise UnreadableFileError(f"{path}: missing; {remake_run(path)}")
    return read_json(path, remake=remake_run(path))


def read_run_csv(path: Path) -> pd.DataFrame:
    """A CSV file of a run folder (learning curve, predictions).

    Raises:
        UnreadableFileError: the file is damaged (the message says which folder to delete).
    """
    try:
        return pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as error:
        raise UnreadableFileError(f"{path}: not a CSV table ({error}); {remake_run(path)}") from error
