"""Study configuration: validated against ``config.schema.yaml`` before any job runs."""

from dataclasses import dataclass
from importlib import resources
from typing import Any

import jsonschema
import yaml

from gpstudy.data.registry import DATASETS, get_dataset
from gpstudy.methods import METHODS


class ConfigError(ValueError):
    """A configuration that does not fit the schema; the message names the key."""


@dataclass(frozen=True)
class DataPlan:
    """How one data set is split in a study."""

    protocol: str  # random | index_files | given
    splits: tuple[int, ...]  # split indices
    train_size: int | None = None  # random protocol: training rows (default int(0.9 N))
    test_size: int | None = None  # random protocol: test rows (default the rest)


def load_schema() -> dict:
    """The JSON schema of a study configuration."""
    return yaml.safe_load(resources.files("gpstudy").joinpath("config.schema.yaml").read_text())


def validate_config(config: dict[str, Any]) -> None:
    """Check a configuration against the schema and the data set registry.

    Raises:
        ConfigError: naming the offending key (e.g. ``$.datasets[1]``) and what is wrong with it.
    """
    errors = sorted(jsonschema.Draft202012Validator(load_schema()).iter_errors(config),
                    key=lambda e: list(e.absolute_path))
    if errors:
        raise ConfigError("invalid configuration:\n" + "\n".join(
            f"  config key {e.json_path}: {e.message}" for e in errors))
    named = [("datasets", config["datasets"], DATASETS, "data set"),
             ("dataset_options", config.get("dataset_options", {}), DATASETS, "data set"),
             ("method_options", config.get("method_options", {}), METHODS, "method")]
    for name, experiment in config.get("experiments", {}).items():
        named += [(f"experiments.{name}.datasets", experiment["datasets"], DATASETS, "data set"),
                  (f"experiments.{name}.methods", experiment["methods"], METHODS, "method")]
    for key, names, registry, kind in named:
        for index, name in enumerate(names):
            if name not in registry:
                where = f"$.{key}[{index}]" if isinstance(names, list) else f"$.{key}.{name}"
                raise ConfigError(f"invalid configuration:\n  config key {where}: unknown {kind} "
                                  f"{name!r}; known: {', '.join(sorted(registry))}")


def data_plan(config: dict[str, Any], name: str) -> DataPlan:
    """The protocol and splits of data set ``name`` under a (validated) configuration."""
    options = config.get("dataset_options", {}).get(name, {})
    registered = get_dataset(name).protocol
    protocol = options.get("protocol", registered if registered == "given" else config["split_protocol"])
    splits = 1 if protocol == "given" else options.get("splits", config["splits"])
    return DataPlan(protocol, tuple(range(splits)), options.get("train_size"), options.get("test_size"))


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
        return {"experiment": self.experiment, "dataset": self.dataset, "method": self.method, "M": self.M,
                "splits": self.label}


def splits_of(label: str) -> tuple[int, ...]:
    """The split indices of a batch label ``first-last`` (``TrainJob.label``)."""
    first, last = (int(part) for part in label.split("-"))
    return tuple(range(first, last + 1))


def study_jobs(config: dict[str, Any]) -> list[TrainJob]:
    """Every training job of a (validated) configuration: experiment x data set x method x M x batch.

    A data set's splits go in batches of ``splits_per_job`` consecutive splits (all in one when it is
    null). An experiment runs only on its data sets that are also in ``datasets``.
    """
    jobs = []
    for experiment, spec in config["experiments"].items():
        for dataset in (d for d in spec["datasets"] if d in config["datasets"]):
            splits = data_plan(config, dataset).splits
            size = config.get("splits_per_job") or len(splits)
            batches = [splits[start:start + size] for start in range(0, len(splits), size)]
            jobs += [TrainJob(experiment, dataset, method, M, batch)
                     for method, sizes in spec["methods"].items() for M in sizes for batch in batches]
    return jobs
