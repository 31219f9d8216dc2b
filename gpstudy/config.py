"""Study configuration: ``config.yaml`` holds every default, and is validated before any job runs.

The schema (``config.schema.yaml``) is completed from the registries: each method's options are its
``options_schema`` fragment. After the schema, every training job's settings are resolved and
checked: the kernel, the likelihood and the method by name, the kernel's options by its own schema,
the likelihood against the data set's task and against what the method supports.
"""

import copy
import functools
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from gpstudy import paths
from gpstudy.data.registry import (DATASETS, ONE_SPLIT_PROTOCOLS, PROTOCOLS, READER_OPTIONS, Dataset, get_dataset,
                                   plain)
from gpstudy.methods import METHODS
from gpstudy.metrics import TASK_METRICS
from gpstudy.paper import quoted_tables

OUTPUT_FILES = {  # an experiment's output -> its files
    "tables": [paths.TABLES + ext for ext in (".csv", ".md", ".tex")],
    "violins": [paths.VIOLINS + ext for ext in (".png", ".pdf")],
    "posteriors": [paths.POSTERIORS + ext for ext in (".png", ".pdf")],
}
USER_DATASET_KEYS = ("source", "format", "target", "task")  # a data set's options that define a user data set
DATA_STAGES = ("fetch", "table", "split")  # the data rules, in order: raw files -> table -> splits


class ConfigError(ValueError):
    """A configuration that does not fit the schema; the message names the key."""


@dataclass(frozen=True)
class DataPlan:
    """How one data set is split in a study."""

    protocol: str  # random | index_files | given | first_rows
    splits: tuple[int, ...]  # split indices
    train_size: int | None = None  # random and first_rows protocols: training rows (default int(0.9 N))
    test_size: int | None = None  # random and first_rows protocols: test rows (default the rest)
    drop_features: tuple[int, ...] = ()  # feature columns left out of the splits (0-based)
    standardize_inputs: bool = False  # classification: x standardized per feature by the training rows (regression: always)

    def split_options(self) -> dict[str, Any]:
        """The keyword arguments of ``gpstudy.data.prepare_split`` beyond the protocol and split."""
        return {"train_size": self.train_size, "test_size": self.test_size, "drop_features": self.drop_features,
                "standardize_inputs": self.standardize_inputs}


def load_config(*files: str | Path, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Config files merged in order (nested keys merged, as Snakemake's ``--configfile`` does), then
    ``overrides`` (None values ignored), validated."""
    config: dict[str, Any] = {}
    for path in files:
        merge(config, yaml.safe_load(Path(path).read_text()) or {})
    merge(config, {key: value for key, value in (overrides or {}).items() if value is not None})
    validate_config(config)
    return config


def merge(config: dict, changes: dict) -> None:
    """Update ``config`` in place with ``changes``, merging nested mappings key by key."""
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            merge(config[key], value)
        else:
            config[key] = copy.deepcopy(value)


def training_keys() -> dict[str, dict]:
    """The settings every run has (the schema's ``training`` section), name -> schema."""
    return _raw_schema()["$defs"]["training"]["properties"]


def object_schema(properties: dict[str, dict], required: bool = True) -> dict:
    """The JSON schema of an object of exactly these properties (all of them required, unless not)."""
    return {"type": "object", "additionalProperties": False, "properties": properties,
            **({"required": sorted(properties)} if required else {})}


@functools.cache
def _raw_schema() -> dict:
    """``config.schema.yaml`` as written, read once (callers copy before they change it)."""
    return yaml.safe_load(resources.files("gpstudy").joinpath("config.schema.yaml").read_text())


def load_schema() -> dict:
    """The JSON schema of a study configuration, each registered method's options filled in."""
    schema = copy.deepcopy(_raw_schema())
    schema["properties"]["split_protocol"]["enum"] = [protocol for protocol in PROTOCOLS if protocol != "given"]
    training = schema["$defs"]["training"]
    schema["properties"]["training"] = {**training, "required": sorted(training["properties"])}
    dataset = schema["properties"]["dataset_options"]["additionalProperties"]["properties"]
    dataset["protocol"]["enum"] = list(PROTOCOLS)
    schema["properties"]["variants"]["additionalProperties"]["properties"]["method"]["enum"] = sorted(METHODS)
    schema["properties"]["experiments"]["additionalProperties"]["properties"]["quoted"]["enum"] = sorted(quoted_tables())
    for name, method in METHODS.items():
        options = method.options_schema
        schema["properties"]["methods"]["properties"][name] = {  # its options, and any training key for it
            **object_schema({**training["properties"], **options}), "required": sorted(options)}
        dataset["methods"]["properties"][name] = object_schema({**training["properties"], **options}, required=False)
        dataset.update({**training["properties"], **options})  # at the data set's level: for every method that has it
    return schema


def validate_config(config: dict[str, Any]) -> None:
    """Check a configuration against the schema, the registries and itself.

    Raises:
        ConfigError: naming the offending key (e.g. ``$.datasets[1]``) and what is wrong with it.
    """
    errors = sorted(jsonschema.Draft202012Validator(load_schema()).iter_errors(config),
                    key=lambda e: list(e.absolute_path))
    problems = [f"  config key {e.json_path}: {e.message}" for e in errors]
    problems += [f"  config key {path}: a number must be finite, not NaN or infinite" for path in _non_finite(config)]
    problems = problems or [f"  config key {path}: {problem}" for path, problem in _bad_names(config)]
    if problems:
        raise ConfigError("invalid configuration:\n" + "\n".join(problems))
    known = set(DATASETS) | set(user_datasets(config))
    named = [("datasets", config["datasets"]), ("dataset_options", config.get("dataset_options", {}))]
    named += [(f"experiments.{name}.datasets", spec["datasets"]) for name, spec in config["experiments"].items()]
    for key, names in named:
        for index, name in enumerate(names):
            if name not in known:
                where = f"$.{key}[{index}]" if isinstance(names, list) else f"$.{key}.{name}"
                raise ConfigError(f"invalid configuration:\n  config key {where}: unknown data set {name!r}; "
                                  f"known: {', '.join(sorted(known))} (or give it a `source` under dataset_options)")
    used = {*config["datasets"], *config.get("dataset_options", {}),
            *(name for spec in config["experiments"].values() for name in spec["datasets"])}
    for name in sorted(used - set(user_datasets(config))):
        try:
            get_dataset(name).with_reader_options(config.get("dataset_options", {}).get(name, {}))
        except ValueError as error:
            raise ConfigError(f"invalid configuration:\n  config key $.dataset_options.{name}: {error}") from None
    for name, options in config.get("dataset_options", {}).items():
        if "sha256" in options and "source" not in options:  # a user data set's: refused below
            try:
                dataset_of(config, name)
            except ValueError as error:
                raise ConfigError(f"invalid configuration:\n  config key $.dataset_options.{name}.sha256: {error}") from None
    for name in config.get("variants", {}):
        if name in METHODS:
            raise ConfigError(f"invalid configuration:\n  config key $.variants.{name}: a registered method's name; "
                              "give the variant a name of its own")
    for index, name in enumerate(config.get("run_experiments") or []):
        if name not in config["experiments"]:
            raise ConfigError(f"invalid configuration:\n  config key $.run_experiments[{index}]: unknown experiment "
                              f"{name!r}; known: {', '.join(sorted(config['experiments']))}")
    for name, spec in config["experiments"].items():
        for method in spec["methods"]:
            if method not in method_names(config):
                raise ConfigError(f"invalid configuration:\n  config key $.experiments.{name}.methods.{method}: "
                                  f"unknown method {method!r}; known: {', '.join(method_names(config))} "
                                  "(or define it under `variants`)")
        metrics = experiment_metrics(config, name)  # one task per experiment
        if "quoted" in spec and quoted_tables()[spec["quoted"]]["metric"] not in metrics:
            raise ConfigError(f"invalid configuration:\n  config key $.experiments.{name}.quoted: table "
                              f"{spec['quoted']!r} holds {quoted_tables()[spec['quoted']]['metric']}, not one of the "
                              f"experiment's metrics ({', '.join(metrics)})")
        if "posteriors" in spec.get("outputs", []) and len(spec["datasets"]) != 1:
            raise ConfigError(f"invalid configuration:\n  config key $.experiments.{name}.outputs: posteriors draws "
                              f"one data set of one input, not {len(spec['datasets'])}")
    for name, options in user_datasets(config).items():
        if "sha256" in options:
            raise ConfigError(f"invalid configuration:\n  config key $.dataset_options.{name}.sha256: a user data set "
                              "pins its file with source.sha256")
        if set(options) & READER_OPTIONS:
            raise ConfigError(f"invalid configuration:\n  config key $.dataset_options.{name}: "
                              f"{', '.join(sorted(set(options) & READER_OPTIONS))} is an option of a registered "
                              "data set's reader, not of a user data set")
        missing = [key for key in USER_DATASET_KEYS if key not in options]
        if missing:
            raise ConfigError(f"invalid configuration:\n  config key $.dataset_options.{name}: a user data set "
                              f"(one with a `source`) needs {', '.join(missing)}")
    for name, options in config.get("dataset_options", {}).items():
        if "standardize_inputs" in options and dataset_of(config, name).task == "regression":
            raise ConfigError(f"invalid configuration:\n  config key $.dataset_options.{name}.standardize_inputs: "
                              f"{name!r} is a regression data set, whose x and y are always standardized with "
                              "training statistics; the option is a classification data set's")
    from gpstudy.training.settings import SettingsError, run_settings  # settings are built from a valid config

    for job in study_jobs(config):
        try:
            run_settings(config, job.dataset, method=job.method, M=job.M).check(dataset_of(config, job.dataset))
        except SettingsError as error:
            raise ConfigError(f"invalid configuration:\n  experiment {job.experiment!r}, data set {job.dataset!r}, "
                              f"method {job.method!r}: {error}") from None


def _bad_names(config: dict[str, Any]) -> list[tuple[str, str]]:
    """(path, problem) of every data set, method and variant name that breaks its rule in ``paths``:
    the names become parts of the study's file paths, and Snakemake matches them by those rules."""
    named = [(paths.DATASET_NAME, "data set", f"$.datasets[{i}]", name) for i, name in enumerate(config["datasets"])]
    named += [(paths.DATASET_NAME, "data set", f"$.dataset_options.{name}", name)
              for name in config.get("dataset_options", {})]
    named += [(paths.METHOD_NAME, "variant", f"$.variants.{name}", name) for name in config.get("variants", {})]
    for experiment, spec in config["experiments"].items():
        named += [(paths.DATASET_NAME, "data set", f"$.experiments.{experiment}.datasets[{i}]", name)
                  for i, name in enumerate(spec["datasets"])]
        named += [(paths.METHOD_NAME, "method", f"$.experiments.{experiment}.methods.{name}", name)
                  for name in spec["methods"]]
    return [(path, f"{kind} name {name!r} must match {rule.pattern} ({rule.words})")
            for rule, kind, path, name in named if not rule.allows(name)]


def _non_finite(value: Any, path: str = "$") -> list[str]:
    """The paths of every NaN or infinite number in a config (JSON schema's bounds let NaN through)."""
    if isinstance(value, float) and not math.isfinite(value):
        return [path]
    if isinstance(value, dict):
        return [found for key, item in value.items() for found in _non_finite(item, f"{path}.{key}")]
    if isinstance(value, list):
        return [found for index, item in enumerate(value) for found in _non_finite(item, f"{path}[{index}]")]
    return []


def method_names(config: dict[str, Any]) -> list[str]:
    """Every method a run may name: the registered ones and the config's variants of them."""
    return sorted({*METHODS, *config.get("variants", {})})


def user_datasets(config: dict[str, Any]) -> dict[str, dict]:
    """The data sets a config defines itself (those with a ``source`` in ``dataset_options``), name -> options."""
    return {name: options for name, options in config.get("dataset_options", {}).items() if "source" in options}


def dataset_of(config: dict[str, Any], name: str) -> Dataset:
    """The data set ``name``: one the config defines (``user_datasets``), else the registry's with its
    reader's options (``Dataset.with_reader_options``: airline's months) and the sha256 the config pins
    for its files (``dataset_options.<name>.sha256``)."""
    options = config.get("dataset_options", {}).get(name, {})
    if "source" in options:
        return get_dataset(name, options)
    dataset = get_dataset(name).with_reader_options(options)
    return dataset.pinned(options["sha256"]) if "sha256" in options else dataset


def data_plan(config: dict[str, Any], name: str) -> DataPlan:
    """The protocol and splits of data set ``name`` under a (validated) configuration."""
    options = config.get("dataset_options", {}).get(name, {})
    registered = dataset_of(config, name).protocol
    protocol = options.get("protocol", registered if registered == "given" else config["split_protocol"])
    splits = 1 if protocol in ONE_SPLIT_PROTOCOLS else options.get("splits", config["splits"])
    return DataPlan(protocol, tuple(range(splits)), options.get("train_size"), options.get("test_size"),
                    tuple(options.get("drop_features", ())), options.get("standardize_inputs", False))


def data_stage_params(config: dict[str, Any], name: str, protocol: str) -> dict[str, dict[str, Any]]:
    """Per data stage (``DATA_STAGES``), every setting its output depends on, as plain data: the data rules'
    params, so that Snakemake reruns a stage when one changes (and every job downstream, as its input is remade).

    Each stage gets whole the values its script hands to gpstudy, resolved from the config as the script
    resolves them (``dataset_of``, ``data_plan``): fetch the data set's files for ``protocol`` (path and
    sha256); table the data set (``Dataset.spec``: its reader with the reader's options, task, files, pins,
    shape); split the data set, the seed and the plan's split options, which the split script passes on
    as they are. A field added to ``Dataset``, ``FileSpec`` or the plan's split options, or an option bound
    to a user data set's reader, is in the params with no edit here. Left out: where a file is found (the
    mirror, a file's source URLs), since a file is checked against its sha256 wherever it came from.
    """
    dataset = dataset_of(config, name)
    return {"fetch": {"files": plain(dataset.files(protocol))},
            "table": {"dataset": dataset.spec()},
            "split": {"dataset": dataset.spec(), "seed": config["seed"],
                      "options": plain(data_plan(config, name).split_options())}}


def experiment_targets(config: dict[str, Any]) -> list[str]:
    """The files of every experiment that trains something: its learning curves and its ``outputs``."""
    targets = []
    for experiment in sorted({job.experiment for job in study_jobs(config)}):
        targets.append(paths.CURVES_FIGURE.format(experiment=experiment))
        for output in config["experiments"][experiment].get("outputs", []):
            targets += [pattern.format(experiment=experiment, metric=metric) for pattern in OUTPUT_FILES[output]
                        for metric in (experiment_metrics(config, experiment) if "{metric}" in pattern else (None,))]
    return targets


def experiment_metrics(config: dict[str, Any], experiment: str) -> tuple[str, ...]:
    """The test metrics of an experiment's task (``gpstudy.metrics.TASK_METRICS``), one table each."""
    tasks = {dataset_of(config, dataset).task for dataset in config["experiments"][experiment]["datasets"]}
    if len(tasks) != 1:
        raise ConfigError(f"invalid configuration:\n  config key $.experiments.{experiment}.datasets: data sets "
                          f"of one task, not {', '.join(sorted(tasks))}")
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
        return {"experiment": self.experiment, "dataset": self.dataset, "method": self.method, "M": self.M,
                "splits": self.label}


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
            batches = [splits[start:start + size] for start in range(0, len(splits), size)]
            jobs += [TrainJob(experiment, dataset, method, M, batch)
                     for method, sizes in spec["methods"].items() for M in sizes for batch in batches]
    return jobs
