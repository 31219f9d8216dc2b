"""The plan of a study: its training jobs, and each experiment's metrics and output files."""

from dataclasses import dataclass
from typing import Any

from gpstudy import paths
from gpstudy.metrics import TASK_METRICS
from gpstudy.study.datasets import data_plan, dataset_of
from gpstudy.study.schema import ConfigError

OUTPUT_FILES = {  # an experiment's output -> its files
    "tables": [paths.TABLES + ext for ext in (".csv", ".md", ".tex", ".html")] + [paths.PAPER_TABLE],
    "violins": [paths.VIOLINS + ext for ext in (".png", ".pdf")],
    "posteriors": [paths.POSTERIORS + ext for ext in (".png", ".pdf")],
}


def experiment_targets(config: dict[str, Any]) -> list[str]:
    """The files of every experiment that trains something: its learning curves and its ``outputs``."""
    targets = []
    for experiment in sorted({job.experiment for job in study_jobs(config)}):
        targets.append(paths.CURVES_FIGURE.format(experiment=experiment))
        for output in config["experiments"][experiment].get("outputs", []):
            targets += [
                pattern.format(experiment=experiment, metric=metric)
                for pattern in OUTPUT_FILES[output]
                for metric in (experiment_metrics(config, experiment) if "{metric}" in pattern else (None,))
            ]
    return targets


def experiment_metrics(config: dict[str, Any], experiment: str) -> tuple[str, ...]:
    """The test metrics of an experiment's task (``gpstudy.metrics.TASK_METRICS``), one table each."""
    tasks = {dataset_of(config, dataset).task for dataset in config["experiments"][experiment]["datasets"]}
    if len(tasks) != 1:
        raise ConfigError(
            f"invalid configuration:\n  config key $.experiments.{experiment}.datasets: data sets "
            f"of one task, not {', '.join(sorted(tasks))}"
        )
    return TASK_METRICS[tasks.pop()]


@dataclass(frozen=True)
class TrainJob:
    """One training job of a study: a method at one M on a batch of a data set's splits."""

    experiment: str
    dataset: str
    method: str
    M: int
    splits: tuple[int, ...]  # consecutive split indices, trained as one batch

    @property
    def label(self) -> str:
        """The batch's ``{splits}`` wildcard, e.g. ``0-19``."""
        return f"{self.splits[0]}-{self.splits[-1]}"

    def wildcards(self) -> dict[str, str | int]:
        """The job's fields in ``paths.BATCH``."""
        return {
            "experiment": self.experiment,
            "dataset": self.dataset,
            "method": self.method,
            "M": self.M,
            "splits": self.label,
        }


def splits_of(label: str) -> tuple[int, ...]:
    """The split indices of a batch label ``first-last`` (``TrainJob.label``)."""
    first, last = (int(part) for part in label.split("-"))
    return tuple(range(first, last + 1))


def study_jobs(config: dict[str, Any]) -> list[TrainJob]:
    """Every training job of a (validated) configuration: experiment x data set x method x M x batch.

    A data set's splits go in batches of ``splits_per_job`` consecutive splits (all in one when it is
    null). An experiment runs only on its data sets that are also in ``datasets``, and only if
    ``run_experiments`` names it (when set).
    """
    jobs = []
    chosen = config.get("run_experiments") or list(config["experiments"])
    for experiment, spec in ((name, spec) for name, spec in config["experiments"].items() if name in chosen):
        for dataset in (d for d in spec["datasets"] if d in config["datasets"]):
            splits = data_plan(config, dataset).splits
            size = config.get("splits_per_job") or len(splits)
            batches = [splits[start : start + size] for start in range(0, len(splits), size)]
            jobs += [
                TrainJob(experiment, dataset, method, M, batch)
                for method, sizes in spec["methods"].items()
                for M in sizes
                for batch in batches
            ]
    return jobs
