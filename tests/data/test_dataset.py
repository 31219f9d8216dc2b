"""Bad raw files give errors that name the file and the row."""

import numpy as np
import pytest

from gpstudy.data import DataError, get_dataset, read_table
from gpstudy.data.uci import read_boston, read_wine_red


def boston_file(tmp_path, rows):
    raw = tmp_path / "boston"
    (raw / "original").mkdir(parents=True)
    (raw / "original" / "housing.data").write_text("\n".join(rows) + "\n")
    return raw


GOOD_ROW = " ".join(["1.0"] * 14)


def test_non_finite_value_names_file_and_row(tmp_path):
    raw = boston_file(tmp_path, [GOOD_ROW, GOOD_ROW, " ".join(["1.0"] * 5 + ["inf"] + ["1.0"] * 8)])
    with pytest.raises(
        DataError, match=r"housing\.data: data row 2 .*column '5': value 'inf' is non-numeric or non-finite"
    ):
        read_boston(raw)


def test_missing_value_in_target_names_file_and_row(tmp_path):
    raw = tmp_path / "wine_red"
    (raw / "original").mkdir(parents=True)
    header = ";".join(f'"c{i}"' for i in range(11)) + ';"quality"'
    rows = [";".join(["1"] * 12), ";".join(["1"] * 11) + ";"]
    (raw / "original" / "winequality-red.csv").write_text("\n".join([header, *rows]) + "\n")
    with pytest.raises(
        DataError, match=r"winequality-red\.csv: data row 1 .*'quality': a missing value \(an empty cell"
    ):
        read_wine_red(raw)


def test_malformed_row_names_file_and_line(tmp_path):
    raw = boston_file(tmp_path, [GOOD_ROW, GOOD_ROW + " 9.9 9.9", GOOD_ROW])
    with pytest.raises(DataError, match=r"housing\.data.*line 2"):
        read_boston(raw)


def test_truncated_table_fails_the_shape_check(tmp_path):
    raw = boston_file(tmp_path, [GOOD_ROW] * 10)
    with pytest.raises(DataError, match=r"shape \(506, 13\), read \(10, 13\)"):
        read_table(get_dataset("boston"), "random", raw)


def test_unknown_dataset_lists_the_known_ones():
    with pytest.raises(KeyError, match="known: airline, boston"):
        get_dataset("bostn")


def test_good_file_reads(tmp_path):
    table = read_boston(boston_file(tmp_path, [GOOD_ROW] * 3))
    assert table.x.shape == (3, 13) and np.all(table.y == 1.0)
