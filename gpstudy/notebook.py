"""The study's methods from a notebook or script: a registered data set as arrays, and a method fitted on
arrays with the study's defaults (``gpstudy.study.DEFAULT_CONFIG``), no split files, Snakemake or checkout.

    from gpstudy.notebook import fit, load_dataset
    snelson = load_dataset("snelson")                   # fetched (checksummed) into data/raw/snelson
    model = fit(snelson.x, snelson.y, "svgp", M=20, dataset="snelson", iterations=2000)
    model.predict([[-1.0], [2.5]])                      # mean, var_f, var_y in the data's units

Settings resolve as the pipeline's (:func:`gpstudy.study.run_settings`): config.yaml's ``training``, the
method's defaults, ``dataset``'s options when given, then the keywords. Training is the pipeline's
(:func:`gpstudy.training.fit`), on x and y standardized by their own mean and std, as the pipeline's splits.
"""

import contextlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from gpstudy import paths, training
from gpstudy.data import DataError, Dataset, Split, Table, fetch_dataset, non_finite, read_table
from gpstudy.data.dataset import numeric_frame
from gpstudy.data.prepare import checked_raw_folder
from gpstudy.data.split import moments
from gpstudy.likelihoods import LIKELIHOODS
from gpstudy.methods import Method
from gpstudy.report.labels import display_names
from gpstudy.report.palette import color
from gpstudy.report.plots import posterior_panel
from gpstudy.runtime.environment import DEFAULT_THREADS, torch_threads
from gpstudy.study import DEFAULT_CONFIG, RunSettings, check_settings, data_plan, dataset_of, load_config, run_settings
from gpstudy.training.progress import bars, watched
from gpstudy.training.run import build_batch, plot_predictions

ARRAYS = Dataset("arrays", read=None, task="regression")  # what fit's x and y are when no `dataset` names them
PROGRESS_LOGGER = "gpstudy"  # its INFO lines are shown while fit trains (gpstudy.training.progress)
PLOT_BAND_STD = 2.0  # Fitted.plot's band: mean ± this many predictive standard deviations
PLOT_POINTS = 300  # Fitted.plot's grid points
PLOT_MARGIN = 0.1  # Fitted.plot's grid reaches this share of the training inputs' range beyond each end
PLOT_SIZE = (6.0, 3.5)  # inches: the figure Fitted.plot makes when given no axes
log = logging.getLogger(__name__)


@dataclass
class Fitted:
    """A method trained on arrays by :func:`fit`, with what it was trained on and how.

    Attributes:
        method: the trained method (``gpstudy.methods.Method``); its tensors carry a leading batch
            dimension of one, and work in standardized units.
        settings: every resolved setting (``gpstudy.study.RunSettings``).
        split: the training data standardized, with the statistics that map back to the data's units.
        curve: the learning curve, one dict per evaluation (iteration, seconds, objective).
        seconds: training seconds.
        threads: torch's CPU threads it trained with.
    """

    method: Method
    settings: RunSettings
    split: Split
    curve: list[dict]
    seconds: float
    threads: int

    def __repr__(self) -> str:
        return (
            f"Fitted({self.settings.method}, M={self.settings.M}, {self.settings.iterations} iterations "
            f"in {self.seconds:.1f} s on {self.settings.device} with {self.threads} torch CPU thread(s))"
        )

    def predict(self, x: Any) -> pd.DataFrame:
        """The predictive distribution at ``x`` (``[n, D]`` or, for one input, ``[n]``; numpy, torch or a
        list), in the data's units: one row per point with its inputs (``x``, or ``x0``, ``x1``, ...), the
        mean, the latent function's variance ``var_f`` and the observations' ``var_y`` (noise included)."""
        x = _inputs(x, "x", self.split.x_train.shape[1])
        return plot_predictions(self.method, [replace(self.split, x_plot=(x - self.split.x_mean) / self.split.x_std)])[
            0
        ]

    def plot(self, ax: Axes | None = None, band_std: float = PLOT_BAND_STD, points: int = PLOT_POINTS) -> Axes:
        """Plot a fit of one input: the predictive mean and the band :math:`\\mu(x) \\pm 2 \\sigma_y(x)`
        (``band_std`` of them; :math:`\\sigma_y^2` is ``var_y``, noise included) on ``points`` inputs over the
        training inputs' range and ``PLOT_MARGIN`` of it beyond, in the method's and M's colour of the study's
        figures (``gpstudy.report.palette.color``), and the training data, in the data's units.

        Args:
            ax: drawn on; None: a new figure's (show it in a notebook with ``ax.figure``).
            band_std: the band's half width in predictive standard deviations.
            points: grid points.

        Raises:
            ValueError: the fit has more than one input.
        """
        if self.split.x_train.shape[1] != 1:
            raise ValueError(f"plot draws a fit of one input; this one has {self.split.x_train.shape[1]}")
        x, y = self.split.original_x(self.split.x_train)[:, 0], self.split.original_y(self.split.y_train)
        margin = PLOT_MARGIN * (x.max() - x.min())
        grid = np.linspace(x.min() - margin, x.max() + margin, points)
        ax = ax if ax is not None else Figure(figsize=PLOT_SIZE, layout="constrained").subplots()
        method, m = self.settings.method, self.settings.M
        posterior_panel(ax, self.predict(grid), x, y, color(method, m), band_std)
        ax.set(xlabel="x", ylabel="y", title=f"{display_names().get(method, method)}, M = {m}, ±{band_std:g} std")
        return ax


def fit(
    x: Any,
    y: Any,
    method: str,
    M: int,
    *,
    dataset: str | None = None,
    configfiles: Sequence[str | Path] = (),
    seed: int | None = None,
    progress: bool = True,
    threads: int = DEFAULT_THREADS,
    **settings: Any,
) -> Fitted:
    """Train ``method`` with ``M`` inducing or measurement points on ``x`` ``[N, D]`` (or ``[N]``: one input)
    and ``y`` ``[N]`` (numpy, torch or lists), a regression, with the study's settings.

    Args:
        x: training inputs, in the data's units (standardized here, as the pipeline's splits are).
        y: training targets.
        method: a registered method (svgp, gpnet, fbnn, odvgp, autogp, exact) or a variant the config defines.
        M: inducing (SVGP) or measurement (GPNet, FBNN) points.
        dataset: take this data set's settings from the config too (``dataset_options``: e.g. snelson's
            batch size, pretraining, fixed hyperparameters and box); None: the config's defaults alone.
        configfiles: config files merged over ``gpstudy.study.DEFAULT_CONFIG``, as ``--configfile``.
        seed: the seed of every random draw; None: the config's.
        progress: show training's progress lines on stderr (iteration k of T, it/s, elapsed, ETA and the
            objective, every ``eval_every`` iterations and every ``gpstudy.training.progress.LOG_SECONDS``), unless
            logging already shows them, and a tqdm bar in a terminal or a Jupyter notebook.
        threads: torch's CPU threads while it pretrains and trains (``gpstudy.runtime.environment.DEFAULT_THREADS``,
            a pipeline job's; the caller's count is restored after); said in the first progress line.
        **settings: any training setting (``iterations``, ``lr``, ``batch_size``, ``eval_every``, ``device``,
            ...) or option of the method (``gpstudy settings`` lists them), overriding the config's.

    Raises:
        gpstudy.study.SettingsError: a keyword that is no setting (the message lists the valid ones), a
            value the schema refuses, or settings that do not fit together.
        ValueError: x and y of other shapes, a None setting, threads below 1, or a classification likelihood.
        gpstudy.data.DataError: a missing or infinite value in x or y.
    """
    if unset := sorted(key for key, value in settings.items() if value is None):
        raise ValueError(f"fit: {', '.join(unset)} = None; give a value, or leave the keyword out for the config's")
    config = load_config(DEFAULT_CONFIG, *configfiles, overrides=None if seed is None else {"seed": seed})
    resolved = run_settings(config, dataset, method=method, M=M, **settings)
    if LIKELIHOODS[resolved.likelihood].task != "regression":
        raise ValueError(
            f"fit trains regressions; likelihood {resolved.likelihood!r} is for classification "
            "(train it through the pipeline: gpstudy train)"
        )
    check_settings(resolved, ARRAYS if dataset is None else dataset_of(config, dataset))
    split = _training_split(x, y)
    with _progress_shown(progress), bars(progress and watched()), torch_threads(threads):
        log.info("fit: %s at M = %d with %d torch CPU thread(s) (threads=)", method, M, threads)
        problem, trained, _ = build_batch({0: split}, resolved)  # the pretraining too, where the settings pretrain
        curve, seconds = training.fit(
            trained,
            problem.x_train,
            problem.y_train,
            iterations=resolved.iterations,
            batch_size=resolved.batch_size,
            lr=resolved.lr,
            generators=problem.generators,
            evaluate=dict,
            eval_every=resolved.eval_every,  # dict(): no test set, no metrics
            torch_compile=resolved.torch_compile,
        )
    return Fitted(trained, resolved, split, curve, seconds, threads)


def load_dataset(name: str, mirror: str | None = None, configfiles: Sequence[str | Path] = ()) -> Table:
    """A registered data set (or one the config files define) as read from its files, in the data's units:
    ``x`` ``[N, D]``, ``y`` ``[N]`` and, for Snelson, the plot grid ``x_plot``. The files are fetched
    (checksummed) into ``data/raw/<name>`` under the working directory, as ``gpstudy prepare`` does, once.

    Args:
        name: the data set.
        mirror: a local folder or file:// URL laid out as ``<mirror>/<name>/<file>``, tried before the network.
        configfiles: config files merged over ``gpstudy.study.DEFAULT_CONFIG``, as ``--configfile``.
    """
    config = load_config(DEFAULT_CONFIG, *configfiles)
    spec, protocol = dataset_of(config, name), data_plan(config, name).protocol
    manifest = Path(paths.RAW_MANIFEST.format(dataset=name, protocol=protocol))
    if not manifest.exists():
        fetch_dataset(spec, protocol, manifest.parent, manifest, mirror=mirror)
    return read_table(spec, protocol, checked_raw_folder(manifest, spec.files(protocol)))


def _inputs(x: Any, name: str, columns: int | None = None) -> np.ndarray:
    """``x`` as float64 ``[n, D]`` (one input: ``[n]`` taken as ``[n, 1]``), ``columns`` of them when given."""
    values = _array(x, name)
    values = values.reshape(-1, 1) if values.ndim == 1 else values
    if values.ndim != 2 or (columns is not None and values.shape[1] != columns):
        wanted = f"[n, {columns}]" if columns is not None else "[n, D] or [n]"
        raise ValueError(f"{name} has shape {list(values.shape)}; expected {wanted}")
    return values


def _array(values: Any, name: str) -> np.ndarray:
    """Numbers from numpy, torch (any device), pandas or lists as a float64 array; a pandas column of no numbers
    is refused as the pipeline refuses a table's (``gpstudy.data.dataset.numeric_frame``, naming ``name``)."""
    if isinstance(values, pd.Series | pd.DataFrame):
        values = numeric_frame(pd.DataFrame(values), f"fit's {name}")
    return np.asarray(values.detach().cpu() if isinstance(values, torch.Tensor) else values, dtype=np.float64)


def _training_split(x: Any, y: Any) -> Split:
    """``x`` and ``y`` as a split of training rows alone, standardized by their own mean and std.

    Raises:
        DataError: a missing or infinite value in x or y (naming its row).
    """
    x = _inputs(x, "x")
    y = _array(y, "y")
    y = y.reshape(-1) if y.ndim == 2 and y.shape[1] == 1 else y
    if y.shape != (len(x),):
        raise ValueError(f"y has shape {list(y.shape)}; expected [{len(x)}] (one target per row of x)")
    raw = Split(
        x,
        y,
        x[:0],
        y[:0],
        np.zeros(x.shape[1]),
        np.ones(x.shape[1]),
        0.0,
        1.0,
        info={"dataset": "arrays", "n_train": len(x), "n_test": 0},
    )
    if problem := non_finite(raw):
        raise DataError(f"fit's x and y: {problem.replace('_train', '')}")
    (x_mean, x_std), (y_mean, y_std) = moments(x), moments(y)
    return replace(
        raw,
        x_train=(x - x_mean) / x_std,
        y_train=(y - y_mean) / y_std,
        x_mean=x_mean,
        x_std=x_std,
        y_mean=float(y_mean),
        y_std=float(y_std),
    )  # finite: moments neither overflows nor returns std 0


@contextlib.contextmanager
def _progress_shown(shown: bool) -> Iterator[None]:
    """Within: the package's INFO lines on stderr, unless not ``shown`` or logging already shows them."""
    logger = logging.getLogger(PROGRESS_LOGGER)
    if not shown or logger.isEnabledFor(logging.INFO):
        yield
        return
    handler, before = logging.StreamHandler(), (logger.level, logger.propagate)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # the root's handlers would print each line again
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before[0])
        logger.propagate = before[1]
