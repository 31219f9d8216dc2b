"""Reader of the airline delay data (STUDY.md, experiment 3; Hensman et al. 2013).

US flights of January-April 2008 from the ASA Data Expo 2009 table ``2008.csv.bz2``, joined with its
``plane-data.csv`` for the plane's age. The flight table (about 7M rows, 29 columns) is streamed in
chunks, keeping only the needed columns of the needed months, so memory stays well under 2 GB.
"""

from pathlib import Path

import numpy as np
import pandas as pd

from gpstudy.data.table import DataError, Table, checked_table

YEAR = 2008
MONTHS = (1, 2, 3, 4)  # January-April
FLIGHT_COLUMNS = ["Month", "DayofMonth", "DayOfWeek", "DepTime", "ArrTime", "AirTime", "Distance",
                  "ArrDelay", "TailNum"]
FEATURES = ["Month", "DayofMonth", "DayOfWeek", "PlaneAge", "AirTime", "Distance", "ArrTime", "DepTime"]
TARGET = "ArrDelay"  # minutes
CHUNK_ROWS = 500_000  # rows of the flight table parsed at a time


def minutes_since_midnight(hhmm: pd.Series) -> pd.Series:
    """Clock times written as hhmm (e.g. 1435) -> minutes since midnight (875)."""
    return (hhmm // 100) * 60 + hhmm % 100


def plane_ages(path: Path) -> pd.Series:
    """Age in years in 2008 of each plane, by tail number; planes without a valid year are left out."""
    try:
        planes = pd.read_csv(path, usecols=["tailnum", "year"], dtype=str)
    except Exception as error:
        raise DataError(f"{path}: cannot be read as the plane table: {error}") from error
    year = pd.to_numeric(planes["year"], errors="coerce")
    valid = (year > 1900) & (year <= YEAR)
    return pd.Series((YEAR - year[valid]).to_numpy(), index=planes["tailnum"][valid].to_numpy(),
                     name="PlaneAge").groupby(level=0).first()


def read_airline(raw: Path, chunk_rows: int = CHUNK_ROWS) -> Table:
    """January-April 2008 flights, 8 features and arrival delay; rows with a missing value dropped."""
    flights_path = raw / "2008.csv.bz2"
    ages = plane_ages(raw / "plane-data.csv")
    kept = []
    try:
        chunks = pd.read_csv(flights_path, usecols=FLIGHT_COLUMNS, chunksize=chunk_rows,
                             dtype={"TailNum": str}, na_values=["NA"])
        for chunk in chunks:
            chunk = chunk[chunk["Month"].isin(MONTHS)]
            chunk = chunk.assign(PlaneAge=chunk["TailNum"].map(ages),
                                 DepTime=minutes_since_midnight(chunk["DepTime"]),
                                 ArrTime=minutes_since_midnight(chunk["ArrTime"]))
            kept.append(chunk[FEATURES + [TARGET]].dropna().astype(np.float64))
    except Exception as error:
        raise DataError(f"{flights_path}: cannot be read as the flight table: {error}") from error
    if not kept or sum(len(k) for k in kept) == 0:
        raise DataError(f"{flights_path}: no complete flight of {YEAR} months {MONTHS}")
    return checked_table(pd.concat(kept, ignore_index=True), target=TARGET, source=flights_path,
                         features=FEATURES)
