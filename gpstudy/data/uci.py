"""Readers of the UCI regression tables and the Snelson toy data (STUDY.md, experiments 1 and 2).

Each reader takes the data set's raw folder and returns a :class:`gpstudy.data.Table` in the file's row order,
which the ``random`` split protocol permutes (so the order must be the one GPNet's code read).
"""

import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from gpstudy.data.dataset import DataError, Table, checked_table, read_frame


def read_boston(raw: Path) -> Table:
    """Boston housing: 13 features, target MEDV (last column)."""
    source = raw / "original" / "housing.data"
    frame = read_frame(pd.read_csv, source, sep=r"\s+", header=None)
    return checked_table(frame, target=13, source=source)


def read_concrete(raw: Path) -> Table:
    """Concrete: first sheet of the workbook, 8 features, target compressive strength (last column)."""
    source = raw / "original" / "Concrete_Data.xls"
    frame = read_frame(pd.read_excel, source, sheet_name=0, engine="calamine")
    return checked_table(frame, target=frame.columns[-1], source=source)


def read_energy(raw: Path) -> Table:
    """Energy efficiency: X1..X8, target heating load Y1; cooling load Y2 dropped."""
    source = raw / "original" / "ENB2012_data.xlsx"
    frame = (
        read_frame(pd.read_excel, source, sheet_name=0, engine="calamine").dropna(how="all").dropna(axis=1, how="all")
    )
    return checked_table(frame, target="Y1", source=source, features=[f"X{i}" for i in range(1, 9)])


def read_kin8nm(raw: Path) -> Table:
    """Kin8nm: 8 features, target y (last column); no header."""
    source = raw / "original" / "kin8nm.csv"
    frame = read_frame(pd.read_csv, source, header=None)
    return checked_table(frame, target=8, source=source)


def read_power(raw: Path) -> Table:
    """Combined cycle power plant: the workbook's FIRST sheet (GPNet's row order), target PE."""
    source = raw / "original" / "Folds5x2_pp.xlsx"
    frame = read_frame(pd.read_excel, source, sheet_name=0, engine="calamine")
    return checked_table(frame, target="PE", source=source, features=["AT", "V", "AP", "RH"])


def read_protein(raw: Path) -> Table:
    """Protein tertiary structure (CASP): features F1..F9, target RMSD (the first column)."""
    source = raw / "original" / "CASP.csv"
    frame = read_frame(pd.read_csv, source)
    return checked_table(frame, target="RMSD", source=source, features=[f"F{i}" for i in range(1, 10)])


def read_wine_red(raw: Path) -> Table:
    """Red wine quality: 11 features, target quality; semicolon-separated."""
    source = raw / "original" / "winequality-red.csv"
    frame = read_frame(pd.read_csv, source, sep=";")
    return checked_table(frame, target="quality", source=source)


def read_snelson(raw: Path) -> Table:
    """Snelson's 1-D data: 200 training inputs and outputs; its test grid (no outputs) is for plots."""
    inputs = read_frame(pd.read_csv, raw / "train_inputs", header=None, sep=r"\s+", names=["x"])
    outputs = read_frame(pd.read_csv, raw / "train_outputs", header=None, sep=r"\s+", names=["y"])
    grid = read_frame(pd.read_csv, raw / "test_inputs", header=None, sep=r"\s+", names=["x"])
    if len(inputs) != len(outputs):
        raise ValueError(f"{raw}: {len(inputs)} train_inputs but {len(outputs)} train_outputs")
    table = checked_table(pd.concat([inputs, outputs], axis=1), target="y", source=raw / "train_*")
    return replace(table, x_plot=grid.to_numpy(dtype=np.float64))


def read_benchmark_table(raw: Path) -> Table:
    """The Hernandez-Lobato & Adams ``data.txt`` that the index_files protocol indexes into.

    Whitespace-separated, no header; the target is the last column (as every UCI set's
    ``index_target.txt`` says).
    """
    source = raw / "data.txt"
    frame = read_frame(pd.read_csv, source, sep=r"\s+", header=None)
    return checked_table(frame, target=frame.columns[-1], source=source)


def read_index_split(raw: Path, split: int, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows (0-based, into ``data.txt`` of ``n_rows`` rows) of the standard split ``split``: (train, test)."""
    return tuple(read_index_file(raw / f"index_{part}_{split}.txt", split, n_rows) for part in ("train", "test"))


def read_index_file(path: Path, split: int, n_rows: int) -> np.ndarray:
    """The row indices of one index file: integers in [0, n_rows), at least one, none twice.

    Raises:
        FileNotFoundError: the file is missing.
        DataError: it holds anything else (the message names the file and the first bad entry).
    """
    if not path.exists():
        raise FileNotFoundError(f"{path}: the index_files protocol has no split {split} here")
    try:
        with warnings.catch_warnings():  # an empty file is reported below, as an error
            warnings.simplefilter("ignore", UserWarning)
            rows = np.loadtxt(path, dtype=np.int64, ndmin=1)
    except ValueError as error:
        raise DataError(f"{path}: not a list of row indices ({error})") from error
    if rows.size == 0:
        raise DataError(f"{path}: no row indices")
    outside = np.flatnonzero((rows < 0) | (rows >= n_rows))
    if outside.size:
        raise DataError(f"{path}: line {outside[0] + 1} holds {rows[outside[0]]}, not a row of data.txt's {n_rows}")
    unique, counts = np.unique(rows, return_counts=True)
    if (counts > 1).any():
        raise DataError(f"{path}: row {unique[counts > 1][0]} is listed {counts[counts > 1][0]} times")
    return rows
