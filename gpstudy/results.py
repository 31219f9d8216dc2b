"""Aggregation of run folders into tidy tables: one row per run, one row per learning-curve point."""

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from gpstudy.io import read_json

METRICS = ["rmse", "error_rate", "test_ll"]  # every task's test metrics (gpstudy.metrics.TASK_METRICS)
RUN_COLUMNS = ["experiment", "dataset", "method", "M", "split", *METRICS, "iterations", "seconds",
               "device", "status"]  # results/runs.csv, in this order; a metric not of the run's task is empty
LABELS = ["experiment", "dataset", "method", "M", "split"]  # what identifies a run


def collect_runs(metrics_files: Iterable[Path]) -> pd.DataFrame:
    """One row per ``metrics.json`` (failed runs included, with their status)."""
    rows = [read_json(path) for path in metrics_files]
    frame = pd.DataFrame(rows, columns=RUN_COLUMNS)
    return frame.sort_values(LABELS, ignore_index=True)


def collect_curves(metrics_files: Iterable[Path]) -> pd.DataFrame:
    """Every run's ``learning_curve.csv`` (beside its ``metrics.json``) with the run's labels."""
    frames = []
    for path in map(Path, metrics_files):
        curve = path.with_name("learning_curve.csv")
        if curve.exists():  # a failed run may have none
            labels = read_json(path)
            frames.append(pd.read_csv(curve).assign(**{label: labels[label] for label in LABELS}))
    columns = [*LABELS, "iteration", "objective", "seconds", *METRICS]
    return pd.concat(frames, ignore_index=True).reindex(columns=columns) if frames else pd.DataFrame(columns=columns)


def collect_predictions(metrics_files: Iterable[Path]) -> pd.DataFrame:
    """Every run's ``predictions.csv`` with its method and M (Snelson's figure)."""
    frames = []
    for path in map(Path, metrics_files):
        labels = read_json(path)
        predictions = path.with_name("predictions.csv")
        if predictions.exists():
            frames.append(pd.read_csv(predictions).assign(method=labels["method"], M=labels["M"]))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
