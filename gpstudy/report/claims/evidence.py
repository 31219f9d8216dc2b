"""What a claim is measured on: the study's runs (``results/runs.csv``), the posteriors of a 1-D experiment
(each run's predictions on the plotted grid beside the exact GP's) and each run's distance from the paper's
settings. :meth:`Evidence.values` turns a (data set, method, M, measure) into one number per split, or
raises :class:`NotRun` saying why there is none."""

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from gpstudy.data import load_split
from gpstudy.report.labels import display_names, method_label
from gpstudy.report.results import collect_predictions, read_runs


def run_label(method: str, m: int) -> str:
    """A claim's (method, M) by the registered method's display name, e.g. ``"SVGP 20"`` (the paper's
    claims name no config variant)."""
    return method_label(method, m, display_names())


POSTERIOR_MEASURES = ("mean_error", "sd_error")  # measured on a posterior's grid against the exact GP
RUN_MEASURES = ("rmse", "test_ll")  # read per split from results/runs.csv
HIGHER_IS_BETTER = ("test_ll",)  # every other measure is an error: lower is better
SD_OF = {"y": "var_y", "f": "var_f"}  # whose sd a posterior measure compares: the prediction's or the latent's
MEASURE_NAMES = {
    "rmse": "test RMSE",
    "test_ll": "test log-likelihood",
    "mean_error": "max |mean - exact mean| / exact sd of {sd_of}",
    "sd_error": "max |sd / exact sd - 1| of {sd_of}",
}  # how each measure reads in claims.md


class NotRun(Exception):
    """A check whose runs are absent (or failed): the message says which."""


@dataclass(frozen=True)
class Posterior:
    """A 1-D experiment's posteriors on its plotted grid (split 0).

    Args:
        dataset: the experiment's one data set.
        predictions: columns method, M, x, mean, var_f, var_y (``gpstudy.report.results.collect_predictions``).
        reference: the exact GP on the same grid: columns x, mean, var_f, var_y.
        x_train: the training inputs ``[N]`` in the data's units.
    """

    dataset: str
    predictions: pd.DataFrame
    reference: pd.DataFrame
    x_train: np.ndarray

    def panel(self, method: str, M: int) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The (method, M) predictions and the reference, both sorted by x on the same grid."""
        panel = self.predictions[(self.predictions["method"] == method) & (self.predictions["M"] == M)]
        if panel.empty:
            raise NotRun(f"no predictions of {run_label(method, M)}")
        panel, reference = panel.sort_values("x"), self.reference.sort_values("x")
        if not np.allclose(panel["x"].to_numpy(), reference["x"].to_numpy()):
            raise ValueError(f"{run_label(method, M)}: its plotted grid is not the exact GP's")
        return panel, reference

    def errors(self, method: str, M: int, sd_of: str) -> dict[str, float]:
        """``mean_error`` and ``sd_error`` of (method, M) against the exact GP over the whole grid."""
        panel, reference = self.panel(method, M)
        sd, exact_sd = (np.sqrt(frame[SD_OF[sd_of]].to_numpy()) for frame in (panel, reference))
        mean_error = np.abs(panel["mean"].to_numpy() - reference["mean"].to_numpy()) / exact_sd
        return {"mean_error": float(mean_error.max()), "sd_error": float(np.abs(sd / exact_sd - 1).max())}

    def sd_ratio_near_data(self, method: str, M: int, sd_of: str, near: float) -> float:
        """The median over grid points within ``near`` (x units) of a training input of sd / exact sd."""
        panel, reference = self.panel(method, M)
        x = panel["x"].to_numpy()
        close = np.abs(x[:, None] - self.x_train[None, :]).min(axis=1) <= near
        if not close.any():
            raise ValueError(f"no grid point within {near} of a training input: widen `near`")
        ratio = np.sqrt(panel[SD_OF[sd_of]].to_numpy() / reference[SD_OF[sd_of]].to_numpy())
        return float(np.median(ratio[close]))


@dataclass(frozen=True)
class Evidence:
    """Everything the claims are measured on.

    Args:
        runs: ``results/runs.csv`` (``gpstudy.report.results.read_runs``).
        posteriors: experiment -> its :class:`Posterior`, for the experiments that draw one.
        gaps: ``cell_key(experiment, dataset, method, M)`` -> how the cell's settings differ from the
            paper's (``gpstudy.report.claims.protocol.settings_gaps``); cells at the paper's settings are absent.
    """

    runs: pd.DataFrame
    posteriors: dict[str, Posterior] = field(default_factory=dict)
    gaps: dict[str, str] = field(default_factory=dict)

    def ok_splits(self, experiment: str, dataset: str, method: str, M: int) -> pd.DataFrame:
        """The cell's runs with status ok, by split; :class:`NotRun` if there is none."""
        runs = self.runs
        cell = runs[
            (runs["experiment"] == experiment)
            & (runs["dataset"] == dataset)
            & (runs["method"] == method)
            & (runs["M"] == M)
        ]
        where = f"{run_label(method, M)} on {dataset} ({experiment})"
        if cell.empty:
            raise NotRun(f"no runs of {where}")
        ok = cell[cell["status"] == "ok"]
        if ok.empty:
            raise NotRun(f"every run of {where} failed")
        return ok.set_index("split")

    def values(
        self, experiment: str, dataset: str, method: str, M: int, measure: str, sd_of: str | None = None
    ) -> pd.Series:
        """The measure of a cell per split (a posterior measure: split 0 alone), oriented as measured."""
        runs = self.ok_splits(experiment, dataset, method, M)
        if measure in RUN_MEASURES:
            return runs[measure].astype(float)
        if 0 not in runs.index:
            raise NotRun(f"split 0 of {run_label(method, M)} on {dataset} failed")
        return pd.Series({0: self.posterior(experiment, dataset).errors(method, M, sd_of)[measure]})

    def near_data_ratio(self, experiment: str, dataset: str, method: str, M: int, sd_of: str, near: float) -> float:
        """:meth:`Posterior.sd_ratio_near_data` of a cell whose split 0 ran."""
        if 0 not in self.ok_splits(experiment, dataset, method, M).index:
            raise NotRun(f"split 0 of {run_label(method, M)} on {dataset} failed")
        return self.posterior(experiment, dataset).sd_ratio_near_data(method, M, sd_of, near)

    def posterior(self, experiment: str, dataset: str) -> Posterior:
        """The experiment's posteriors, which must be of ``dataset``."""
        if experiment not in self.posteriors:
            raise NotRun(f"no posteriors of experiment {experiment}")
        posterior = self.posteriors[experiment]
        if posterior.dataset != dataset:
            raise NotRun(f"experiment {experiment} draws {posterior.dataset}, not {dataset}")
        return posterior

    def gap(self, experiment: str, dataset: str, method: str, M: int) -> str | None:
        """How a cell's settings differ from the paper's, or None where they do not."""
        return self.gaps.get(cell_key(experiment, dataset, method, M))


def cell_key(experiment: str, dataset: str, method: str, M: int) -> str:
    """The key of one (experiment, data set, method, M) cell in :attr:`Evidence.gaps`."""
    return f"{experiment}/{dataset}/{method}/M{M}"


def measure_name(measure: str, sd_of: str | None) -> str:
    """How a measure reads in claims.md, e.g. ``max |sd / exact sd - 1| of y``."""
    return MEASURE_NAMES[measure].format(sd_of=sd_of)


def read_evidence(runs: str | Path, posteriors: dict[str, dict], gaps: dict[str, str]) -> Evidence:
    """The evidence of a finished study.

    Args:
        runs: ``results/runs.csv``.
        posteriors: experiment -> dataset (its one data set), reference (the exact GP's CSV on the grid),
            split (split 0's file) and runs (its runs' ``metrics.json`` files, predictions beside them).
        gaps: as :attr:`Evidence.gaps`.
    """
    drawn = {}
    for experiment, files in posteriors.items():
        split = load_split(files["split"])
        drawn[experiment] = Posterior(
            files["dataset"],
            collect_predictions(files["runs"]),
            pd.read_csv(files["reference"]),
            split.original_x(split.x_train)[:, 0],
        )
    return Evidence(read_runs(runs), drawn, gaps)
