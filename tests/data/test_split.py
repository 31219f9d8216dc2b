"""Split protocols, standardization and the split file."""

import copy

import numpy as np
import pytest

from gpstudy.data import DataError, Table, load_split, make_split, save_split, split_rows


def toy_table(n=50, test_mask=None):
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 2.0, size=(n, 3))
    x[:, 2] = 7.0  # a constant column
    return Table(x=x, y=rng.normal(10.0, 5.0, size=n), test_mask=test_mask)


def test_random_protocol_is_the_seeded_permutation():
    table = toy_table()
    train, test = split_rows(table, "random", 3, seed=4)
    order = np.random.RandomState(7).permutation(50)
    np.testing.assert_array_equal(train, order[:45])
    np.testing.assert_array_equal(test, order[45:])
    assert not np.array_equal(split_rows(table, "random", 4, seed=4)[0], train)


def test_random_protocol_with_sizes():
    train, test = split_rows(toy_table(), "random", 0, train_size=20, test_size=10)
    assert len(train) == 20 and len(test) == 10 and np.intersect1d(train, test).size == 0
    with pytest.raises(ValueError, match="impossible"):
        split_rows(toy_table(), "random", 0, train_size=45, test_size=10)


def test_given_protocol_uses_the_test_mask_and_has_one_split():
    mask = np.arange(50) >= 40
    train, test = split_rows(toy_table(test_mask=mask), "given", 0)
    np.testing.assert_array_equal(test, np.arange(40, 50))
    with pytest.raises(ValueError, match="only split 0"):
        split_rows(toy_table(test_mask=mask), "given", 1)
    with pytest.raises(ValueError, match="own test set"):
        split_rows(toy_table(), "given", 0)


def test_given_protocol_subsets_each_part_by_the_seed():
    table = toy_table(test_mask=np.arange(50) >= 40)
    train, test = split_rows(table, "given", 0, seed=3, train_size=12, test_size=4)
    assert len(train) == 12 == len(set(train)) and set(train) < set(range(40)) and list(train) == sorted(train)
    assert len(test) == 4 and set(test) < set(range(40, 50))
    again = split_rows(table, "given", 0, seed=3, train_size=12, test_size=4)
    assert all(np.array_equal(a, b) for a, b in zip((train, test), again))
    assert not np.array_equal(train, split_rows(table, "given", 0, seed=4, train_size=12)[0])
    with pytest.raises(ValueError, match="41 training rows asked of the data set's 40"):
        split_rows(table, "given", 0, train_size=41)


def test_first_rows_protocol_takes_the_tables_first_rows_unshuffled_and_has_one_split():
    train, test = split_rows(toy_table(), "first_rows", 0, seed=3, train_size=20, test_size=10)
    np.testing.assert_array_equal(train, np.arange(20))
    np.testing.assert_array_equal(test, np.arange(20, 30))
    train, test = split_rows(toy_table(), "first_rows", 0)  # int(0.9 N) and the rest
    np.testing.assert_array_equal(train, np.arange(45))
    np.testing.assert_array_equal(test, np.arange(45, 50))
    with pytest.raises(ValueError, match="first_rows split of 50 rows into 45 train \\+ 10 test is impossible"):
        split_rows(toy_table(), "first_rows", 0, train_size=45, test_size=10)
    with pytest.raises(ValueError, match="'first_rows' protocol has only split 0, not 1"):
        split_rows(toy_table(), "first_rows", 1)


def test_unknown_protocol_is_named():
    with pytest.raises(ValueError, match="'shuffled'"):
        split_rows(toy_table(), "shuffled", 0)


def test_standardization_uses_training_rows_only():
    table = toy_table()
    train, test = split_rows(table, "random", 0)
    split = make_split(table, train, test, standardize=True, info={"dataset": "toy"})
    np.testing.assert_allclose(split.x_mean[:2], table.x[train, :2].mean(0))
    np.testing.assert_allclose(split.y_std, table.y[train].std())
    assert np.isfinite(split.x_train).all() and split.x_std[2] == 1.0  # constant column kept finite
    np.testing.assert_allclose(split.x_test * split.x_std + split.x_mean, table.x[test])
    assert split.info == {"dataset": "toy", "n_train": 45, "n_test": 5}


def test_classification_targets_are_not_standardized():
    table = Table(x=np.ones((12, 2)), y=np.arange(12) % 3)
    split = make_split(table, np.arange(10), np.arange(10, 12), standardize=False, info={})
    np.testing.assert_array_equal(split.y_train, table.y[:10])
    assert split.y_mean == 0.0 and split.y_std == 1.0


def pixel_table() -> Table:
    """12 "images" of 4 pixels in [-1, 1], pixel 3 constant (an MNIST border), 3 classes; rows 10-11 the test set."""
    rng = np.random.default_rng(1)
    x = (rng.integers(0, 256, size=(12, 4)) / 127.5 - 1).astype(np.float32)
    x[:, 3] = -1.0
    return Table(x=x, y=np.arange(12) % 3, test_mask=np.arange(12) >= 10)


def test_standardize_inputs_standardizes_each_pixel_with_the_training_images():
    """The AutoGP authors' per-pixel standardization: zero mean and unit variance per pixel on the training
    rows, a constant pixel centred and not divided by 0, the test rows by the training statistics, the
    labels untouched, float32 kept; off, the pixels are as read."""
    table, train, test = pixel_table(), np.arange(10), np.arange(10, 12)
    split = make_split(table, train, test, standardize=False, info={}, standardize_inputs=True)
    np.testing.assert_allclose(split.x_train[:, :3].mean(0), 0.0, atol=1e-6)
    np.testing.assert_allclose(split.x_train[:, :3].std(0), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(split.x_train[:, 3], 0.0)  # centred: -1 - (-1), not divided by a zero std
    assert split.x_std[3] == 1.0 and split.x_mean[3] == -1.0
    mean, std = table.x[train].mean(0), table.x[train].std(0)
    np.testing.assert_allclose(split.x_test[:, :3], (table.x[test, :3] - mean[:3]) / std[:3], rtol=1e-5)
    assert not np.allclose(split.x_test[:, :3], (table.x[test, :3] - table.x[test, :3].mean(0)), atol=1e-3)
    np.testing.assert_array_equal(split.y_train, table.y[train])
    assert split.y_mean == 0.0 and split.y_std == 1.0 and split.x_train.dtype == np.float32
    as_read = make_split(table, train, test, standardize=False, info={})
    np.testing.assert_array_equal(as_read.x_train, table.x[train])


def test_standardize_inputs_reaches_the_split_file_from_the_config(tmp_path, study_config):
    from gpstudy.data import get_dataset, prepare_split, save_table
    from gpstudy.study import data_plan, merge

    save_table(tmp_path / "table.npz", pixel_table())
    config = copy.deepcopy(study_config)
    assert not data_plan(config, "mnist").standardize_inputs  # config.yaml: the paper's "no pre-processing"
    merge(config, {"dataset_options": {"mnist": {"standardize_inputs": True}}})
    plan = data_plan(config, "mnist")
    prepare_split(
        get_dataset("mnist"),
        "given",
        0,
        tmp_path / "table.npz",
        tmp_path / "files.json",
        tmp_path / "split.npz",
        **plan.split_options(),
    )
    split = load_split(tmp_path / "split.npz")
    np.testing.assert_allclose(split.x_train[:, :3].std(0), 1.0, rtol=1e-5)
    assert split.info["standardize_inputs"] is True


INFO = {"dataset": "mine", "protocol": "random", "split": 0}


@pytest.mark.parametrize(
    "rows, sizes, counts",
    [
        (3, {}, "2 training and 1 test rows of the table's 3"),  # a 3-row file trained on 2 rows
        (30, {"train_size": 9}, "9 training and 21 test rows of the table's 30"),
        (30, {"train_size": 29}, "29 training and 1 test rows of the table's 30"),
    ],
)
def test_a_split_with_too_few_training_or_test_rows_is_refused_naming_the_counts(rows, sizes, counts):
    table = toy_table(rows)
    with pytest.raises(
        DataError,
        match=f"dataset 'mine', protocol 'random', split 0: {counts}; a split needs at least "
        "10 training and 2 test rows",
    ):
        make_split(table, *split_rows(table, "random", 0, **sizes), standardize=True, info=INFO)


@pytest.mark.parametrize("rows, sizes", [(12, {}), (30, {"train_size": 28}), (30, {"train_size": 10, "test_size": 2})])
def test_the_fewest_rows_a_split_takes(rows, sizes):
    table = toy_table(rows)
    split = make_split(table, *split_rows(table, "random", 0, **sizes), standardize=True, info=INFO)
    assert split.info["n_train"] >= 10 and split.info["n_test"] >= 2


def test_overlapping_rows_are_refused():
    with pytest.raises(ValueError, match="overlap"):
        make_split(toy_table(), np.arange(10), np.arange(5, 15), standardize=True, info={})


def test_split_file_round_trip(tmp_path):
    table = toy_table()
    split = make_split(table, *split_rows(table, "random", 0), standardize=True, info={"split": 0})
    path = tmp_path / "splits" / "split0.npz"
    save_split(path, split)
    loaded = load_split(path)
    for name in ("x_train", "y_train", "x_test", "y_test", "x_mean", "x_std"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(split, name))
    assert (loaded.y_mean, loaded.y_std, loaded.info) == (split.y_mean, split.y_std, split.info)
    assert [p.name for p in path.parent.iterdir()] == ["split0.npz"]


def test_drop_features_leaves_columns_out_of_every_split(tmp_path, study_config):
    from gpstudy.data import get_dataset, load_split, prepare_split, save_table
    from gpstudy.study import data_plan, merge

    rng = np.random.default_rng(0)
    save_table(tmp_path / "table.npz", Table(x=rng.normal(size=(30, 4)), y=rng.normal(size=30)))
    config = copy.deepcopy(study_config)
    merge(config, {"dataset_options": {"boston": {"drop_features": [1, 3]}}})
    plan = data_plan(config, "boston")
    assert plan.drop_features == (1, 3)
    prepare_split(
        get_dataset("boston"),
        "random",
        0,
        tmp_path / "table.npz",
        tmp_path / "files.json",
        tmp_path / "split.npz",
        **plan.split_options(),
    )
    kept = load_split(tmp_path / "split.npz")
    assert kept.x_train.shape[1] == 2 and kept.info["drop_features"] == [1, 3]
    with pytest.raises(ValueError, match=r"boston: drop_features \[7\] names a column past its 4 features"):
        prepare_split(
            get_dataset("boston"),
            "random",
            0,
            tmp_path / "table.npz",
            tmp_path / "files.json",
            tmp_path / "s.npz",
            drop_features=(7,),
        )


def test_standardization_of_values_near_1e154_does_not_overflow():
    """A column near 1e154 made the variance overflow: x_std inf, the column all zeros, the run 'ok'."""
    table = toy_table()
    huge = Table(x=table.x * 2.0**511, y=table.y * 2.0**511)  # about 1e154: the squares pass 1.8e308
    train, test = split_rows(table, "random", 0)
    plain, scaled = (make_split(t, train, test, True, {}) for t in (table, huge))
    for name in ("x_train", "x_test", "y_train", "y_test"):  # a power-of-two scale changes no bit
        np.testing.assert_array_equal(getattr(scaled, name), getattr(plain, name))
    np.testing.assert_array_equal(scaled.x_std, np.where(plain.x_std == 1.0, 1.0, plain.x_std * 2.0**511))
    assert scaled.y_std == plain.y_std * 2.0**511


def test_a_standardized_value_past_float64_is_refused_naming_the_column():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 3))
    x[:, 1] = np.where(np.arange(40) % 8 == 0, -1.7e308, 1.7e308)  # x - mean passes -1.8e308 at a negative row
    with pytest.raises(
        DataError,
        match=r"dataset 'big', split 0, standardized by its training rows: \d+ missing or "
        r"infinite value\(s\) in x_train, the first in row \d+, feature column 1",
    ):
        make_split(
            Table(x=x, y=rng.normal(size=40)), np.arange(30), np.arange(30, 40), True, {"dataset": "big", "split": 0}
        )
