"""The GPNet paper's UCI regression numbers (Tables 3 and 4) and the PBP baseline, as tidy tables.

The numbers live in the package file ``paper_results.yaml``, whose header names their sources.
"""

from functools import cache
from importlib import resources

import pandas as pd
import yaml

METRICS = ("rmse", "test_ll")  # Table 3 (RMSE) and Table 4 (test log-likelihood)


@cache
def _results() -> dict:
    """The parsed ``paper_results.yaml``."""
    return yaml.safe_load(resources.files("gpstudy").joinpath("paper_results.yaml").read_text())


def _check_metric(metric: str) -> None:
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; the paper reports {METRICS}")


def paper_datasets() -> pd.DataFrame:
    """The UCI data sets in the paper's row order: columns dataset (our key), name (the paper's), N, D."""
    rows = [{"dataset": key, **info} for key, info in _results()["datasets"].items()]
    return pd.DataFrame(rows, columns=["dataset", "name", "N", "D"])


def paper_columns() -> list[tuple[str, int]]:
    """The (method, M) result columns of Tables 3 and 4, left to right."""
    return [(method, m) for method, m in _results()["columns"]]


def paper_table(metric: str) -> pd.DataFrame:
    """The paper's Table 3 (``"rmse"``) or Table 4 (``"test_ll"``), one row per cell.

    Args:
        metric: ``"rmse"`` or ``"test_ll"``.

    Returns:
        Columns dataset, method, M, mean, se; data sets and columns in the paper's order.
    """
    _check_metric(metric)
    rows = [
        (dataset, method, m, mean, se)
        for dataset, cells in _results()[metric].items()
        for (method, m), (mean, se) in zip(paper_columns(), cells, strict=True)
    ]
    return pd.DataFrame(rows, columns=["dataset", "method", "M", "mean", "se"])


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
