"""Train/test splits and standardization (STUDY.md, experiment 2), one compact ``.npz`` per split.

Protocols:
  * ``random``: split s takes a ``RandomState(seed + s)`` permutation of the rows; the first
    ``train_size`` (default int(0.9 N)) are the training set, the next ``test_size`` (default: all
    the rest) the test set. This is GPNet's protocol (its code's seed is 0).
  * ``index_files``: the standard split files index_train_s / index_test_s of Hernandez-Lobato &
    Adams (2015), indexing the rows of their ``data.txt``.
  * ``given``: the data set's own train/test partition (MNIST, CIFAR10); one split only. With
    ``train_size`` / ``test_size``, a ``RandomState(seed)`` subset of each part (a quick run).
  * ``first_rows``: the table's first ``train_size`` rows (default int(0.9 N)) in file order are the
    training set, the next ``test_size`` (default: all the rest) the test set, unshuffled; one split
    only. The GPNet authors' airline code (first 70K rows, then 10K).
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpstudy.data.dataset import DataError, Table
from gpstudy.data.registry import PROTOCOLS, Dataset
from gpstudy.data.uci import read_benchmark_table, read_index_split
from gpstudy.io import REMAKE, UnreadableFileError, atomic_path

SIZED_PROTOCOLS = ("random", "first_rows")  # the protocols whose sizes split the whole table (split_sizes)
TRAIN_FRACTION = 0.9  # random and first_rows protocols: int(0.9 N) training rows unless train_size is set
# The fewest rows a split may have. Training: x and y are standardized by the training std, whose relative
# standard error is about 1 / sqrt(2 (n - 1)): 71% from 2 rows, 24% from 10. Test: 2 rows make a metric a
# mean over rows, not one row's error (one row's error rate is 0 or 1). With the default fraction a data
# set needs 12 rows (10 + 2); a 3-row file would train on 2 rows and test on 1.
MIN_TRAIN_ROWS = 10
MIN_TEST_ROWS = 2


@dataclass(frozen=True)
class Split:
    """One standardized train/test split; statistics kept to return to original units."""

    x_train: np.ndarray  # [N, D]
    y_train: np.ndarray  # [N]
    x_test: np.ndarray  # [N_test, D]
    y_test: np.ndarray  # [N_test]
    x_mean: np.ndarray  # [D] training mean of x (zeros when not standardized)
    x_std: np.ndarray  # [D] training std of x (ones when not standardized)
    y_mean: float  # training mean of y (0 when not standardized)
    y_std: float  # training std of y (1 when not standardized)
    info: dict = field(default_factory=dict)  # dataset, split, protocol, sizes
    x_plot: np.ndarray | None = None  # [P, D] standardized inputs to draw predictions at, if any

    def original_x(self, x: np.ndarray) -> np.ndarray:
        """Standardized inputs ``[n, D]`` back in the data's units."""
        return x * self.x_std + self.x_mean

    def original_y(self, y: np.ndarray) -> np.ndarray:
        """Standardized targets ``[n]`` back in the data's units."""
        return y * self.y_std + self.y_mean


def read_table(dataset: Dataset, protocol: str, raw: Path) -> Table:
    """Read a data set's table for a protocol and check its shape against the registry."""
    table = read_benchmark_table(raw) if protocol == "index_files" else dataset.read(raw)
    if dataset.shape is not None and table.x.shape != dataset.shape:
        raise DataError(f"{raw}: {dataset.name} should have shape {dataset.shape}, read {table.x.shape}")
    return table


def split_rows(
    table: Table,
    protocol: str,
    split: int,
    *,
    seed: int = 0,
    train_size: int | None = None,
    test_size: int | None = None,
    raw: Path | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Row indices (train, test) of split ``split`` under ``protocol``."""
    n = len(table.y)
    if protocol == "random":
        n_train, n_test = split_sizes(n, train_size, test_size, protocol)
        order = np.random.RandomState(seed + split).permutation(n)
        return order[:n_train], order[n_train : n_train + n_test]
    if protocol == "first_rows":
        if split != 0:
            raise ValueError(f"the 'first_rows' protocol has only split 0, not {split}")
        n_train, n_test = split_sizes(n, train_size, test_size, protocol)
        return np.arange(n_train), np.arange(n_train, n_train + n_test)
    if protocol == "index_files":
        return read_index_split(raw, split, n)
    if protocol == "given":
        if table.test_mask is None:
            raise ValueError("the 'given' protocol needs a data set with its own test set")
        if split != 0:
            raise ValueError(f"the 'given' protocol has only split 0, not {split}")
        rng = np.random.RandomState(seed)
        return tuple(
            _subset(np.flatnonzero(mask), size, rng, part)
            for mask, size, part in ((~table.test_mask, train_size, "training"), (table.test_mask, test_size, "test"))
        )
    raise ValueError(f"unknown split protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")


def split_sizes(n: int, train_size: int | None, test_size: int | None, protocol: str) -> tuple[int, int]:
    """Training and test rows of a split of ``n`` rows under a protocol of ``SIZED_PROTOCOLS``: by default
    int(0.9 n) and the rest (ValueError when they do not fit)."""
    n_train = int(TRAIN_FRACTION * n) if train_size is None else train_size
    n_test = n - n_train if test_size is None else test_size
    if n_train < 1 or n_test < 1 or n_train + n_test > n:
        raise ValueError(f"{protocol} split of {n} rows into {n_train} train + {n_test} test is impossible")
    return n_train, n_test


def _subset(rows: np.ndarray, size: int | None, rng: np.random.RandomState, part: str) -> np.ndarray:
    """``size`` of ``rows`` drawn without replacement, in their order (all of them when ``size`` is None)."""
    if size is None:
        return rows
    if not 1 <= size <= len(rows):
        raise ValueError(f"{size} {part} rows asked of the data set's {len(rows)}")
    return np.sort(rng.choice(rows, size, replace=False))


def make_split(
    table: Table,
    train: np.ndarray,
    test: np.ndarray,
    standardize: bool,
    info: dict,
    *,
    standardize_inputs: bool = False,
) -> Split:
    """Select the rows and standardize x and y (``standardize``: regression) or x alone (``standardize_inputs``:
    a classification data set's option, e.g. the AutoGP authors' per-pixel MNIST) with training statistics
    only: each feature (pixel) to zero mean and unit variance on the training rows, a constant one only
    centred (the authors' code too), the test rows by the training mean and std; x keeps its dtype."""
    if np.intersect1d(train, test).size:
        raise ValueError(f"train and test rows overlap ({info})")
    if len(train) < MIN_TRAIN_ROWS or len(test) < MIN_TEST_ROWS:
        where = ", ".join(f"{key} {info[key]!r}" for key in ("dataset", "protocol", "split") if key in info)
        raise DataError(
            f"{where or 'a split'}: {len(train)} training and {len(test)} test rows of the table's "
            f"{len(table.y)}; a split needs at least {MIN_TRAIN_ROWS} training and {MIN_TEST_ROWS} test "
            "rows (a larger file, or train_size / test_size under the data set's dataset_options)"
        )
    x_train, x_test = table.x[train], table.x[test]
    y_train, y_test = table.y[train], table.y[test]
    d = table.x.shape[1]
    x_mean, x_std, y_mean, y_std = np.zeros(d), np.ones(d), 0.0, 1.0
    with np.errstate(over="ignore", invalid="ignore"):  # a value past float64 is refused below, by its column
        if standardize or standardize_inputs:
            x_mean, x_std = moments(x_train)
            x_train, x_test = (x_train - x_mean) / x_std, (x_test - x_mean) / x_std
        if standardize:
            y_mean, y_std = (float(value) for value in moments(y_train))
            y_train, y_test = (y_train - y_mean) / y_std, (y_test - y_mean) / y_std
        x_plot = None if table.x_plot is None else (table.x_plot - x_mean) / x_std
    info = {**info, "n_train": int(len(train)), "n_test": int(len(test))}
    split = Split(x_train, y_train, x_test, y_test, x_mean, x_std, y_mean, y_std, info, x_plot)
    problem = non_finite(split)
    if problem:
        where = ", ".join(f"{key} {info[key]!r}" for key in ("dataset", "protocol", "split") if key in info)
        raise DataError(
            f"{where or 'a split'}, standardized by its training rows: {problem} (the column's values "
            "span more than float64 holds; rescale it in the file)"
        )
    return split


def save_split(path: str | Path, split: Split) -> None:
    """Write a split as one compressed ``.npz``, atomically."""
    optional = {} if split.x_plot is None else {"x_plot": split.x_plot}
    with atomic_path(path, suffix=".npz") as tmp:
        np.savez_compressed(
            tmp,
            x_train=split.x_train,
            y_train=split.y_train,
            x_test=split.x_test,
            y_test=split.y_test,
            x_mean=split.x_mean,
            x_std=split.x_std,
            y_mean=split.y_mean,
            y_std=split.y_std,
            info=json.dumps(split.info),
            **optional,
        )


def load_split(path: str | Path) -> Split:
    """Read a split written by :func:`save_split`.

    Raises:
        UnreadableFileError: the file is not a whole split (truncated, edited).
        DataError: it holds a missing or infinite value (named with its array and row).
    """
    try:
        with np.load(path) as data:
            split = Split(
                x_train=data["x_train"],
                y_train=data["y_train"],
                x_test=data["x_test"],
                y_test=data["y_test"],
                x_mean=data["x_mean"],
                x_std=data["x_std"],
                y_mean=float(data["y_mean"]),
                y_std=float(data["y_std"]),
                info=json.loads(str(data["info"])),
                x_plot=data["x_plot"] if "x_plot" in data else None,
            )
    except Exception as error:  # numpy raises zip, pickle, key and value errors alike
        raise UnreadableFileError(f"{path}: not a split ({type(error).__name__}: {error}); {REMAKE}") from error
    problem = non_finite(split)
    if problem:
        raise DataError(f"{path}: {problem}")
    return split


def non_finite(split: Split) -> str | None:
    """Where a split holds a missing or infinite value ("... in x_train, the first in row 7, feature column 2"),
    its data or its standardization's statistics; None if nowhere."""
    for name in ("x_train", "y_train", "x_test", "y_test"):
        values = getattr(split, name)
        bad = ~np.isfinite(values)
        if bad.any():
            row = int(np.flatnonzero(bad.reshape(len(values), -1).any(axis=1))[0])
            column = f", feature column {int(np.flatnonzero(bad[row])[0])}" if values.ndim == 2 else ""
            return f"{int(bad.sum())} missing or infinite value(s) in {name}, the first in row {row}{column}"
    for name in ("x_mean", "x_std", "y_mean", "y_std"):
        bad = ~np.isfinite(np.atleast_1d(getattr(split, name)))
        if bad.any():
            column = f" of feature column {int(np.flatnonzero(bad)[0])}" if name.startswith("x") else ""
            return f"{name}{column} is not finite"
    return None


def moments(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mean and standard deviation of each column of ``values`` ``[n, ...]`` (1 for a constant column),
    in the values' dtype, computed on the column divided by a power of two near its largest |value|: the
    squares never overflow (values near 1e154 made the variance inf), and for every other column the
    result is bit for bit the unscaled one (a power-of-two scaling rounds alike)."""
    largest = np.abs(values).max(0)
    _, exponent = np.frexp(largest)
    scale = np.ldexp(np.ones_like(largest), exponent - 1)  # largest / scale in [1, 2): scale is finite
    scaled = values / scale
    return scaled.mean(0) * scale, _nonzero(scaled.std(0) * scale)


def _nonzero(std):
    """Replace a zero standard deviation (a constant column) by 1."""
    return np.where(std > 0, std, 1.0)
