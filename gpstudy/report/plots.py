"""Figures from the tidy result tables: UCI violins (paper Fig. 3), Snelson posteriors (Fig. 4), learning curves.

Figures are built on ``matplotlib.figure.Figure`` without pyplot, so no GUI backend is involved and no
figure outlives its function.
"""

import itertools
import math
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from gpstudy.io import atomic_path
from gpstudy.metrics import METRIC_NAMES, TASK_METRICS
from gpstudy.paper import METRICS, paper_columns, paper_datasets, pbp_table
from gpstudy.report.labels import dataset_label, display_names, method_label
from gpstudy.report.tables import in_order, mean_and_se

DPI = 150  # resolution of the PNG files
VIOLIN_PANEL = (2.2, 3.0)  # inches: width and height of one violin panel (two rows of them)
SNELSON_PANEL = (3.0, 2.4)  # inches: width and height of one Snelson panel
CURVE_PANEL = (3.2, 2.6)  # inches: width and height of one learning-curve panel
BAND_STD = 3.0  # Snelson bands span mean ± this many predictive standard deviations (paper Fig. 4)
CURVE_PANELS_PER_ROW = 4  # learning-curve panels side by side
LOG_ITERATIONS_ABOVE = 100.0  # the x axis is logarithmic when max / min positive value exceeds this
CURVE_AXES = {"iteration": "Iteration", "seconds": "Training seconds"}  # learning curves' x axes and labels


def violins(
    runs: pd.DataFrame, experiment: str, png: Path, pdf: Path, variant_labels: Mapping[str, str] | None = None
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
    """
    names = display_names(variant_labels)
    uci = runs[runs["experiment"] == experiment]
    ok = uci[uci["status"] == "ok"]
    ok = ok.assign(label=[method_label(method, m, names) for method, m in zip(ok["method"], ok["M"])])
    datasets = in_order(uci["dataset"], paper_datasets()["dataset"])
    labels = [method_label(*column, names) for column in in_order(zip(uci["method"], uci["M"]), paper_columns())]
    metrics = drawn_metrics(uci)
    pbp = {metric: pbp_table(metric).set_index("dataset") for metric in metrics if metric in METRICS}
    if any(dataset in table.index for table in pbp.values() for dataset in datasets):
        labels.append("PBP")
    colors = _colors(labels)
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
                cut=0,
                inner="point",
                legend=False,
                ax=ax,
            )
            if metric in pbp and dataset in pbp[metric].index:
                mean, se = pbp[metric].loc[dataset, ["mean", "se"]]
                ax.errorbar(labels.index("PBP"), mean, yerr=se, fmt="o", color="black", capsize=3)
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
) -> None:
    """Figure 4: a grid of posteriors, rows methods (SVGP, GPNet, FBNN), columns M (ascending).

    Each panel shows the training points, the method's predictive mean and ± ``BAND_STD`` standard
    deviation band (from ``var_y``), and the exact GP's mean and band as dashed lines.

    Args:
        predictions: columns method, M, x, mean, var_y, one row per grid point and (method, M).
        reference: the exact GP on the same grid: columns x, mean, var_y.
        x_train: training inputs ``[N]``.
        y_train: training outputs ``[N]``.
        png: output PNG.
        pdf: output PDF.
        variant_labels: the config's variants' display names (``gpstudy.report.labels.display_names``).
    """
    names = display_names(variant_labels)
    methods = in_order(predictions["method"], names)
    sizes = sorted(predictions["M"].unique())
    colors = _colors(methods)
    size = (SNELSON_PANEL[0] * len(sizes), SNELSON_PANEL[1] * len(methods))
    figure = Figure(figsize=size, layout="constrained")
    axes = figure.subplots(len(methods), len(sizes), sharex=True, sharey=True, squeeze=False)
    for (method, m), ax in zip(itertools.product(methods, sizes), axes.flat):
        panel = predictions[(predictions["method"] == method) & (predictions["M"] == m)]
        x, mean, lower, upper = _mean_and_band(reference)
        ax.plot(x, mean, "k--", linewidth=1.0)
        ax.plot(x, lower, "k--", x, upper, "k--", linewidth=0.7)
        x, mean, lower, upper = _mean_and_band(panel)
        ax.fill_between(x, lower, upper, color=colors[method], alpha=0.3, linewidth=0)
        ax.plot(x, mean, color=colors[method])
        ax.scatter(x_train, y_train, s=3, color="black", zorder=3)
        ax.set_title(f"{names.get(method, method)}, M = {m}")
    for ax in axes[-1]:
        ax.set_xlabel("x")
    for ax in axes[:, 0]:
        ax.set_ylabel("y")
    figure.legend(
        handles=[
            Line2D([], [], color="black", marker=".", linestyle="", label="training data"),
            Line2D([], [], color="black", linestyle="--", label=f"exact GP, ±{BAND_STD:g} std"),
            *(Line2D([], [], color=colors[method], label=names.get(method, method)) for method in methods),
        ],
        loc="outside lower center",
        ncols=2 + len(methods),
    )
    _save(figure, png, pdf)


def learning_curves(
    curves: pd.DataFrame, png: Path, experiment: str, axis: str, variant_labels: Mapping[str, str] | None = None
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
    """
    runs = curves[curves["experiment"] == experiment]
    metric = drawn_metrics(runs)[0]
    keys = ["dataset", "method", "M", "iteration"]
    stats = mean_and_se(runs, metric, keys).merge(runs.groupby(keys, as_index=False)["seconds"].mean(), on=keys)
    datasets = in_order(stats["dataset"], paper_datasets()["dataset"])
    columns = in_order(zip(stats["method"], stats["M"]), paper_columns())
    colors = _colors(columns)
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
    figure.legend(
        handles=[Line2D([], [], color=colors[column], label=method_label(*column, names)) for column in columns],
        loc="outside right upper",
    )
    _save(figure, png)


def drawn_metrics(runs: pd.DataFrame) -> tuple[str, ...]:
    """The metrics (``gpstudy.metrics.TASK_METRICS``) of the task whose first metric ``runs`` holds values
    of (a regression's RMSE, a classification's error rate); a regression's where none has any."""
    for metrics in TASK_METRICS.values():
        if metrics[0] in runs and runs[metrics[0]].notna().any():
            return metrics
    return TASK_METRICS["regression"]


def _colors(keys: Iterable) -> dict:
    """One colour-blind-safe colour per key, in order."""
    keys = list(keys)
    return dict(zip(keys, sns.color_palette("colorblind", len(keys))))


def _mean_and_band(frame: pd.DataFrame) -> tuple[pd.Series, pd.Series, pd.Series, pd.Series]:
    """x, mean and the band mean ± ``BAND_STD`` sqrt(var_y) of a prediction frame, sorted by x."""
    frame = frame.sort_values("x")
    half_width = BAND_STD * np.sqrt(frame["var_y"])
    return frame["x"], frame["mean"], frame["mean"] - half_width, frame["mean"] + half_width


def _save(figure: Figure, *paths: Path) -> None:
    """Save ``figure`` to each path, in the format its extension names."""
    for path in paths:
        with atomic_path(path, suffix=Path(path).suffix) as tmp:
            figure.savefig(tmp, dpi=DPI)
