"""The data sets of a study: which ones the config defines, and how each is split and prepared."""

from dataclasses import dataclass
from typing import Any

from gpstudy.data.registry import ONE_SPLIT_PROTOCOLS, Dataset, get_dataset, plain

USER_DATASET_KEYS = ("source", "format", "target", "task")  # a data set's options that define a user data set
DATA_STAGES = ("fetch", "tabulate", "split")  # the data rules, in order: raw files -> table -> splits


@dataclass(frozen=True)
class DataPlan:
    """How one data set is split in a study."""

    protocol: str  # random | index_files | given | first_rows
    splits: tuple[int, ...]  # split indices
    train_size: int | None = None  # random and first_rows protocols: training rows (default int(0.9 N))
    test_size: int | None = None  # random and first_rows protocols: test rows (default the rest)
    drop_features: tuple[int, ...] = ()  # feature columns left out of the splits (0-based)
    standardize_inputs: bool = (
        False  # classification: x standardized per feature by the training rows (regression: always)
    )

    def split_options(self) -> dict[str, Any]:
        """The keyword arguments of ``gpstudy.data.prepare_split`` beyond the protocol and split."""
        return {
            "train_size": self.train_size,
            "test_size": self.test_size,
            "drop_features": self.drop_features,
            "standardize_inputs": self.standardize_inputs,
        }


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
    return DataPlan(
        protocol,
        tuple(range(splits)),
        options.get("train_size"),
        options.get("test_size"),
        tuple(options.get("drop_features", ())),
        options.get("standardize_inputs", False),
    )


def data_stage_params(config: dict[str, Any], name: str, protocol: str) -> dict[str, dict[str, Any]]:
    """Per data stage (``DATA_STAGES``), every setting its output depends on, as plain data: the data rules'
    params, so that Snakemake reruns a stage when one changes (and every job downstream, as its input is remade).

    Each stage gets whole the values its script hands to gpstudy, resolved from the config as the script
    resolves them (``dataset_of``, ``data_plan``): fetch the data set's files for ``protocol`` (path and
    sha256); tabulate the data set (``Dataset.spec``: its reader with the reader's options, task, files, pins,
    shape; the rule adds a user classification data set's declared classes, ``validate.tabulate_params``); split the
    data set, the seed and the plan's split options, which the split script passes on
    as they are. A field added to ``Dataset``, ``FileSpec`` or the plan's split options, or an option bound
    to a user data set's reader, is in the params with no edit here. Left out: where a file is found (the
    mirror, a file's source URLs), since a file is checked against its sha256 wherever it came from.
    """
    dataset = dataset_of(config, name)
    return {
        "fetch": {"files": plain(dataset.files(protocol))},
        "tabulate": {"dataset": dataset.spec()},
        "split": {
            "dataset": dataset.spec(),
            "seed": config["seed"],
            "options": plain(data_plan(config, name).split_options()),
        },
    }


def own_data(config: dict[str, Any], experiment: str) -> list[str]:
    """The data sets of an experiment whose files are not the registry's (``Dataset.has_registry_files``):
    its tables print no paper's numbers beside them."""
    return [
        name
        for name in config["experiments"][experiment]["datasets"]
        if name in config["datasets"]
        and not dataset_of(config, name).has_registry_files(data_plan(config, name).protocol)
    ]
