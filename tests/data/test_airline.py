"""The airline reader and its splits on a small bz2 file of the real ASA Data Expo 2009 schema: the join
with the plane table, the filters (months, cancelled, diverted, planes without a year, missing values)
and the rows each leaves (logged), the features (clock times as minutes), the ``months`` option, and the
random and first_rows split protocols."""

import bz2
import copy
import logging

import numpy as np
import pandas as pd
import pytest

from gpstudy.data import ChecksumError, DataError, FetchError, get_dataset, prepare_split, prepare_table
from gpstudy.data.airline import COLUMNS, FEATURES, FILTERS, minutes_since_midnight, plane_ages, read_airline
from gpstudy.data.fetch import sha256_of
from gpstudy.data.prepare import fetch_dataset
from gpstudy.data.split import load_split
from gpstudy.io import read_json
from gpstudy.study import ConfigError, data_stage_params, dataset_of, merge, validate_config

JANUARY_TO_APRIL = (1, 2, 3, 4)  # config.yaml's months
PLANE_COLUMNS = "tailnum,type,manufacturer,issue_date,model,status,aircraft_type,engine_type,year"


def flight(
    month=1,
    tail="N100",
    dep="1435",
    arr="1602",
    air="70",
    delay="-4",
    cancelled="0",
    diverted="0",
    day="3",
    weekday="4",
    distance="500",
):
    """One line of 2008.csv; the columns the reader does not use hold realistic values."""
    row = dict(
        zip(
            COLUMNS,
            [
                "2008",
                str(month),
                day,
                weekday,
                dep,
                "1430",
                arr,
                "1555",
                "WN",
                "335",
                tail,
                "87",
                "85",
                air,
                delay,
                "5",
                "IAD",
                "TPA",
                distance,
                "4",
                "13",
                cancelled,
                "",
                diverted,
                "NA",
                "NA",
                "NA",
                "NA",
                "NA",
            ],
        )
    )
    if cancelled == "1":
        row["CancellationCode"] = "B"
    return ",".join(row[c] for c in COLUMNS)


def write_raw(folder, flights, planes):
    (folder / "2008.csv.bz2").write_bytes(bz2.compress(("\n".join([",".join(COLUMNS), *flights]) + "\n").encode()))
    (folder / "plane-data.csv").write_text("\n".join([PLANE_COLUMNS, *planes]) + "\n")
    return folder


PLANES = [
    "N100,Corporation,BOEING,05/03/1998,737-7H4,Valid,Fixed Wing Multi-Engine,Turbo-Fan,1998",
    # N200 listed twice: its first dated row is kept (2004)
    "N200,Corporation,BOEING,01/01/2004,737-7H4,Valid,Fixed Wing Multi-Engine,Turbo-Fan,2004",
    "N200,Corporation,BOEING,01/01/1990,737-7H4,Valid,Fixed Wing Multi-Engine,Turbo-Fan,1990",
    "N300,Corporation,BOEING,None,737-7H4,Valid,Fixed Wing Multi-Engine,Turbo-Fan,None",  # year unknown
    "N400,Corporation,EMBRAER,None,EMB-145XR,Valid,Fixed Wing Multi-Engine,Turbo-Fan,0000",  # year 0
    "N500,Corporation,EMBRAER,None,EMB-145XR,Valid,Fixed Wing Multi-Engine,Turbo-Fan,0",  # year 0
    "N600",
]  # a tail number without any information (as in the real table)

KEPT = [  # (flight, the row the reader makes of it: FEATURES, then the delay)
    (flight(1, "N100"), [1, 3, 4, 10, 70, 500, 16 * 60 + 2, 14 * 60 + 35, -4]),
    (
        flight(4, "N200", dep="5", arr="2400", delay="31", day="30", weekday="3", air="300", distance="2475"),
        [4, 30, 3, 4, 300, 2475, 1440, 5, 31],
    ),  # 00:05 and 24:00
    (flight(2, " N100 ", dep="2359", arr="0", delay="0"), [2, 3, 4, 10, 70, 500, 0, 23 * 60 + 59, 0]),  # padded tail
]
DROPPED = [
    flight(5, "N100"),  # May
    flight(12, "N200"),  # December
    flight(3, "N100", dep="NA", arr="NA", air="NA", delay="NA", cancelled="1"),  # cancelled, as in the table
    flight(3, "N100", cancelled="1"),  # cancelled, yet complete: still dropped
    flight(3, "N200", arr="NA", air="NA", delay="NA", diverted="1"),  # diverted, as in the table
    flight(3, "N200", diverted="1"),  # diverted, yet complete: still dropped
    flight(2, "N300"),  # plane of unknown year
    flight(2, "N400"),  # plane of year 0000
    flight(2, "N500"),  # plane of year 0
    flight(2, "N600"),  # plane without information
    flight(3, "N999"),  # plane not in the plane table (inner join)
    flight(3, ""),  # tail number missing
    flight(3, "NA"),  # tail number missing
    flight(1, "N100", air="NA"),  # a missing feature
    flight(1, "N100", delay="NA"),  # a missing target
]


@pytest.fixture
def raw(tmp_path):
    """The kept and dropped flights interleaved, in that order."""
    (first, _), (second, _), (third, _) = KEPT
    return write_raw(tmp_path, [first, *DROPPED[:5], second, *DROPPED[5:10], third, *DROPPED[10:]], PLANES)


@pytest.mark.parametrize("chunk_rows", [1, 4, 1000])  # streaming in many chunks gives the same table
def test_join_filters_and_features(raw, chunk_rows):
    table = read_airline(raw, JANUARY_TO_APRIL, chunk_rows=chunk_rows)
    expected = np.array([row for _, row in KEPT], dtype=np.float64)
    assert table.x.dtype == np.float64 and table.x.shape == (3, 8) and table.test_mask is None
    np.testing.assert_array_equal(table.x, expected[:, :-1])
    np.testing.assert_array_equal(table.y, expected[:, -1])
    assert FEATURES == ["Month", "DayofMonth", "DayOfWeek", "PlaneAge", "AirTime", "Distance", "ArrTime", "DepTime"]


def test_clock_times_become_minutes_since_midnight():
    hhmm = pd.Series([0, 5, 59, 100, 1435, 2359, 2400], dtype=np.float32)
    assert minutes_since_midnight(hhmm).tolist() == [0, 5, 59, 60, 875, 1439, 1440]


def test_plane_ages_leave_out_planes_without_a_year(raw):
    assert plane_ages(raw / "plane-data.csv").to_dict() == {"N100": 10, "N200": 4}


def test_missing_column_is_named(raw):
    frame = pd.read_csv(raw / "2008.csv.bz2").drop(columns=["AirTime"])
    frame.to_csv(raw / "2008.csv.bz2", index=False, compression="bz2")
    with pytest.raises(DataError, match=r"2008\.csv\.bz2.*AirTime"):
        read_airline(raw, JANUARY_TO_APRIL)


def test_a_word_where_a_number_belongs_names_the_file(tmp_path):
    write_raw(tmp_path, [flight(1, "N100", distance="far")], PLANES)
    with pytest.raises(DataError, match=r"2008\.csv\.bz2: cannot be read as the flight table"):
        read_airline(tmp_path, JANUARY_TO_APRIL)


def test_no_flight_left_is_an_error(tmp_path):
    write_raw(tmp_path, DROPPED, PLANES)
    with pytest.raises(DataError, match=r"no complete flight of 2008 months \(1, 2, 3, 4\)"):
        read_airline(tmp_path, JANUARY_TO_APRIL)


@pytest.mark.parametrize("protocol", ["random", "first_rows"])
def test_data_stage_from_a_mirror(tmp_path, protocol):
    """Fetch (no trusted sha256: the manifest records the observed one), table, split; a file changed
    after the fetch never reaches a table."""
    mirror = tmp_path / "mirror"
    (mirror / "airline").mkdir(parents=True)
    flights = [flight(1 + i % 4, "N100" if i % 3 else "N200", delay=str(i)) for i in range(40)]
    write_raw(mirror / "airline", flights + DROPPED, PLANES)
    manifest, table = tmp_path / "raw/files.json", tmp_path / "table.npz"
    airline = get_dataset("airline").with_reader_options({"months": JANUARY_TO_APRIL})
    fetch_dataset(airline, protocol, manifest.parent, manifest, mirror=str(mirror))
    recorded = read_json(manifest)["sha256"]
    assert recorded == {name: sha256_of(mirror / "airline" / name) for name in ("2008.csv.bz2", "plane-data.csv")}
    prepare_table(airline, protocol, manifest, table)
    prepare_split(airline, protocol, 0, table, manifest, tmp_path / "split.npz", train_size=30, test_size=8)
    split = load_split(tmp_path / "split.npz")
    assert (split.x_train.shape, split.x_test.shape) == ((30, 8), (8, 8))
    delays = np.concatenate([split.original_y(split.y_train), split.original_y(split.y_test)])
    if protocol == "first_rows":
        np.testing.assert_allclose(delays, np.arange(38))
    else:
        assert len(set(np.round(delays).astype(int))) == 38 and not np.allclose(delays, np.arange(38))
    with open(manifest.parent / "plane-data.csv", "a") as planes:
        planes.write("N700,Corporation,BOEING,None,737,Valid,Fixed Wing Multi-Engine,Turbo-Fan,2001\n")
    with pytest.raises(
        ChecksumError,
        match=r"plane-data\.csv: sha256 \w+ is not the \w+ recorded in .*; "
        r"delete .*raw/plane-data\.csv and .*files\.json and rerun",
    ):
        prepare_table(airline, protocol, manifest, tmp_path / "again.npz")


def test_a_pinned_sha256_is_checked_at_the_fetch_and_before_reading(tmp_path):
    mirror = tmp_path / "mirror"
    (mirror / "airline").mkdir(parents=True)
    write_raw(mirror / "airline", [f for f, _ in KEPT], PLANES)
    manifest, good = tmp_path / "raw/files.json", sha256_of(mirror / "airline/2008.csv.bz2")
    airline = get_dataset("airline").with_reader_options({"months": JANUARY_TO_APRIL})
    wrong = airline.pinned({"2008.csv.bz2": "0" * 64})
    with pytest.raises(FetchError, match=r"2008\.csv\.bz2.*sha256 mismatch.*expected 0{64}"):
        fetch_dataset(wrong, "random", manifest.parent, manifest, mirror=str(mirror))
    fetch_dataset(airline, "random", manifest.parent, manifest, mirror=str(mirror))  # unpinned
    prepare_table(airline.pinned({"2008.csv.bz2": good}), "random", manifest, tmp_path / "table.npz")
    with pytest.raises(
        ChecksumError, match=f"2008\\.csv\\.bz2: sha256 {good} recorded in .* is not the pinned 0{{64}}"
    ):
        prepare_table(wrong, "random", manifest, tmp_path / "again.npz")  # pinned after the fetch


def test_sources_are_the_canonical_host_then_the_dataverse_copy_then_mirrors():
    hosts = {
        spec.path: [source.url.split("/")[2] for source in spec.sources]
        for spec in get_dataset("airline").files("random")
    }
    assert hosts == {
        "2008.csv.bz2": ["stat-computing.org", "dataverse.harvard.edu", "www.rdatasciencecases.org"],
        "plane-data.csv": ["stat-computing.org", "dataverse.harvard.edu"],
    }
    assert all(
        "doi:10.7910/DVN/HG7NV7/" in spec.sources[1].url and spec.sha256 is None  # the first fetch records it
        for spec in get_dataset("airline").files("random")
    )


def test_rows_left_after_each_filter_are_logged(raw, caplog):
    with caplog.at_level(logging.INFO, logger="gpstudy.data.airline"):
        read_airline(raw, JANUARY_TO_APRIL, chunk_rows=4)  # counts summed over 5 chunks
    left = {record.args[2]: int(record.args[1].replace(",", "")) for record in caplog.records}
    assert list(left) == list(FILTERS)
    # 18 read; May and December out; 2 cancelled; 2 diverted; 7 without a dated plane; 2 incomplete
    assert list(left.values()) == [18, 16, 14, 12, 5, 3]


EVERY_MONTH = [
    flight(month, "N100" if month % 2 else "N200", delay=str(10 * month + day), day=str(day))
    for month in range(1, 13)
    for day in (1, 2)
]  # two flights a month, in month order


@pytest.mark.parametrize("months", [(1, 2, 3, 4), tuple(range(1, 13)), (7,), (12, 1)])
def test_months_option_keeps_exactly_the_flights_of_those_months(tmp_path, months):
    write_raw(tmp_path, EVERY_MONTH + DROPPED[2:], PLANES)  # and flights dropped whatever their month
    table = read_airline(tmp_path, months, chunk_rows=5)
    expected = [10 * month + day for month in range(1, 13) if month in months for day in (1, 2)]  # file order
    np.testing.assert_array_equal(table.y, expected)
    np.testing.assert_array_equal(table.x[:, 0], [month for month in range(1, 13) if month in months for _ in (1, 2)])


def test_months_reach_the_reader_and_the_table_stage_params(tmp_path, study_config):  # conftest: config.yaml
    write_raw(tmp_path, EVERY_MONTH, PLANES)
    assert dataset_of(study_config, "airline").read(tmp_path).y.size == 8  # config.yaml: January-April
    whole_year = copy.deepcopy(study_config)
    merge(whole_year, {"dataset_options": {"airline": {"months": list(range(1, 13))}}})
    validate_config(whole_year)
    assert dataset_of(whole_year, "airline").read(tmp_path).y.size == 24
    # in the tabulate stage's params, so a change reruns it (tests/test_rerun.py)
    assert data_stage_params(whole_year, "airline", "random")["tabulate"]["dataset"]["read"]["keywords"] == {
        "months": list(range(1, 13))
    }


@pytest.mark.parametrize(
    "options, message",
    [
        (
            {"airline": {"months": [0, 1]}},
            r"\$\.dataset_options\.airline\.months\[0\]: 0 is less than the minimum of 1",
        ),
        (
            {"airline": {"months": [13]}},
            r"\$\.dataset_options\.airline\.months\[0\]: 13 is greater than the maximum of 12",
        ),
        ({"airline": {"months": []}}, r"\$\.dataset_options\.airline\.months: \[\] should be non-empty"),
        ({"airline": {"months": None}}, r"\$\.dataset_options\.airline\.months: None is not of type 'array'"),
        ({"boston": {"months": [1]}}, r"\$\.dataset_options\.boston: months is an option of another data set's reader"),
    ],
)
def test_bad_months_are_refused_by_key(study_config, options, message):
    config = copy.deepcopy(study_config)
    merge(config, {"dataset_options": options})
    with pytest.raises(ConfigError, match=message):
        validate_config(config)


def test_missing_months_is_refused_by_key(study_config):
    config = copy.deepcopy(study_config)
    del config["dataset_options"]["airline"]["months"]
    with pytest.raises(ConfigError, match=r"\$\.dataset_options\.airline: data set 'airline' needs months"):
        validate_config(config)
