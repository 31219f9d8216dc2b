"""The tidy run table: collected from metrics.json files and read back from runs.csv, a damaged file or one
run written twice is an error naming the file, never an IndexError or a run counted twice."""

import json

import numpy as np
import pandas as pd
import pytest

from gpstudy.report.results import RUN_COLUMNS, collect_runs, read_runs


def metrics(split: int, rmse: float, **changes) -> dict:
    return {
        "experiment": "uci",
        "dataset": "boston",
        "method": "svgp",
        "M": 500,
        "split": split,
        "M_effective": 455,
        "rmse": rmse,
        "test_ll": -2.5,
        "iterations": 200,
        "seconds": 1.0,
        "device": "cpu",
        "seed": split,
        "status": "ok",
        **changes,
    }


@pytest.fixture
def runs_csv(tmp_path):
    """A runs.csv of three runs as collect_runs writes it."""
    files = []
    for split, (rmse, dtype) in enumerate(zip([3.0, 3.2, 2.9], ["float64", "float32", "mixed"])):
        files.append(tmp_path / f"split{split}" / "metrics.json")
        files[-1].parent.mkdir()
        files[-1].write_text(json.dumps(metrics(split, rmse, dtype=dtype)))
    path = tmp_path / "runs.csv"
    collect_runs(files).to_csv(path, index=False)
    return path


def test_a_run_table_reads_back_as_written(runs_csv):
    runs = read_runs(runs_csv)
    assert list(runs.columns) == RUN_COLUMNS and len(runs) == 3
    assert runs["M"].tolist() == [500] * 3 and runs["M_effective"].tolist() == [455] * 3
    np.testing.assert_allclose(runs["rmse"], [3.0, 3.2, 2.9])


def test_sizes_stay_integers_beside_a_failed_run(tmp_path):
    """A failed run has no M_effective, N or D; the other runs' are still written as integers (455, not 455.0)."""
    files = [tmp_path / name / "metrics.json" for name in ("ok", "failed")]
    for path, run in zip(
        files,
        [
            metrics(0, 3.0, n_train=455, n_test=51, D=13),
            {**metrics(1, float("nan"), status="failed: diverged"), "M_effective": None},
        ],
    ):
        path.parent.mkdir()
        path.write_text(json.dumps(run))
    path = tmp_path / "runs.csv"
    collect_runs(files).to_csv(path, index=False)
    first = dict(zip(*[line.split(",") for line in path.read_text().splitlines()[:2]]))
    assert (first["M_effective"], first["n_train"], first["n_test"], first["D"]) == ("455", "455", "51", "13")
    assert read_runs(path)["M_effective"].tolist()[0] == 455


def test_a_runs_csv_without_m_effective_reads_as_unknown(runs_csv):
    pd.read_csv(runs_csv).drop(columns="M_effective").to_csv(runs_csv, index=False)  # an older version's
    assert read_runs(runs_csv)["M_effective"].isna().all()


def test_the_dtype_a_run_trained_in_is_a_column(runs_csv):
    """Issue 35, item 11d: ``training.dtype`` changes every number; runs.csv says which each run had."""
    assert read_runs(runs_csv)["dtype"].tolist() == ["float64", "float32", "mixed"]
    pd.read_csv(runs_csv).drop(columns="dtype").to_csv(runs_csv, index=False)  # an older version's
    assert read_runs(runs_csv)["dtype"].isna().all()


@pytest.mark.parametrize(
    "cut",
    [
        lambda text: "",  # empty
        lambda text: text[:30],  # within the header
        lambda text: text.split("\n")[0] + "\n",  # the header alone
        lambda text: text[: text.rindex("\n", 0, -1) + 20],  # within the last run's labels
        lambda text: text[:-3],  # within the last run's status
    ],
    ids=["empty", "header", "header_only", "labels", "status"],
)
def test_a_truncated_runs_csv_is_an_error_naming_it(runs_csv, cut):
    runs_csv.write_text(cut(runs_csv.read_text()))
    with pytest.raises(ValueError, match=f"{runs_csv}: .*rerun snakemake"):
        read_runs(runs_csv)


def test_a_duplicated_run_is_refused_not_averaged(runs_csv):
    lines = runs_csv.read_text().splitlines()
    runs_csv.write_text("\n".join([*lines, lines[2]]) + "\n")  # split 1 again: line 5
    with pytest.raises(
        ValueError,
        match=rf"{runs_csv}: 1 run\(s\) .*uci boston svgp M=500 split 1: lines 3, 5; "
        "delete it and rerun snakemake",
    ):
        read_runs(runs_csv)


def test_two_metrics_files_of_one_run_are_refused(tmp_path):
    files = [tmp_path / name / "metrics.json" for name in ("a", "b")]
    for path in files:
        path.parent.mkdir()
        path.write_text(json.dumps(metrics(0, 3.0)))
    with pytest.raises(ValueError, match=f"split 0: {files[0]}, {files[1]}"):
        collect_runs(files)


def test_worse_than_the_mean_reads_back_true_false_or_unknown_and_a_stray_value_is_refused(tmp_path):
    """Issue 49: runs.csv's worse_than_mean (a regression run's rmse above rmse_of_mean) reads back as a
    nullable boolean: empty beside a failed run and in an older runs.csv; anything but True or False is an
    error naming the line, column and value."""
    files = [tmp_path / name / "metrics.json" for name in ("bad", "good", "failed")]
    for path, run in zip(
        files,
        [
            metrics(0, 500.0, rmse_of_mean=9.0, worse_than_mean=True),
            metrics(1, 3.0, rmse_of_mean=9.0, worse_than_mean=False),
            metrics(2, float("nan"), rmse_of_mean=9.0, worse_than_mean=None, status="failed: diverged"),
        ],
    ):
        path.parent.mkdir()
        path.write_text(json.dumps(run))
    path = tmp_path / "runs.csv"
    collect_runs(files).to_csv(path, index=False)
    runs = read_runs(path)
    assert runs["worse_than_mean"].tolist() == [True, False, pd.NA] and runs["rmse_of_mean"].tolist() == [9.0] * 3
    table = pd.read_csv(path)
    table.drop(columns=["rmse_of_mean", "worse_than_mean"]).to_csv(path, index=False)  # an older version's
    assert read_runs(path)["worse_than_mean"].isna().all() and read_runs(path)["rmse_of_mean"].isna().all()
    table.assign(worse_than_mean=["True", "maybe", ""]).to_csv(path, index=False)
    with pytest.raises(ValueError, match=r"line 3, column 'worse_than_mean': 'maybe' is neither True nor False"):
        read_runs(path)
