"""The in-memory form of a data set: features, targets and (where the data set fixes one) its test rows."""

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from gpstudy.io import REMAKE, UnreadableFileError, atomic_path

OPTIONAL = ("test_mask", "x_plot")  # Table fields a data set may leave out
QUOTED_CHARS = 80  # the characters of a file's cell, header or label an error quotes (a file may hold no newline)


class DataError(ValueError):
    """A raw file that cannot be turned into a table; the message names the file and the row."""


@dataclass(frozen=True)
class Table:
    """A whole data set, rows in file order."""

    x: np.ndarray  # [N, D] features
    y: np.ndarray  # [N] targets (float for regression, int labels for classification)
    test_mask: np.ndarray | None = None  # [N] bool: the data set's own test rows, if it has them
    x_plot: np.ndarray | None = None  # [P, D] inputs to draw predictions at (Snelson's grid), if any
    target: str | None = None  # a user table's target column, as its file names it (not saved)
    classes: tuple[str, ...] | None = (
        None  # a user table's labels as its file has them, class c is classes[c] (not saved)
    )


def excerpt(value: object) -> str:
    """``value`` as an error quotes it: its repr, cut to its first :data:`QUOTED_CHARS` characters (and its
    length said) when longer, so that a file of one huge "cell" gives a message of one short line."""
    text = str(value)
    return repr(text) if len(text) <= QUOTED_CHARS else f"{text[:QUOTED_CHARS]!r}... ({len(text)} characters)"


def excerpts(values: list) -> str:
    """A list of a file's columns as an error quotes it: each :func:`excerpt`, the first 10 of them."""
    shown = ", ".join(map(excerpt, values[:10]))
    return f"[{shown}{f', ... ({len(values)} columns)' if len(values) > 10 else ''}]"


def checked_table(
    frame: pd.DataFrame,
    target: str | int,
    source: Path,
    features: list | None = None,
    test_mask: np.ndarray | None = None,
) -> Table:
    """Build a :class:`Table` from a data frame, refusing missing or non-finite values.

    Args:
        frame: one row per example, as read from ``source``.
        target: the column holding y.
        source: the file the frame came from (named in errors).
        features: the feature columns, in order; default every column but the target.
        test_mask: see :class:`Table`.

    Raises:
        DataError: no feature column, no row, or a missing, non-numeric or non-finite value; names the file,
            row and column.
    """
    features = [c for c in frame.columns if c != target] if features is None else features
    missing = [c for c in [*features, target] if c not in frame.columns]
    if missing:
        raise DataError(
            f"{source}: columns {excerpts(missing)} not found; the file has {excerpts(list(frame.columns))}"
        )
    if not features:  # a model of x needs an x (k-means, a kernel's lengthscales)
        raise DataError(f"{source}: no feature column beside the target {excerpt(target)}; a table needs at least one")
    if frame.empty:
        raise DataError(f"{source}: no data rows, only the columns {excerpts(list(frame.columns))}")
    numeric = numeric_frame(frame[[*features, target]], source)
    return Table(
        x=numeric[features].to_numpy(dtype=np.float64),
        y=numeric[target].to_numpy(dtype=np.float64),
        test_mask=test_mask,
    )


def numeric_frame(frame: pd.DataFrame, source: Path | str) -> pd.DataFrame:
    """``frame``'s values as numbers.

    Raises:
        DataError: a missing, non-numeric or non-finite value, naming ``source``, its row and column.
    """
    numeric = frame.apply(pd.to_numeric, errors="coerce")
    bad = ~np.isfinite(numeric.to_numpy(dtype=float))
    if bad.any():
        row, col = np.argwhere(bad)[0]
        column, value = numeric.columns[col], frame.iat[row, col]
        what = (
            "a missing value (an empty cell, NA or nan)"
            if pd.isna(value)
            else f"value {excerpt(value)} is non-numeric or non-finite"
        )
        raise DataError(f"{source}: data row {row} (0-based), column {excerpt(column)}: {what}")
    return numeric


def read_frame(reader, source: Path, **kwargs) -> pd.DataFrame:
    """Call a pandas reader on ``source``, turning its parse errors into :class:`DataError`."""
    try:
        return reader(source, **kwargs)
    except Exception as error:  # pandas, xlrd and openpyxl each raise their own kinds
        raise DataError(f"{source}: cannot be read as a table: {excerpt(error)}") from error


def save_table(path: str | Path, table: Table) -> None:
    """Write a table as one ``.npz``, atomically."""
    optional = {name: getattr(table, name) for name in OPTIONAL if getattr(table, name) is not None}
    with atomic_path(path, suffix=".npz") as tmp:
        np.savez(tmp, x=table.x, y=table.y, **optional)


def load_table(path: str | Path) -> Table:
    """Read a table written by :func:`save_table`.

    Raises:
        UnreadableFileError: the file is not a whole table (truncated, edited).
    """
    try:
        with np.load(path) as data:
            return Table(x=data["x"], y=data["y"], **{name: data[name] for name in OPTIONAL if name in data})
    except Exception as error:  # numpy raises zip, pickle, key and value errors alike
        raise UnreadableFileError(f"{path}: not a table ({type(error).__name__}: {error}); {REMAKE}") from error
