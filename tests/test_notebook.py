"""gpstudy.notebook: a method fitted on arrays with the study's defaults, predicting in the data's units."""

import logging

import numpy as np
import pandas as pd
import pytest
import torch
from matplotlib.colors import to_rgb

from gpstudy import notebook
from gpstudy.data import DataError
from gpstudy.notebook import PROGRESS_LOGGER, fit, load_dataset
from gpstudy.report.palette import color
from gpstudy.runtime.environment import DEFAULT_THREADS
from gpstudy.study import DEFAULT_CONFIG, SettingsError, load_config

QUICK = {"iterations": 10, "eval_every": 5, "device": "cpu", "progress": False}  # a few steps, every check fast


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    """40 noisy points of a sine on [0, 6]."""
    rng = np.random.default_rng(0)
    x = np.sort(rng.uniform(0, 6, 40))
    return x, np.sin(x) + 0.1 * rng.standard_normal(40)


def test_settings_are_the_configs_with_the_keywords_over_them(data):
    model = fit(*data, "svgp", M=5, lr=0.01, inducing_init="training_points", **QUICK)
    defaults = load_config(DEFAULT_CONFIG)
    assert (model.settings.iterations, model.settings.lr, model.settings.batch_size) == (
        10,
        0.01,
        defaults["training"]["batch_size"],
    )
    assert model.settings.options["inducing_init"] == "training_points"
    assert model.settings.options["learn_inducing_inputs"] == defaults["methods"]["svgp"]["learn_inducing_inputs"]
    assert model.settings.seed == defaults["seed"] and len(model.curve) == 2  # evaluated at 5 and 10


def test_a_data_sets_settings_come_with_its_name(data):
    model = fit(*data, "gpnet", M=5, dataset="snelson", **QUICK)
    snelson = load_config(DEFAULT_CONFIG)["dataset_options"]["snelson"]
    assert model.settings.batch_size == snelson["batch_size"] and model.settings.pretrain
    assert model.settings.options["measurement"] == "box" and model.settings.options["hidden_units"] == 20


def test_predictions_are_in_the_datas_units(data):
    """Scaled and shifted data train the same standardized problem: the predictions scale and shift with
    it (a mean or variance left standardized, or scaled twice, fails)."""
    x, y = data
    points = np.array([0.5, 2.0, 5.5])
    base = fit(x, y, "svgp", M=5, **QUICK).predict(points)
    moved = fit(3 * x + 1, 2 * y + 5, "svgp", M=5, **QUICK).predict(3 * points + 1)
    np.testing.assert_allclose(moved["x"], 3 * points + 1)
    np.testing.assert_allclose(moved["mean"], 2 * base["mean"] + 5, rtol=1e-6)
    np.testing.assert_allclose(moved[["var_f", "var_y"]], 4 * base[["var_f", "var_y"]], rtol=1e-6)
    assert (base["var_y"] > base["var_f"]).all()  # noise included


def test_torch_inputs_and_a_seed(data):
    x, y = data
    numpy_fit = fit(x[:, None], y, "svgp", M=5, **QUICK).predict(x[:3])
    torch_fit = fit(torch.as_tensor(x[:, None]), torch.as_tensor(y[:, None]), "svgp", M=5, **QUICK)
    np.testing.assert_array_equal(torch_fit.predict(torch.as_tensor(x[:3])), numpy_fit)
    reseeded = fit(x, y, "svgp", M=5, seed=7, **QUICK)
    assert reseeded.settings.seed == 7 and not np.allclose(reseeded.predict(x[:3])["mean"], numpy_fit["mean"])


@pytest.mark.parametrize(
    "keywords, error, message",
    [
        (
            {"beta": 1.0},
            SettingsError,
            r"beta is neither a training setting nor an option of method 'svgp'; valid: .*"
            r"batch_size, .*inducing_init, .*lr",
        ),
        ({"lr": None}, ValueError, "lr = None; give a value"),
        ({"lr": -1.0}, SettingsError, r"lr: -1.0 is less than or equal to the minimum of 0"),
        # issue 49, defect 11: refused as the pipeline refuses them (inf trained a constant predictor)
        ({"initial_lengthscale": np.inf}, SettingsError, "setting initial_lengthscale: a number must be finite"),
        ({"lr": np.nan}, SettingsError, "setting lr: a number must be finite, not NaN or infinite"),
        ({"lr": -np.inf}, SettingsError, "setting lr: a number must be finite"),
        ({"kernel_options": {"nu": np.inf}}, SettingsError, r"setting kernel_options\.nu: a number must be finite"),
        (
            {"likelihood": "bernoulli"},
            ValueError,
            "fit trains regressions; likelihood 'bernoulli' is for classification",
        ),
    ],
)
def test_a_bad_keyword_is_named(data, keywords, error, message):
    with pytest.raises(error, match=message):
        fit(*data, "svgp", M=5, **keywords)


@pytest.mark.parametrize(
    "x, y, message",
    [
        (
            pd.DataFrame({"a": [0.0, 1, 2, 3], "colour": ["red", "blue", "red", "red"]}),
            np.zeros(4),
            "x.*'colour'.*'red'",
        ),
        (pd.DataFrame({"a": [0.0, 1, 2, 3]}), pd.Series(["1", "2", "x", "4"], name="price"), "y.*row 2.*'price'.*'x'"),
    ],
)
def test_a_data_frame_column_of_no_numbers_is_named(x, y, message):
    """Issue 49, defect 11: as the pipeline names a table's (numpy's 'could not convert string to float' named none)."""
    with pytest.raises(DataError, match=f"fit's {message} is non-numeric"):
        fit(x, y, "svgp", M=2, **QUICK)


@pytest.mark.parametrize(
    "x, y, error, message",
    [
        (np.zeros((5, 1)), np.zeros(4), ValueError, r"y has shape \[4\]; expected \[5\]"),
        (np.zeros((2, 5, 1)), np.zeros(5), ValueError, r"x has shape \[2, 5, 1\]"),
        (
            np.array([0.0, 1.0, np.inf, 3.0]),
            np.zeros(4),
            DataError,
            r"fit's x and y: 1 missing or infinite value\(s\) in "
            "x, the first in row 2, feature column 0",
        ),
        (
            np.arange(4.0),
            np.array([0, 1, 2, np.nan]),
            DataError,
            r"1 missing or infinite value\(s\) in y, the first in row 3",
        ),
    ],
)
def test_bad_data_is_named(x, y, error, message):
    with pytest.raises(error, match=message):
        fit(x, y, "svgp", M=2, **QUICK)


def test_progress_is_shown_and_logging_left_as_it_was(data, capsys):
    logger = logging.getLogger(PROGRESS_LOGGER)
    before = (logger.level, logger.propagate, list(logger.handlers))
    fit(*data, "svgp", M=5, **{**QUICK, "progress": True})
    lines = capsys.readouterr().err.splitlines()  # not a terminal: lines, no bar
    assert [line.split(",")[0] for line in lines[:3]] == [
        "fit: svgp at M = 5 with 1 torch CPU thread(s) (threads=)",
        "training: iteration 5 of 10 (50%)",
        "training: iteration 10 of 10 (100%)",
    ]
    assert len(lines) == 4 and lines[3].startswith("training done: objective ")
    assert (logger.level, logger.propagate, list(logger.handlers)) == before


def spied(function, note):
    """``function``, calling ``note()`` first."""
    return lambda *args, **kwargs: (note(), function(*args, **kwargs))[1]


@pytest.mark.parametrize("threads", [None, 1, 2])
def test_fit_trains_with_its_threads_and_restores_the_callers(data, monkeypatch, request, threads):
    """fit trains with ``threads`` torch CPU threads (DEFAULT_THREADS when not given), whatever the caller's, says
    so in its repr, and leaves the caller's count as it was, also when training fails."""
    caller = 3
    before = torch.get_num_threads()
    request.addfinalizer(lambda: torch.set_num_threads(before))
    torch.set_num_threads(caller)
    seen = []
    for module, name in ((notebook, "build_batch"), (notebook.training, "fit")):  # the pretraining, the training
        monkeypatch.setattr(module, name, spied(getattr(module, name), lambda: seen.append(torch.get_num_threads())))
    keywords = {} if threads is None else {"threads": threads}
    model = fit(*data, "svgp", M=5, dataset="snelson", **keywords, **QUICK)  # snelson's settings pretrain
    expected = DEFAULT_THREADS if threads is None else threads
    assert model.settings.pretrain and (seen, model.threads, torch.get_num_threads()) == (
        [expected] * 2,
        expected,
        caller,
    )
    assert repr(model).startswith("Fitted(svgp, M=5, 10 iterations in ")
    assert repr(model).endswith(f" s on cpu with {expected} torch CPU thread(s))")

    monkeypatch.setattr(notebook.training, "fit", lambda *args, **kwargs: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        fit(*data, "svgp", M=5, **keywords, **QUICK)
    assert torch.get_num_threads() == caller


def test_fit_refuses_threads_below_one(data):
    with pytest.raises(ValueError, match="threads = 0; give 1 or more torch CPU threads"):
        fit(*data, "svgp", M=5, threads=0, **QUICK)


def test_a_registered_data_set_loads_from_a_mirror(shared_data, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    snelson = load_dataset("snelson", mirror=str(shared_data))
    assert snelson.x.shape == (200, 1) and snelson.y.shape == (200,) and snelson.x_plot.shape == (301, 1)
    assert (tmp_path / "data" / "raw" / "snelson" / "train_inputs").is_file()  # where gpstudy prepare puts it
    np.testing.assert_array_equal(load_dataset("snelson").y, snelson.y)  # read again, no mirror needed


def test_plot_draws_the_mean_the_band_and_the_data_in_the_datas_units(data):
    """On data moved off the standard scale (a plot of standardized values, or a band of another width, fails)."""
    x, y = 3 * data[0] + 1, 2 * data[1] + 5
    model = fit(x, y, "gpnet", M=5, **QUICK)
    ax = model.plot(points=50)
    (mean_line,) = ax.get_lines()
    grid, mean = mean_line.get_data()
    assert grid.min() < x.min() and grid.max() > x.max() and len(grid) == 50  # the training range and beyond
    expected = model.predict(grid)
    np.testing.assert_allclose(mean, expected["mean"])
    band = ax.collections[0].get_paths()[0].vertices
    top = expected["mean"] + 2 * np.sqrt(expected["var_y"])
    np.testing.assert_allclose(band[:, 1].max(), top.max(), rtol=1e-9)  # the mean + 2 sd, noise included
    np.testing.assert_allclose(ax.collections[1].get_offsets(), np.column_stack([x, y]))  # the data
    assert to_rgb(mean_line.get_color()) == pytest.approx(color("gpnet", 5))  # the study's colour of GPNet 5
    assert ax.get_title() == "GPNet, M = 5, ±2 std"


def test_plot_refuses_a_fit_of_two_inputs(data):
    x, y = data
    with pytest.raises(ValueError, match="plot draws a fit of one input; this one has 2"):
        fit(np.column_stack([x, x**2]), y, "svgp", M=3, **QUICK).plot()
