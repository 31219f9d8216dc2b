"""Wall time and peak resident memory of the airline data stage on a synthetic 2008 table (issue 15).

    python benchmarks/airline_data.py [--rows 7009728] [--workdir DIR] [--train-size N --test-size N]
                                      [--months 1 ... 12]

Writes, chunk by chunk, a synthetic ``2008.csv.bz2`` of the real ASA Data Expo 2009 schema (its 29
columns in order, ``--rows`` flights through 2008 in month order as the real file, realistic ranges:
hhmm clock times up to 2400, about 2% cancelled and 0.25% diverted flights with the real file's
missing values, missing tail numbers, tail numbers the plane table lacks) and its ``plane-data.csv``
(planes of build year 0000, None, or no information) into ``DIR/mirror/airline/``. Then runs the data
stage in a child process, as the pipeline does: fetch from that mirror (copy and sha256), read the
table of config.yaml's months (or ``--months``), write one random split (700K/100K at the real size;
scaled with ``--rows`` otherwise). The reader's log of the rows left after each filter is printed.
Prints the stage's wall time and the child's peak resident memory (its rusage from ``os.wait4``),
and the generator's own peak (it runs in a child too).

On Linux a child's ``ru_maxrss`` counts its parent's peak at the fork, so the parent here imports no
numpy or pandas and only starts the two children: its own peak (printed) bounds what that adds.
"""

from __future__ import annotations  # numpy's types in annotations, numpy imported in the children only

import argparse
import bz2
import logging
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported in the children only
    import numpy as np
    import pandas as pd

REAL_ROWS = 7_009_728  # flights in the real 2008.csv
PAPER_SIZES = (700_000, 100_000)  # the paper's random train/test draw, at the real size
CHUNK_ROWS = 250_000  # rows generated and written at a time
CARRIERS = [
    "WN",
    "AA",
    "OO",
    "MQ",
    "US",
    "DL",
    "UA",
    "XE",
    "NW",
    "CO",
    "EV",
    "9E",
    "FL",
    "YV",
    "OH",
    "B6",
    "AS",
    "F9",
    "HA",
    "AQ",
]
AIRPORTS = [
    "ATL",
    "ORD",
    "DFW",
    "DEN",
    "LAX",
    "PHX",
    "IAH",
    "LAS",
    "DTW",
    "SFO",
    "SLC",
    "EWR",
    "MCO",
    "MSP",
    "CLT",
    "JFK",
    "BOS",
    "SEA",
    "PHL",
    "LGA",
]
PLANES = 5400  # tail numbers flying (the real table: about 5,400)
CANCELLED, DIVERTED, NO_TAIL = 0.02, 0.0025, 0.005  # fractions of flights


def tail_numbers(rng: np.random.Generator) -> np.ndarray:
    """``PLANES`` distinct tail numbers like N712SW."""
    import numpy as np

    digits = rng.choice(np.arange(100, 100_000), PLANES, replace=False).astype(str)
    suffix = np.array(["SW", "AA", "UA", "DL", "XJ", "CA", "MQ", "US", "JB", "AS"])[rng.integers(0, 10, PLANES)]
    return np.char.add(np.char.add("N", digits), suffix)


def plane_table(tails: np.ndarray, rng: np.random.Generator) -> str:
    """plane-data.csv: 87% of the flying tails with a build year 1956-2008, 3% of year None, 3% of year
    0000 (half of these listed by the tail number alone), 7% not listed."""
    lines = ["tailnum,type,manufacturer,issue_date,model,status,aircraft_type,engine_type,year"]
    for tail, kind in zip(tails, rng.choice(4, len(tails), p=[0.87, 0.03, 0.03, 0.07])):
        if kind == 3:  # not listed
            continue
        year = {0: str(int(rng.integers(1956, 2009))), 1: "None", 2: "0000"}.get(kind)
        if kind == 2 and rng.random() < 0.5:
            lines.append(tail)  # the tail number alone
        else:
            lines.append(
                f"{tail},Corporation,BOEING,05/03/{year},737-7H4,Valid,Fixed Wing Multi-Engine,Turbo-Fan,{year}"
            )
    return "\n".join(lines) + "\n"


def hhmm(minutes: np.ndarray) -> np.ndarray:
    """Minutes since midnight (any integer) -> the table's hhmm clock time, midnight written 2400."""
    import numpy as np

    minutes = minutes % 1440
    clock = (minutes // 60) * 100 + minutes % 60
    return np.where(clock == 0, 2400, clock)


def integers(values: np.ndarray, missing: np.ndarray | None = None) -> pd.array:
    """A nullable integer column, NA where ``missing``."""
    import numpy as np
    import pandas as pd

    column = pd.array(values.astype(np.int64), dtype="Int64")
    if missing is not None:
        column[missing] = pd.NA
    return column


def flights(first: int, n: int, total: int, tails: np.ndarray, rng: np.random.Generator) -> pd.DataFrame:
    """Rows ``first .. first + n - 1`` of a ``total``-row table of 2008, in month order."""
    import numpy as np
    import pandas as pd

    from gpstudy.data.airline import COLUMNS

    day_of_year = (np.arange(first, first + n) * 366) // total  # 2008 is a leap year
    dates = np.datetime64("2008-01-01") + day_of_year.astype("timedelta64[D]")
    months = dates.astype("datetime64[M]").astype(int) % 12 + 1
    days = (dates - dates.astype("datetime64[M]")).astype(int) + 1
    weekdays = (dates.astype("datetime64[D]").view("int64") - 4) % 7 + 1  # 1970-01-05 was a Monday (1)
    distance = np.clip(rng.lognormal(6.4, 0.6, n), 24, 4962).astype(np.int64)
    crs_elapsed = (distance / 8 + 25 + rng.integers(0, 20, n)).astype(np.int64)
    crs_dep = rng.integers(5 * 60, 24 * 60, n)
    dep_delay = np.where(rng.random(n) < 0.25, rng.exponential(40, n), rng.normal(-2, 6, n)).round().astype(np.int64)
    taxi_in, taxi_out = rng.integers(1, 30, n), rng.integers(5, 45, n)
    air = np.maximum(distance / 8 + rng.normal(5, 8, n), 10).astype(np.int64)
    elapsed = air + taxi_in + taxi_out
    arr_delay = dep_delay + elapsed - crs_elapsed
    cancelled = rng.random(n) < CANCELLED
    diverted = ~cancelled & (rng.random(n) < DIVERTED / (1 - CANCELLED))
    gone = cancelled | diverted  # no arrival
    late = ~gone & (arr_delay >= 15)  # the five delay causes are given for late flights only
    causes = rng.dirichlet(np.ones(5), n) * np.maximum(arr_delay, 0)[:, None]
    causes = np.floor(causes).astype(np.int64)
    causes[:, 0] += np.maximum(arr_delay, 0) - causes.sum(1)
    tail = tails[rng.integers(0, len(tails), n)].astype(object)
    tail[rng.random(n) < NO_TAIL] = None
    frame = pd.DataFrame(
        {
            "Year": 2008,
            "Month": months,
            "DayofMonth": days,
            "DayOfWeek": weekdays,
            "DepTime": integers(hhmm(crs_dep + dep_delay), cancelled),
            "CRSDepTime": hhmm(crs_dep),
            "ArrTime": integers(hhmm(crs_dep + dep_delay + elapsed), gone),
            "CRSArrTime": hhmm(crs_dep + crs_elapsed),
            "UniqueCarrier": np.array(CARRIERS)[rng.integers(0, len(CARRIERS), n)],
            "FlightNum": rng.integers(1, 7830, n),
            "TailNum": tail,
            "ActualElapsedTime": integers(elapsed, gone),
            "CRSElapsedTime": crs_elapsed,
            "AirTime": integers(air, gone),
            "ArrDelay": integers(arr_delay, gone),
            "DepDelay": integers(dep_delay, cancelled),
            "Origin": np.array(AIRPORTS)[rng.integers(0, len(AIRPORTS), n)],
            "Dest": np.array(AIRPORTS)[rng.integers(0, len(AIRPORTS), n)],
            "Distance": distance,
            "TaxiIn": integers(taxi_in, gone),
            "TaxiOut": integers(taxi_out, cancelled),
            "Cancelled": cancelled.astype(int),
            "CancellationCode": np.where(cancelled, "B", ""),
            "Diverted": diverted.astype(int),
            **{name: integers(causes[:, k], ~late) for k, name in enumerate(COLUMNS[-5:])},
        }
    )
    return frame[COLUMNS]


def write_synthetic(folder: Path, rows: int, seed: int = 0) -> None:
    """``folder/2008.csv.bz2`` of ``rows`` flights and ``folder/plane-data.csv``, in chunks (run in a child)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    tails = tail_numbers(rng)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plane-data.csv").write_text(plane_table(tails, rng))
    with bz2.open(folder / "2008.csv.bz2", "wt", compresslevel=9, newline="") as out:
        for first in range(0, rows, CHUNK_ROWS):
            chunk = flights(first, min(CHUNK_ROWS, rows - first), rows, tails, rng)
            chunk.to_csv(out, index=False, header=first == 0, na_rep="NA")


def stage(workdir: Path, train_size: int, test_size: int, months: list[int] | None) -> None:
    """The data stage of the pipeline on ``workdir/mirror``: fetch, table (config.yaml's months unless
    ``months``), split 0 (run in the child)."""
    from gpstudy.data import load_table, prepare_split, prepare_table
    from gpstudy.data.prepare import fetch_dataset
    from gpstudy.study import DEFAULT_CONFIG, dataset_of, load_config

    logging.basicConfig(level=logging.INFO, format="  %(message)s")
    config = load_config(
        DEFAULT_CONFIG, overrides={"dataset_options": {"airline": {"months": months}}} if months else None
    )
    airline, manifest = dataset_of(config, "airline"), workdir / "raw/airline/files_random.json"
    times = {"start": time.perf_counter()}
    fetch_dataset(airline, "random", manifest.parent, manifest, mirror=str(workdir / "mirror"))
    times["fetch"] = time.perf_counter()
    prepare_table(airline, "random", manifest, workdir / "airline_random.npz")
    times["table"] = time.perf_counter()
    prepare_split(
        airline,
        "random",
        0,
        workdir / "airline_random.npz",
        manifest,
        workdir / "split0.npz",
        train_size=train_size,
        test_size=test_size,
    )
    times["split"] = time.perf_counter()
    steps = list(times)
    print(
        "  ".join(f"{step} {times[step] - times[prev]:.1f} s" for prev, step in zip(steps, steps[1:])),
        f" table rows {len(load_table(workdir / 'airline_random.npz').y):,}",
        flush=True,
    )


def child(*args: str) -> tuple[float, float]:
    """Run this script with ``args`` in a child process: its wall seconds and peak RSS in GiB."""
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, __file__, *args])
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status):
        sys.exit(f"{' '.join(args[:1])} failed (exit {os.waitstatus_to_exitcode(status)})")
    return time.perf_counter() - start, usage.ru_maxrss / 2**20  # ru_maxrss: KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=REAL_ROWS, help="flights in the synthetic 2008 table")
    parser.add_argument("--workdir", type=Path, help="where the files go (default: a temporary folder, removed)")
    parser.add_argument("--train-size", type=int, help="training rows (default 700K at the real size, scaled)")
    parser.add_argument("--test-size", type=int, help="test rows (default 100K at the real size, scaled)")
    parser.add_argument("--months", type=int, nargs="+", help="months of 2008 read (default: config.yaml's)")
    parser.add_argument("--generate", action="store_true", help=argparse.SUPPRESS)  # a child: write the files
    parser.add_argument("--stage", action="store_true", help=argparse.SUPPRESS)  # a child: run the data stage
    args = parser.parse_args()
    train_size = args.train_size or round(PAPER_SIZES[0] * args.rows / REAL_ROWS)
    test_size = args.test_size or round(PAPER_SIZES[1] * args.rows / REAL_ROWS)
    if args.generate:
        write_synthetic(args.workdir / "mirror/airline", args.rows)
        return
    if args.stage:
        stage(args.workdir, train_size, test_size, args.months)
        return
    with tempfile.TemporaryDirectory(prefix="airline_data_") as scratch:
        workdir = str(args.workdir or scratch)
        seconds, peak = child("--generate", "--workdir", workdir, "--rows", str(args.rows))
        size = (Path(workdir) / "mirror/airline/2008.csv.bz2").stat().st_size
        print(
            f"generated {args.rows:,} flights in {seconds:.0f} s: 2008.csv.bz2 {size / 2**20:.0f} MiB; "
            f"generator peak RSS {peak:.2f} GiB",
            flush=True,
        )
        seconds, peak = child(
            "--stage",
            "--workdir",
            workdir,
            "--rows",
            str(args.rows),
            "--train-size",
            str(train_size),
            "--test-size",
            str(test_size),
            *(["--months", *map(str, args.months)] if args.months else []),
        )
        print(
            f"data stage (fetch from the mirror, table, one {train_size:,}/{test_size:,} random split) of "
            f"{args.rows:,} flights: wall {seconds:.1f} s, peak RSS {peak:.2f} GiB (ru_maxrss of the child; "
            f"the parent's own peak, which it may include: "
            f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10:.0f} MiB)"
        )


if __name__ == "__main__":
    main()
