"""Each figure function writes a readable PNG of the expected size (and a PDF) from synthetic frames."""

import matplotlib.image
import numpy as np
import pandas as pd
import pytest
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from gpstudy.report.plots import CURVE_PANEL, DPI, SNELSON_PANEL, VIOLIN_PANEL, learning_curves, posteriors, violins

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _assert_png(path, width_in: float, height_in: float, legend_in: float = 0.0) -> None:
    """A PNG of ``width_in`` by ``height_in`` inches, and up to ``legend_in`` more in height for a legend below."""
    assert path.read_bytes().startswith(PNG_SIGNATURE)
    height, width = matplotlib.image.imread(path).shape[:2]
    assert abs(width - width_in * DPI) <= 2 and -2 <= height - height_in * DPI <= legend_in * DPI + 2


def _assert_pdf(path) -> None:
    assert path.read_bytes().startswith(b"%PDF")


def _runs(datasets: list[str]) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = [
        ("uci", dataset, method, m, split, *rng.normal([3.0, -2.5], 0.2), "ok")
        for dataset in datasets
        for method, m in (("svgp", 100), ("gpnet", 500))
        for split in range(4)
    ]
    rows.append(("uci", datasets[0], "fbnn", 500, 0, np.nan, np.nan, "failed: out of memory"))
    rows.append(("uci", "power", "svgp", 100, 0, np.nan, np.nan, "failed: diverged"))  # a panel with no violin
    rows.append(("snelson", "snelson", "svgp", 2, 0, 0.3, -0.5, "ok"))
    return pd.DataFrame(rows, columns=["experiment", "dataset", "method", "M", "split", "rmse", "test_ll", "status"])


@pytest.mark.parametrize("datasets", [["energy", "boston"], ["yacht"]])  # some of the paper's; one without PBP
def test_uci_violins(tmp_path, datasets):
    violins(_runs(datasets), "uci", tmp_path / "fig3.png", tmp_path / "fig3.pdf")
    panels = len(datasets) + 1  # and power
    _assert_png(tmp_path / "fig3.png", VIOLIN_PANEL[0] * panels, VIOLIN_PANEL[1] * 2)  # rows: RMSE, test LL
    _assert_pdf(tmp_path / "fig3.pdf")


def test_violins_of_a_classification_draw_its_error_rate_and_log_likelihood(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    runs = pd.DataFrame(
        [
            (
                "classification",
                dataset,
                "gpnet",
                64,
                split,
                np.nan,
                rng.uniform(0.01, 0.05),
                rng.normal(-0.1, 0.01),
                "ok",
            )
            for dataset in ("mnist", "cifar10")
            for split in range(3)
        ],
        columns=["experiment", "dataset", "method", "M", "split", "rmse", "error_rate", "test_ll", "status"],
    )
    drawn = []
    violinplot = sns.violinplot
    monkeypatch.setattr(
        sns,
        "violinplot",
        lambda data, y, **kwargs: drawn.append((y, data[y].notna().sum())) or violinplot(data=data, y=y, **kwargs),
    )
    titles = []
    suptitle = Figure.suptitle
    monkeypatch.setattr(
        Figure, "suptitle", lambda figure, text, **kwargs: titles.append(text) or suptitle(figure, text, **kwargs)
    )
    violins(runs, "classification", tmp_path / "v.png", tmp_path / "v.pdf")
    assert drawn == [("error_rate", 3), ("error_rate", 3), ("test_ll", 3), ("test_ll", 3)]  # rows: metrics
    assert titles == ["Violins over splits"]  # no PBP, which has no classification numbers
    _assert_png(tmp_path / "v.png", VIOLIN_PANEL[0] * 2, VIOLIN_PANEL[1] * 2)


def test_snelson_figure_with_some_methods_and_sizes(tmp_path):
    x = np.linspace(-1.0, 7.0, 50)
    predictions = pd.concat(
        [
            pd.DataFrame({"method": method, "M": m, "x": x, "mean": np.sin(x), "var_f": 0.05, "var_y": 0.1})
            for method in ("fbnn", "gpnet")
            for m in (20, 5)
        ]
    )
    reference = pd.DataFrame({"x": x, "mean": np.sin(x), "var_f": 0.01, "var_y": 0.06})
    x_train = np.linspace(0.0, 6.0, 20)
    posteriors(predictions, reference, x_train, np.sin(x_train), tmp_path / "fig4.png", tmp_path / "fig4.pdf")
    _assert_png(tmp_path / "fig4.png", SNELSON_PANEL[0] * 2, SNELSON_PANEL[1] * 2)  # 2 methods x 2 M
    _assert_pdf(tmp_path / "fig4.pdf")


@pytest.mark.parametrize("axis", ["iteration", "seconds"])
def test_learning_curves_with_a_single_split_run(tmp_path, axis, monkeypatch):
    iterations = np.array([1, 10, 100, 1000, 10000])
    curves = pd.concat(
        [
            pd.DataFrame(
                {
                    "experiment": "uci",
                    "dataset": dataset,
                    "method": method,
                    "M": 100,
                    "split": split,
                    "iteration": iterations,
                    "objective": 0.0,
                    "seconds": 0.01 * iterations * (1 + split),
                    "rmse": 3.0 + 1.0 / iterations + 0.1 * split,
                    "test_ll": -2.5,
                }
            )
            for dataset in ("boston", "concrete")
            for method, splits in (("svgp", 3), ("gpnet", 1))
            for split in range(splits)
        ]
    )
    drawn = []
    monkeypatch.setattr(Axes, "plot", lambda self, x, y, **kwargs: drawn.append(np.asarray(x)))
    learning_curves(curves, tmp_path / "curves.png", "uci", axis)
    _assert_png(tmp_path / "curves.png", CURVE_PANEL[0] * 2, CURVE_PANEL[1], 0.5)  # 2 data sets, the legend below
    svgp = 0.01 * iterations * 2 if axis == "seconds" else iterations  # the mean of splits 0-2's seconds
    np.testing.assert_allclose(drawn[0], svgp)
