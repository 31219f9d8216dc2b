"""The papers' numbers as tidy tables: the GPNet paper's UCI regression (Tables 3 and 4), its airline
delay regression (Table 1), every data set of its tables in its order with its sizes, the PBP baseline, single
classification numbers (the AutoGP paper's MNIST),
and the rows of other papers' methods that a table quotes (the rest of Table 2).

The numbers live in the package file ``paper_results.yaml``, whose header names their sources.
"""

from functools import cache
from importlib import resources

import pandas as pd
import yaml

from gpstudy.metrics import METRIC_NAMES, TASK_METRICS

METRICS = TASK_METRICS["regression"]  # Table 3 (RMSE) and Table 4 (test log-likelihood)
ALL_METRICS = tuple(METRIC_NAMES)  # with the classification numbers


@cache
def _results() -> dict:
    """The parsed ``paper_results.yaml``."""
    return yaml.safe_load(resources.files("gpstudy").joinpath("paper_results.yaml").read_text())


def _check_metric(metric: str, known: tuple[str, ...] = METRICS) -> None:
    if metric not in known:
        raise ValueError(f"unknown metric {metric!r}; the papers report {known}")


def paper_datasets() -> pd.DataFrame:
    """The UCI data sets in the paper's row order: columns dataset (our key), name (the paper's), N, D."""
    rows = [{"dataset": key, **info} for key, info in _results()["datasets"].items()]
    return pd.DataFrame(rows, columns=["dataset", "name", "N", "D"])


def table_datasets() -> pd.DataFrame:
    """Every data set of the paper's tables in the paper's order: Table 1's airline, Table 2's images (its
    columns left to right), then Tables 3-4's UCI sets (their rows), the order in which our tables list them.

    Returns:
        Columns dataset (our key), name (the paper's), N (training + test rows) and D (inputs), N and D
        nullable integers, NA where the paper prints none (the airline's D).
    """
    results = _results()
    rows = [{"dataset": "airline", "name": results["airline"]["name"], "N": results["airline"]["N"]}]
    rows += [{"dataset": key, **info} for key, info in {**results["images"], **results["datasets"]}.items()]
    return pd.DataFrame(rows, columns=["dataset", "name", "N", "D"]).astype({"N": "Int64", "D": "Int64"})


def paper_protocol() -> pd.DataFrame:
    """The splits and iterations behind the paper's numbers per data set: Tables 3-4's (20 random splits,
    10K iterations) for each UCI data set, Table 1's for the airline (one draw, 10K iterations).

    Returns:
        Columns dataset, splits, iterations; data sets whose protocol the file does not record are absent.
    """
    results = _results()
    tables, airline = results["protocol"], results["airline"]["protocol"]
    rows = [(dataset, tables["splits"], tables["iterations"]) for dataset in results["datasets"]]
    rows.append(("airline", airline["splits"], airline["iterations"]))
    return pd.DataFrame(rows, columns=["dataset", "splits", "iterations"])


def paper_columns() -> list[tuple[str, int]]:
    """The (method, M) result columns of Tables 3 and 4, left to right."""
    return [(method, m) for method, m in _results()["columns"]]


def paper_table(metric: str) -> pd.DataFrame:
    """The papers' numbers of a metric, one row per cell: Table 3 (``"rmse"``) or 4 (``"test_ll"``) in
    the paper's order, then Table 1's airline numbers of the metric, then the classification numbers of
    the metric (``"test_ll"``, ``"error_rate"``).

    Returns:
        Columns dataset, method, M, mean, se (NaN where the paper prints none).
    """
    _check_metric(metric, ALL_METRICS)
    rows = [
        (dataset, method, m, mean, se)
        for dataset, cells in _results().get(metric, {}).items()
        for (method, m), (mean, se) in zip(paper_columns(), cells, strict=True)
    ]
    airline = airline_table()
    rows += list(
        airline.loc[airline["metric"] == metric, ["dataset", "method", "M", "mean", "se"]].itertuples(
            index=False, name=None
        )
    )
    rows += [
        (cell["dataset"], cell["method"], cell["M"], cell["value"], float("nan"))
        for cell in classification_numbers()
        if cell["metric"] == metric
    ]
    return pd.DataFrame(rows, columns=["dataset", "method", "M", "mean", "se"])


def airline_table() -> pd.DataFrame:
    """Table 1, the airline delay regression (one random 700K/100K draw), one row per cell: the RMSE
    row (minutes) left to right, then the test log-likelihood row.

    Returns:
        Columns dataset (``"airline"``), method, M, metric, mean, se (NaN: the paper prints none).
    """
    table = _results()["airline"]
    rows = [
        ("airline", method, m, metric, value, float("nan"))
        for metric in METRICS
        for (method, m), value in zip(table["columns"], table[metric], strict=True)
    ]
    return pd.DataFrame(rows, columns=["dataset", "method", "M", "metric", "mean", "se"])


def classification_numbers() -> list[dict]:
    """The single classification numbers: dataset, method, M, metric, value, paper (file) and quote."""
    return _results()["classification"]


def quoted_tables() -> dict[str, dict]:
    """The tables whose rows of other papers' methods an experiment's tables may quote, by name: each with
    source (its name in a caption), paper (file), metric, datasets (its columns) and rows (method, the
    paper's row name; values, one per data set or None for its "-"; quote, the printed row)."""
    return _results()["quoted"]


def quoted_rows(name: str, metric: str) -> pd.DataFrame:
    """The quoted table ``name``'s numbers of ``metric``, one row per (paper row, data set) in the paper's
    order, NaN where it prints "-"; none for another metric.

    Returns:
        Columns dataset, method (the paper's row name), value.
    """
    table = quoted_tables()[name]
    rows = [
        (dataset, row["method"], float("nan") if value is None else value)
        for row in table["rows"]
        for dataset, value in zip(table["datasets"], row["values"], strict=True)
        if table["metric"] == metric
    ]
    return pd.DataFrame(rows, columns=["dataset", "method", "value"])


def pbp_table(metric: str) -> pd.DataFrame:
    """PBP's mean and standard error per data set (Hernandez-Lobato & Adams 2015).

    Args:
        metric: ``"rmse"`` or ``"test_ll"``.

    Returns:
        Columns dataset, mean, se; data sets in the paper's order.
    """
    _check_metric(metric)
    rows = [(dataset, mean, se) for dataset, (mean, se) in _results()["pbp"][metric].items()]
    return pd.DataFrame(rows, columns=["dataset", "mean", "se"])
