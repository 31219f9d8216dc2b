"""One palette in every figure, read off the figures' artists: each method's violin, line and band has the colour
``gpstudy.report.palette.color`` gives its (method, M), the same in two figures; distinct Ms of one method, and
distinct methods, differ by a visible amount (CIELAB distance, computed here independently of the palette);
the learning curves' legend fits in the figure, below the panels."""

import itertools

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_rgb

from gpstudy.methods import METHODS
from gpstudy.report import plots
from gpstudy.report.labels import display_names, method_label
from gpstudy.report.palette import REFERENCE, color, variant_methods
from gpstudy.study import DEFAULT_CONFIG, load_config

VISIBLE = 8.0  # CIELAB Delta E 1976 between colours told apart at a glance (about 3.5 just-noticeable differences)
VARIANTS = {"orth": "odvgp", "orthnat": "odvgp"}  # two variants of one registered method, as config.yaml's


def lab(rgb) -> np.ndarray:
    """CIELAB (D65) of an sRGB colour in [0, 1]."""
    linear = np.where(np.asarray(rgb) <= 0.04045, np.asarray(rgb) / 12.92, ((np.asarray(rgb) + 0.055) / 1.055) ** 2.4)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ linear
    t = xyz / np.array([0.95047, 1.0, 1.08883])
    f = np.where(t > (6 / 29) ** 3, np.cbrt(t), t / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def delta_e(a, b) -> float:
    return float(np.linalg.norm(lab(a) - lab(b)))


def test_lab_matches_known_values():
    np.testing.assert_allclose(lab((1.0, 1.0, 1.0)), [100.0, 0.0, 0.0], atol=0.05)
    np.testing.assert_allclose(lab((1.0, 0.0, 0.0)), [53.24, 80.09, 67.20], atol=0.1)  # sRGB red
    np.testing.assert_allclose(lab((0.0, 0.0, 1.0)), [32.30, 79.19, -107.86], atol=0.1)  # sRGB blue


@pytest.fixture
def drawn(monkeypatch) -> list:
    """Every figure a plot function saves, in order (nothing written)."""
    figures = []
    monkeypatch.setattr(plots, "_save", lambda figure, *paths: figures.append(figure))
    return figures


def runs_and_curves() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Three splits of four (method, M) columns on two data sets, with their learning curves."""
    rng = np.random.default_rng(1)
    columns = [("svgp", 100), ("svgp", 500), ("gpnet", 100), ("gpnet", 500), ("orth", 300), ("orthnat", 300)]
    runs, curves = [], []
    for dataset, (method, m), split in itertools.product(["boston", "energy"], columns, range(3)):
        runs.append(("uci", dataset, method, m, split, *rng.normal([3.0, -2.5], 0.2), "ok"))
        curves.append(
            pd.DataFrame(
                {
                    "experiment": "uci",
                    "dataset": dataset,
                    "method": method,
                    "M": m,
                    "split": split,
                    "iteration": [10, 100, 1000],
                    "seconds": [0.1, 1.0, 10.0],
                    "rmse": 3.0 + rng.uniform(0, 1, 3),
                    "test_ll": -2.5,
                }
            )
        )
    runs = pd.DataFrame(runs, columns=["experiment", "dataset", "method", "M", "split", "rmse", "test_ll", "status"])
    return runs, pd.concat(curves, ignore_index=True)


def violin_colors(figure) -> dict[str, tuple]:
    """x label -> the face colour of the violins above it, over every panel (each label's one colour)."""
    found: dict[str, set] = {}
    labels = max(([tick.get_text() for tick in ax.get_xticklabels()] for ax in figure.axes), key=len)  # the bottom's
    for ax in figure.axes:
        for violin in (c for c in ax.collections if isinstance(c, PolyCollection) and len(c.get_paths())):
            centre = round(float(np.mean(violin.get_paths()[0].vertices[:, 0])))
            found.setdefault(labels[centre], set()).add(tuple(np.round(to_rgb(violin.get_facecolor()[0]), 6)))
    assert all(len(colors) == 1 for colors in found.values()), found
    return {label: colors.pop() for label, colors in found.items()}


def legend_colors(figure) -> dict[str, tuple]:
    """Legend entry -> its line's colour, over the figure's legends."""
    return {
        text.get_text(): tuple(np.round(to_rgb(line.get_color()), 6))
        for legend in figure.legends
        for text, line in zip(legend.get_texts(), legend.get_lines())
        if text.get_text().strip()
    }


def rounded(rgb) -> tuple:
    return tuple(np.round(rgb, 6))


def test_violins_and_learning_curves_draw_each_column_in_its_palette_colour(drawn):
    runs, curves = runs_and_curves()
    names = display_names({"orth": "ORTH", "orthnat": "ORTHNAT"})
    plots.violins(runs, "uci", None, None, names, VARIANTS)
    plots.learning_curves(curves, None, "uci", "iteration", names, VARIANTS)
    violins, learning_curves = violin_colors(drawn[0]), legend_colors(drawn[1])
    expected = {
        method_label(method, m, names): rounded(color(method, m, VARIANTS))
        for method, m in set(zip(runs["method"], runs["M"]))
    }
    assert violins == expected and learning_curves == expected  # the same (method, M), the same colour in both
    for ax in drawn[1].axes:  # each curve and its band
        for line, band in zip(ax.get_lines(), ax.collections):
            assert rounded(to_rgb(band.get_facecolor()[0])) == rounded(to_rgb(line.get_color()))
        assert {rounded(to_rgb(line.get_color())) for line in ax.get_lines()} == set(expected.values())


def test_the_snelson_posteriors_colour_each_panel_by_its_method_and_m(drawn):
    x = np.linspace(-1.0, 7.0, 30)
    sizes = [2, 5, 20]
    predictions = pd.concat(
        [
            pd.DataFrame({"method": method, "M": m, "x": x, "mean": np.sin(x), "var_f": 0.05, "var_y": 0.1})
            for method in ("svgp", "gpnet", "fbnn")
            for m in sizes
        ]
    )
    reference = pd.DataFrame({"x": x, "mean": np.sin(x), "var_f": 0.01, "var_y": 0.06})
    plots.posteriors(predictions, reference, x, np.sin(x), None, None)
    names = display_names()
    for ax in drawn[0].axes:
        method = next(key for key, name in names.items() if ax.get_title().startswith(f"{name}, "))
        wanted = rounded(color(method, int(ax.get_title().rpartition(" ")[2])))
        lines = [rounded(to_rgb(line.get_color())) for line in ax.get_lines()]
        assert lines == [REFERENCE] * 3 + [wanted]  # the exact GP's mean and band, then the method's mean
        band = next(c for c in ax.collections if isinstance(c, PolyCollection))
        assert rounded(to_rgb(band.get_facecolor()[0])) == wanted


EXPERIMENTS = load_config(DEFAULT_CONFIG)["experiments"]  # the study's: each one's figures show its columns


@pytest.mark.parametrize("experiment", sorted(EXPERIMENTS))
def test_the_columns_of_an_experiment_are_told_apart_and_ms_go_light_to_dark(experiment):
    variants = variant_methods(load_config(DEFAULT_CONFIG))
    methods = EXPERIMENTS[experiment]["methods"]
    for method, sizes in methods.items():
        lightness = [lab(color(method, m, variants))[0] for m in sorted(sizes)]
        assert lightness == sorted(lightness, reverse=True), method  # more points, darker
    columns = [(method, m) for method, sizes in methods.items() for m in sizes]
    for a, b in itertools.combinations(columns, 2):
        assert delta_e(color(*a, variants), color(*b, variants)) >= VISIBLE, (a, b)


def test_every_registered_method_has_a_colour_of_its_own_at_every_m():
    sizes = sorted({m for experiment in EXPERIMENTS.values() for ms in experiment["methods"].values() for m in ms})
    assert sizes[0] == 2 and sizes[-1] == 1000  # Snelson's fewest to SVGP's most
    for m in sizes:
        for a, b in itertools.combinations(METHODS, 2):
            assert delta_e(color(a, m), color(b, m)) >= VISIBLE, (a, b, m)


def test_a_variant_keeps_its_methods_hue():
    """A variant is its registered method's hue, less saturated: its CIELAB hue angle within a few degrees."""
    variants = variant_methods(load_config(DEFAULT_CONFIG))
    for variant, method in variants.items():
        base, shade = lab(color(method, 300, variants)), lab(color(variant, 300, variants))
        angle = np.degrees(np.arctan2(base[2], base[1]) - np.arctan2(shade[2], shade[1]))
        assert abs((angle + 180) % 360 - 180) < 15, (variant, method)
        assert np.hypot(*shade[1:]) < np.hypot(*base[1:])  # less chroma


@pytest.mark.parametrize("datasets", [["snelson"], ["boston", "energy", "concrete", "wine_red", "yacht"]])
def test_the_learning_curves_legend_fits_below_the_panels(drawn, datasets):
    """Snelson's nine columns on one panel (their legend was wider than the plot) and five panels in two rows."""
    curves = pd.concat(
        [
            pd.DataFrame(
                {
                    "experiment": "uci",
                    "dataset": dataset,
                    "method": method,
                    "M": m,
                    "split": 0,
                    "iteration": [10, 100],
                    "seconds": [0.1, 1.0],
                    "rmse": [1.0, 0.5],
                    "test_ll": -1.0,
                }
            )
            for dataset in datasets
            for method in ("svgp", "gpnet", "fbnn")
            for m in (2, 5, 20)
        ]
    )
    plots.learning_curves(curves, None, "uci", "iteration")
    figure = drawn[0]
    figure.draw_without_rendering()
    legend, page = figure.legends[0].get_window_extent(), figure.bbox
    assert page.x0 <= legend.x0 and legend.x1 <= page.x1 and page.y0 <= legend.y0
    panels = [ax.get_window_extent() for ax in figure.axes if ax.axison]
    assert legend.y1 <= min(panel.y0 for panel in panels)  # below every panel
    assert all(panel.width >= 0.6 * plots.CURVE_PANEL[0] * figure.dpi for panel in panels)  # the panels kept their size
    assert list(legend_colors(figure)) == [f"{name} {m}" for name in ("SVGP", "GPNet", "FBNN") for m in (2, 5, 20)]
