"""Aggregation of run folders into tidy tables: one row per run, one row per learning-curve point."""

from collections.abc import Callable, Iterable
from pathlib import Path

import pandas as pd

from gpstudy.data.dataset import excerpt
from gpstudy.io import UnreadableFileError, read_json
from gpstudy.metrics import METRIC_NAMES
from gpstudy.runtime.environment import BOOLEAN_RECORDED, RECORDED

METRICS = list(METRIC_NAMES)  # every task's test metrics
LABELS = ["experiment", "dataset", "method", "M", "split"]  # what identifies a run
# a regression run's test RMSE of predicting y's training mean, and whether its own RMSE is worse (a finished run
# of a method that did badly, kept ok and never hidden: gpstudy.training.run.against_the_mean); empty otherwise
AGAINST_THE_MEAN = ["rmse_of_mean", "worse_than_mean"]
# results/runs.csv, in this order; a metric not of the run's task is empty. The RECORDED columns (versions,
# commit, device name) describe a run and never identify it: nothing groups or compares rows by them. status
# stays last: a file cut within its last line cuts a status (read_runs)
RUN_COLUMNS = [
    *LABELS,
    "M_effective",
    "n_train",
    "n_test",
    "D",
    *METRICS,
    *AGAINST_THE_MEAN,
    "iterations",
    "seconds",
    "device",
    "dtype",
    *RECORDED,
    "status",
]
SIZE_COLUMNS = ["M_effective", "n_train", "n_test", "D"]  # integers, empty beside a failed run
# absent from an older version's runs.csv (read as empty)
OPTIONAL_COLUMNS = [*SIZE_COLUMNS, *AGAINST_THE_MEAN, "dtype", *RECORDED]
TEXT_RECORDED = [column for column in RECORDED if column not in BOOLEAN_RECORDED]  # read as text, however they look
SHOWN = 5  # at most this many runs or lines named in an error


def collect_runs(metrics_files: Iterable[Path]) -> pd.DataFrame:
    """One row per ``metrics.json`` (failed runs included, with their status); two files of one run
    (the same ``LABELS``) are an error naming them."""
    metrics_files = list(map(Path, metrics_files))
    frame = pd.DataFrame([read_run(path) for path in metrics_files], columns=RUN_COLUMNS)
    frame = frame.astype(
        {**{column: "Int64" for column in SIZE_COLUMNS}, "worse_than_mean": "boolean"}
    )  # a failed run's are empty, the rest stay integers (and true or false)
    _refuse_duplicates(frame, "metrics.json files", lambda rows: ", ".join(str(metrics_files[row]) for row in rows))
    return frame.sort_values(LABELS, ignore_index=True)


def read_runs(path: Path) -> pd.DataFrame:
    """``results/runs.csv`` (``collect_runs``' table), checked: a file that is not such a table (empty,
    columns missing, no rows), a row without its labels or a status (a truncated file) and two rows of
    one run are errors naming the file, the lines and the way out."""
    rewrite = "delete it and rerun snakemake to collect it again"
    try:
        runs = pd.read_csv(path, dtype=dict.fromkeys(TEXT_RECORDED, str))  # "2.10" no float, a commit no number
    except (pd.errors.EmptyDataError, pd.errors.ParserError) as error:
        raise ValueError(f"{path}: not a table of runs ({error}); {rewrite}") from None
    missing = [column for column in RUN_COLUMNS if column not in runs and column not in OPTIONAL_COLUMNS]
    if missing:
        raise ValueError(f"{path}: no column {', '.join(missing)} (a truncated or foreign file?); {rewrite}")
    if runs.empty:
        raise ValueError(f"{path}: a header and no runs (a truncated file?); {rewrite}")
    status = runs["status"].fillna("")
    incomplete = runs[LABELS].isna().any(axis=1) | ~((status == "ok") | status.str.startswith("failed"))
    if incomplete.any():
        lines = ", ".join(str(row + 2) for row in runs.index[incomplete][:SHOWN])  # line 1: the header
        raise ValueError(
            f"{path}: line {lines} lacks a run's labels or its status (ok or failed: ...), as a "
            f"truncated file does; {rewrite}"
        )
    try:
        runs = runs.reindex(columns=RUN_COLUMNS).astype({"M": int, "split": int})
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path}: M and split must be integers ({error}); {rewrite}") from None
    for column in ["M_effective", "n_train", "n_test", "D", *METRICS, "rmse_of_mean", "iterations", "seconds"]:
        numbers = pd.to_numeric(runs[column], errors="coerce")
        wrong = numbers.isna() & runs[column].notna()  # an empty cell is a metric not of the run's task
        if wrong.any():
            row = runs.index[wrong][0]
            raise ValueError(
                f"{path}: line {row + 2}, column {column!r}: {excerpt(runs.at[row, column])} is no number; {rewrite}"
            )
        runs[column] = numbers
    flags = runs["worse_than_mean"].map({True: True, False: False, "True": True, "False": False}).astype("boolean")
    if (wrong := flags.isna() & runs["worse_than_mean"].notna()).any():
        row = runs.index[wrong][0]
        raise ValueError(
            f"{path}: line {row + 2}, column 'worse_than_mean': {excerpt(runs.at[row, 'worse_than_mean'])} is "
            f"neither True nor False; {rewrite}"
        )
    runs["worse_than_mean"] = flags
    _refuse_duplicates(runs, str(path), lambda rows: "lines " + ", ".join(str(row + 2) for row in rows), rewrite)
    return runs


def _refuse_duplicates(runs: pd.DataFrame, source: str, where: Callable[[list[int]], str], remedy: str = "") -> None:
    """Raise ``ValueError`` where two rows of ``runs`` (read from ``source``) have the same ``LABELS``: one
    run counted twice would weigh twice in every mean. ``where(rows)`` names the rows' own sources; ``remedy``
    (if any) ends the message."""
    duplicated = runs.duplicated(LABELS, keep=False)
    if duplicated.any():
        groups = list(runs[duplicated].groupby(LABELS, sort=False).groups.items())
        described = "; ".join(
            f"{experiment} {dataset} {method} M={m} split {split}: {where(list(rows))}"
            for (experiment, dataset, method, m, split), rows in groups[:SHOWN]
        )
        raise ValueError(
            f"{source}: {len(groups)} run(s) appear more than once, which would count them twice: "
            f"{described}" + (f"; {remedy}" if remedy else "")
        )


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
