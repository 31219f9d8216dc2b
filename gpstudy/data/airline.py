"""Reader of the airline delay data (STUDY.md, experiment 3; Hensman et al. 2013).

US flights of the given months of 2008 (``dataset_options.airline.months``: January-April, the
paper's words) from the ASA Data Expo 2009 table ``2008.csv.bz2`` (29 columns, about 7M rows),
inner-joined on the tail number with its ``plane-data.csv`` for the plane's age. Rows as in Hensman
et al. (2013): cancelled and diverted flights dropped, planes whose build year is 0, missing or after
2008 dropped, then every row with a missing or non-finite value. Eight inputs (``FEATURES``; clock
times hhmm as minutes since midnight), target the arrival delay in minutes. The rows kept after each
filter (``FILTERS``) are logged, to set beside the counts the papers give (docs/datasets.md).

The flight table is streamed in chunks of ``chunk_rows`` rows; of each chunk only the kept rows'
nine numbers stay (float32, exact for these integers), so memory is bounded by the kept rows
(about 36 bytes each) plus one chunk, far below 2 GB for the whole year (``benchmarks/airline_data.py``).
Rows stay in file order, which the ``first_rows`` split protocol (the authors' code) relies on.
"""

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from gpstudy.data.dataset import DataError, Table

log = logging.getLogger(__name__)

YEAR = 2008
FEATURES = ["Month", "DayofMonth", "DayOfWeek", "PlaneAge", "AirTime", "Distance", "ArrTime", "DepTime"]
TARGET = "ArrDelay"  # minutes
COLUMNS = [  # the 29 columns of 2008.csv, in its order, as the synthetic tables of the tests and benchmarks write them
    "Year",
    "Month",
    "DayofMonth",
    "DayOfWeek",
    "DepTime",
    "CRSDepTime",
    "ArrTime",
    "CRSArrTime",
    "UniqueCarrier",
    "FlightNum",
    "TailNum",
    "ActualElapsedTime",
    "CRSElapsedTime",
    "AirTime",
    "ArrDelay",
    "DepDelay",
    "Origin",
    "Dest",
    "Distance",
    "TaxiIn",
    "TaxiOut",
    "Cancelled",
    "CancellationCode",
    "Diverted",
    "CarrierDelay",
    "WeatherDelay",
    "NASDelay",
    "SecurityDelay",
    "LateAircraftDelay",
]
NUMBERS = [
    "Month",
    "DayofMonth",
    "DayOfWeek",
    "DepTime",
    "ArrTime",
    "AirTime",
    "Distance",
    "ArrDelay",
    "Cancelled",
    "Diverted",
]  # the flight table's columns read as numbers (NA: missing)
TAIL = "TailNum"  # the join key, "tailnum" in the plane table
CHUNK_ROWS = 250_000  # rows of the flight table parsed at a time
FILTERS = ("read", "months", "not cancelled", "not diverted", "plane join", "no missing value")  # in order


def minutes_since_midnight(hhmm: pd.Series) -> pd.Series:
    """Clock times written hhmm -> minutes since midnight: 1435 -> 875, 5 (00:05) -> 5, and 2400 (the
    table's midnight at the end of a day) -> 1440, as the authors' code and Hensman et al. compute it."""
    return (hhmm // 100) * 60 + hhmm % 100


def plane_ages(path: Path) -> pd.Series:
    """Age in 2008 (2008 - build year) of each plane, by tail number; planes of build year 0, missing,
    non-numeric or after 2008 are left out, and a tail number listed twice keeps its first dated row."""
    try:
        planes = pd.read_csv(path, usecols=["tailnum", "year"], dtype=str)
    except Exception as error:  # pandas raises parser, value and OS errors alike
        raise DataError(f"{path}: cannot be read as the plane table: {error}") from error
    year = pd.to_numeric(planes["year"].str.strip(), errors="coerce")
    valid = (year > 0) & (year <= YEAR)
    ages = pd.Series((YEAR - year[valid]).to_numpy(np.float32), index=planes["tailnum"][valid].str.strip().to_numpy())
    return ages[~ages.index.duplicated()].rename("PlaneAge")


def kept_rows(chunk: pd.DataFrame, ages: pd.Series, months: Sequence[int]) -> tuple[np.ndarray, list[int]]:
    """The rows of a chunk of the flight table that enter the data set, as ``[n, 9]`` float32 (the
    features in ``FEATURES`` order, then the target), and how many rows are left after each of ``FILTERS``."""
    left, kept = [len(chunk)], np.ones(len(chunk), bool)
    for keep in (chunk["Month"].isin(months), chunk["Cancelled"] == 0, chunk["Diverted"] == 0):
        kept &= keep.to_numpy()
        left.append(int(kept.sum()))
    chunk = chunk[kept]
    chunk = chunk.assign(PlaneAge=chunk[TAIL].str.strip().map(ages))  # NaN: no such plane (inner join)
    chunk = chunk[chunk["PlaneAge"].notna()]
    left.append(len(chunk))
    chunk = chunk.assign(
        DepTime=minutes_since_midnight(chunk["DepTime"]), ArrTime=minutes_since_midnight(chunk["ArrTime"])
    )
    rows = chunk[FEATURES + [TARGET]].to_numpy(np.float32)
    rows = rows[np.isfinite(rows).all(axis=1)]
    left.append(len(rows))
    return rows, left


def read_airline(raw: Path, months: Sequence[int], chunk_rows: int = CHUNK_ROWS) -> Table:
    """The flights of ``months`` (numbers 1-12) of 2008 in ``raw/2008.csv.bz2`` joined with
    ``raw/plane-data.csv``: the 8 features and the arrival delay, rows in file order. Logs the rows
    left after each of ``FILTERS``.

    Raises:
        DataError: a file that cannot be read (a missing column, a non-number where a number belongs),
            or no flight left.
    """
    flights_path, months = raw / "2008.csv.bz2", tuple(months)
    ages = plane_ages(raw / "plane-data.csv")
    kept, left = [], np.zeros(len(FILTERS), np.int64)
    try:
        chunks = pd.read_csv(
            flights_path,
            usecols=NUMBERS + [TAIL],
            chunksize=chunk_rows,
            dtype={**dict.fromkeys(NUMBERS, np.float32), TAIL: str},
        )
        for chunk in chunks:
            rows, counts = kept_rows(chunk, ages, months)
            kept.append(rows)
            left += counts
    except Exception as error:  # pandas raises parser, value, bz2 and OS errors alike
        raise DataError(f"{flights_path}: cannot be read as the flight table: {error}") from error
    for name, count in zip(FILTERS, left):
        log.info("%s: %s rows after %s (months %s)", flights_path, f"{count:,}", name, months)
    rows = np.concatenate(kept) if kept else np.empty((0, len(FEATURES) + 1), np.float32)
    if not len(rows):
        raise DataError(f"{flights_path}: no complete flight of {YEAR} months {months} with a dated plane")
    return Table(x=rows[:, :-1].astype(np.float64), y=rows[:, -1].astype(np.float64))
