"""Figures from the tidy result tables: UCI violins (paper Fig. 3), Snelson posteriors (Fig. 4), learning curves.

Figures are built on ``matplotlib.figure.Figure`` without pyplot, so no GUI backend is involved and no
figure outlives its function.
"""

import itertools
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from gpstudy.io import atomic_path
from gpstudy.metrics import METRIC_NAMES, TASK_METRICS
from gpstudy.paper import METRICS, paper_columns, paper_datasets, pbp_table
from gpstudy.report.labels import dataset_label, display_names, method_label
from gpstudy.report.palette import REFERENCE, color
from gpstudy.report.tables import in_order, mean_and_se

DPI = 150  # resolution of the PNG files
VIOLIN_PANEL = (2.2, 3.0)  # inches: width and height of one violin panel (two rows of them)
SNELSON_PANEL = (3.0, 2.4)  # inches: width and height of one Snelson panel
CURVE_PANEL = (3.2, 2.6)  # inches: width and height of one learning-curve panel
BAND_STD = 3.0  # Snelson bands span mean ± this many predictive standard deviations (paper Fig. 4)
CURVE_PANELS_PER_ROW = 4  # learning-curve panels side by side
LOG_ITERATIONS_ABOVE = 100.0  # the x axis is logarithmic when max / min positive value exceeds this
CURVE_AXES = {"iteration": "Iteration", "seconds": "Training seconds"}  # learning curves' x axes and labels
BAND_ALPHA = 0.3  # opacity of a predictive band
LEGEND_MARGIN = 0.2  # inches beside a legend wider than the panels above it


def violins(
    runs: pd.DataFrame,
    experiment: str,
    png: Path,
    pdf: Path,
    variant_labels: Mapping[str, str] | None = None,
    variants: Mapping[str, str] | None = None,
) -> None:
    """Figure 3: per data set, violins over splits of the task's metrics (``drawn_metrics``), a row each: RMSE
    (a classification: error rate) on top, test log-likelihood below; PBP's mean ± se beside where the
    paper has it.

    Args:
        runs: ``results/runs.csv``; one panel per data set of the ``experiment``'s rows, whose
            ``status == "ok"`` rows are drawn; the number of the others is noted in the title.
        experiment: the experiment drawn (the paper's UCI study: ``"uci"``).
        png: output PNG.
        pdf: output PDF.
        variant_labels: the config's variants' display names (``gpstudy.report.labels.display_names``).
        variants: the config's variants' registered methods (``gpstudy.report.palette.variant_methods``).
    """
    names = display_names(variant_labels)
    uci = runs[runs["experiment"] == experiment]
    ok = uci[uci["status"] == "ok"]
    ok = ok.assign(label=[method_label(method, m, names) for method, m in zip(ok["method"], ok["M"])])
    datasets = in_order(uci["dataset"], paper_datasets()["dataset"])
    columns = in_order(zip(uci["method"], uci["M"]), paper_columns())
    colors = {method_label(method, m, names): color(method, m, variants) for method, m in columns}
    labels = list(colors)
    metrics = drawn_metrics(uci)
    pbp = {metric: pbp_table(metric).set_index("dataset") for metric in metrics if metric in METRICS}
    if any(dataset in table.index for table in pbp.values() for dataset in datasets):
        labels.append("PBP")
        colors["PBP"] = REFERENCE
    figure = Figure(figsize=(VIOLIN_PANEL[0] * len(datasets), VIOLIN_PANEL[1] * len(metrics)), layout="constrained")
    axes = figure.subplots(len(metrics), len(datasets), squeeze=False)
    for row, metric in enumerate(metrics):
        for ax, dataset in zip(axes[row], datasets):
            sns.violinplot(
                data=ok[ok["dataset"] == dataset],
                x="label",
                y=metric,
                order=labels,
                hue="label",
                hue_order=labels,
                palette=colors,
                saturation=1,  # the palette's colours as they are (seaborn dulls them by 0.75)
                cut=0,
                inner="point",
                legend=False,
                ax=ax,
            )
            if metric in pbp and dataset in pbp[metric].index:
                mean, se = pbp[metric].loc[dataset, ["mean", "se"]]
                ax.errorbar(labels.index("PBP"), mean, yerr=se, fmt="o", color=REFERENCE, capsize=3)
            ax.set(xlabel="", ylabel="", title=dataset_label(dataset) if row == 0 else "")
            ax.tick_params(axis="x", labelrotation=90, labelbottom=row == len(metrics) - 1)
        axes[row, 0].set_ylabel(METRIC_NAMES[metric])
    failed = len(uci) - len(ok)
    figure.suptitle(
        "\n".join(
            ["Violins over splits"]
            + (["PBP: mean ± standard error"] if "PBP" in labels else [])
            + ([f"failed runs not shown: {failed}"] if failed else [])
        )
    )
    _save(figure, png, pdf)


def posteriors(
    predictions: pd.DataFrame,
    reference: pd.DataFrame,
    x_train: np.ndarray,
    y_train: np.ndarray,
    png: Path,
    pdf: Path,
    variant_labels: Mapping[str, str] | None = None,
    variants: Mapping[str, str] | None = None,
) -> None:
    """Figure 4: a grid of posteriors, rows methods (SVGP, GPNet, FBNN), columns M (ascending).

    Each panel shows the training points, the method's predictive mean and ± ``BAND_STD`` standard
    deviation band (from ``var_y``) in its colour (``gpstudy.report.palette.color``), and the exact GP's
    mean and band as dashed lines.

    Args:
        predictions: columns method, M, x, mean, var_y, one row per grid point and (method, M).
        reference: the exact GP on the same grid: columns x, mean, var_y.
        x_train: training inputs ``[N]``.
        y_train: training outputs ``[N]``.
        png: output PNG.
        pdf: output PDF.
        variant_labels: the config's variants' display names (``gpstudy.report.labels.display_names``).
        variants: the config's variants' registered methods (``gpstudy.report.palette.variant_methods``).
    """
    names = display_names(variant_labels)
    methods = in_order(predictions["method"], names)
    sizes = sorted(predictions["M"].unique())
    size = (SNELSON_PANEL[0] * len(sizes), SNELSON_PANEL[1] * len(methods))
    figure = Figure(figsize=size, layout="constrained")
    axes = figure.subplots(len(methods), len(sizes), sharex=True, sharey=True, squeeze=False)
    for (method, m), ax in zip(itertools.product(methods, sizes), axes.flat):
        x, mean, lower, upper = _mean_and_band(reference, BAND_STD)
        ax.plot(x, mean, "--", color=REFERENCE, linewidth=1.0)
        ax.plot(x, lower, "--", x, upper, "--", color=REFERENCE, linewidth=0.7)
        panel = predictions[(predictions["method"] == method) & (predictions["M"] == m)]
        posterior_panel(ax, panel, x_train, y_train, color(method, m, variants), BAND_STD)
        ax.set_title(f"{names.get(method, method)}, M = {m}")
    for ax in axes[-1]:
        ax.set_xlabel("x")
    for ax in axes[:, 0]:
        ax.set_ylabel("y")
    figure.legend(
        handles=[
            Line2D([], [], color=REFERENCE, marker=".", linestyle="", label="training data"),
            Line2D([], [], color=REFERENCE, linestyle="--", label=f"exact GP, ±{BAND_STD:g} std"),
            Patch(color="grey", alpha=BAND_ALPHA, label=f"the panel's method, ±{BAND_STD:g} std"),
        ],
        loc="outside lower center",
        ncols=3,
    )
    _save(figure, png, pdf)


def learning_curves(
    curves: pd.DataFrame,
    png: Path,
    experiment: str,
    axis: str,
    variant_labels: Mapping[str, str] | None = None,
    variants: Mapping[str, str] | None = None,
) -> None:
    """Test RMSE (a classification: error rate) against iteration or training seconds per (method, M):
    mean over splits with a ± standard error band.

    Args:
        curves: one row per evaluation of a run: experiment, dataset, method, M, split, iteration,
            seconds, rmse or error_rate.
        png: output PNG.
        experiment: the experiment drawn, e.g. ``"uci"``; one panel per data set.
        axis: ``"iteration"``, or ``"seconds"``: the mean over splits of the training seconds at each
            evaluation (wall clock, as the ODVGP paper's Figure 2).
        variant_labels: the config's variants' display names (``gpstudy.report.labels.display_names``).
        variants: the config's variants' registered methods (``gpstudy.report.palette.variant_methods``).
    """
    runs = curves[curves["experiment"] == experiment]
    metric = drawn_metrics(runs)[0]
    keys = ["dataset", "method", "M", "iteration"]
    stats = mean_and_se(runs, metric, keys).merge(runs.groupby(keys, as_index=False)["seconds"].mean(), on=keys)
    datasets = in_order(stats["dataset"], paper_datasets()["dataset"])
    columns = in_order(zip(stats["method"], stats["M"]), paper_columns())
    colors = {column: color(*column, variants) for column in columns}
    n_columns = min(len(datasets), CURVE_PANELS_PER_ROW)
    n_rows = math.ceil(len(datasets) / n_columns)
    figure = Figure(figsize=(CURVE_PANEL[0] * n_columns, CURVE_PANEL[1] * n_rows), layout="constrained")
    axes = figure.subplots(n_rows, n_columns, squeeze=False)
    positive = stats.loc[stats[axis] > 0, axis]
    log_scale = not positive.empty and positive.max() / positive.min() > LOG_ITERATIONS_ABOVE
    for ax, dataset in zip(axes.flat, datasets):
        for method, m in columns:
            line = stats[(stats["dataset"] == dataset) & (stats["method"] == method) & (stats["M"] == m)]
            ax.plot(line[axis], line["mean"], color=colors[method, m])
            ax.fill_between(
                line[axis],
                line["mean"] - line["se"],
                line["mean"] + line["se"],
                color=colors[method, m],
                alpha=0.25,
                linewidth=0,
            )
        if log_scale:
            ax.set_xscale("log", nonpositive="mask")
        ax.set(title=dataset_label(dataset), xlabel=CURVE_AXES[axis], ylabel=METRIC_NAMES[metric])
    for ax in axes.flat[len(datasets) :]:
        ax.set_axis_off()
    names = display_names(variant_labels)
    by_method = {  # the methods in display_names' order (Figure 4's rows), each one's Ms ascending
        method: sorted(m for name, m in columns if name == method) for method in in_order(stats["method"], names)
    }
    rows = max(len(sizes) for sizes in by_method.values())
    handles = [  # a column per method, its Ms down it (blank entries below a method of fewer Ms)
        Line2D([], [], color=colors[method, m], label=method_label(method, m, names))
        if m is not None
        else Line2D([], [], linestyle="", label=" ")
        for method, sizes in by_method.items()
        for m in sizes + [None] * (rows - len(sizes))
    ]
    legend = figure.legend(handles=handles, loc="outside lower center", ncols=len(by_method))
    _make_room(figure, legend)
    _save(figure, png)


def drawn_metrics(runs: pd.DataFrame) -> tuple[str, ...]:
    """The metrics (``gpstudy.metrics.TASK_METRICS``) of the task whose first metric ``runs`` holds values
    of (a regression's RMSE, a classification's error rate); a regression's where none has any."""
    for metrics in TASK_METRICS.values():
        if metrics[0] in runs and runs[metrics[0]].notna().any():
            return metrics
    return TASK_METRICS["regression"]


def posterior_panel(
    ax: Axes,
    predictions: pd.DataFrame,
    x_train: np.ndarray,
    y_train: np.ndarray,
    line_color: tuple[float, float, float],
    band_std: float,
) -> None:
    """Draw a 1-D predictive distribution on ``ax``: the mean and the band :math:`\\mu(x) \\pm k \\sigma_y(x)`
    (:math:`k` = ``band_std``, :math:`\\sigma_y^2` = ``var_y``, noise included) in ``line_color``, and the
    training points ``x_train``, ``y_train`` ``[N]`` in ``palette.REFERENCE``.

    Args:
        ax: the axes drawn on.
        predictions: columns x, mean, var_y, one row per point, in any order.
        x_train: training inputs ``[N]``.
        y_train: training outputs ``[N]``.
        line_color: the mean's and the band's colour (``gpstudy.report.palette.color``).
        band_std: the band's half width in predictive standard deviations.
    """
    x, mean, lower, upper = _mean_and_band(predictions, band_std)
    ax.fill_between(x, lower, upper, color=line_color, alpha=BAND_ALPHA, linewidth=0)
    ax.plot(x, mean, color=line_color)
    ax.scatter(x_train, y_train, s=3, color=REFERENCE, zorder=3)


def _mean_and_band(frame: pd.DataFrame, band_std: float) -> tuple[pd.Series, pd.Series, pd.Series, pd.Series]:
    """x, mean and the band mean ± ``band_std`` sqrt(var_y) of a prediction frame, sorted by x."""
    frame = frame.sort_values("x")
    half_width = band_std * np.sqrt(frame["var_y"])
    return frame["x"], frame["mean"], frame["mean"] - half_width, frame["mean"] + half_width


def _make_room(figure: Figure, legend: Legend) -> None:
    """Grow ``figure`` by the height of its ``legend`` below the axes, and to the legend's width where it is
    wider, so that the panels keep their size and the legend fits."""
    figure.draw_without_rendering()
    box = legend.get_window_extent()
    width, height = figure.get_size_inches()
    figure.set_size_inches(max(width, box.width / figure.dpi + LEGEND_MARGIN), height + box.height / figure.dpi)


def _save(figure: Figure, *paths: Path) -> None:
    """Save ``figure`` to each path, in the format its extension names."""
    for path in paths:
        with atomic_path(path, suffix=Path(path).suffix) as tmp:
            figure.savefig(tmp, dpi=DPI)
