"""The airline reader on a small bz2 file of the real ASA Data Expo 2009 schema."""

import bz2

import numpy as np
import pandas as pd
import pytest

from gpstudy.data import DataError
from gpstudy.data.airline import FEATURES, read_airline

COLUMNS = ["Year", "Month", "DayofMonth", "DayOfWeek", "DepTime", "CRSDepTime", "ArrTime", "CRSArrTime",
           "UniqueCarrier", "FlightNum", "TailNum", "ActualElapsedTime", "CRSElapsedTime", "AirTime",
           "ArrDelay", "DepDelay", "Origin", "Dest", "Distance", "TaxiIn", "TaxiOut", "Cancelled",
           "CancellationCode", "Diverted", "CarrierDelay", "WeatherDelay", "NASDelay", "SecurityDelay",
           "LateAircraftDelay"]


def flight(month, tail, dep="1435", arr="1602", air="70", delay="-4"):
    row = dict.fromkeys(COLUMNS, "NA")
    row.update(Year="2008", Month=str(month), DayofMonth="3", DayOfWeek="4", DepTime=dep, ArrTime=arr,
               TailNum=tail, AirTime=air, ArrDelay=delay, Distance="500", Origin="IAD", Dest="TPA",
               UniqueCarrier="WN", Cancelled="0", Diverted="0")
    return ",".join(row[c] for c in COLUMNS)


@pytest.fixture
def raw(tmp_path):
    flights = [flight(1, "N100"),                 # kept
               flight(4, "N200", dep="5", arr="2359", delay="31"),  # kept: 00:05 and 23:59
               flight(5, "N100"),                 # May: dropped
               flight(2, "N300"),                 # plane without a year: dropped
               flight(3, "N999"),                 # plane not in the plane table: dropped
               flight(3, "N100", arr="NA", delay="NA")] * 3  # cancelled (missing values): dropped
    (tmp_path / "2008.csv.bz2").write_bytes(bz2.compress((",".join(COLUMNS) + "\n" + "\n".join(flights) + "\n").encode()))
    planes = ["tailnum,type,manufacturer,issue_date,model,status,aircraft_type,engine_type,year",
              "N100,Corporation,BOEING,05/03/1998,737-7H4,Valid,Fixed Wing Multi-Engine,Turbo-Fan,1998",
              "N200,Corporation,BOEING,01/01/2004,737-7H4,Valid,Fixed Wing Multi-Engine,Turbo-Fan,2004",
              "N300,Corporation,BOEING,None,737-7H4,Valid,Fixed Wing Multi-Engine,Turbo-Fan,None",
              "N400"]
    (tmp_path / "plane-data.csv").write_text("\n".join(planes) + "\n")
    return tmp_path


@pytest.mark.parametrize("chunk_rows", [2, 1000])  # streaming in many chunks gives the same table
def test_reader_keeps_complete_january_to_april_flights(raw, chunk_rows):
    table = read_airline(raw, chunk_rows=chunk_rows)
    assert table.x.shape == (6, 8) and FEATURES[3] == "PlaneAge"
    first = dict(zip(FEATURES, table.x[0]))
    assert first == {"Month": 1, "DayofMonth": 3, "DayOfWeek": 4, "PlaneAge": 10, "AirTime": 70,
                     "Distance": 500, "ArrTime": 16 * 60 + 2, "DepTime": 14 * 60 + 35}
    second = dict(zip(FEATURES, table.x[1]))
    assert (second["PlaneAge"], second["DepTime"], second["ArrTime"]) == (4, 5, 23 * 60 + 59)
    np.testing.assert_array_equal(table.y, [-4, 31] * 3)


def test_missing_column_is_named(raw):
    frame = pd.read_csv(raw / "2008.csv.bz2").drop(columns=["AirTime"])
    frame.to_csv(raw / "2008.csv.bz2", index=False, compression="bz2")
    with pytest.raises(DataError, match=r"2008\.csv\.bz2.*AirTime"):
        read_airline(raw)
