"""Config files read and merged in order, as Snakemake merges ``--configfile`` over ``config.yaml``,
recording which file set each value (``gpstudy settings`` prints it beside the value)."""

import copy
from pathlib import Path
from typing import Any

import yaml

from gpstudy.study.validate import validate_config

KeyPath = tuple[str, ...]  # a config key path, e.g. ("dataset_options", "mnist", "likelihood")


def load_config(*files: str | Path, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Config files merged in order (nested keys merged, as Snakemake's ``--configfile`` does), then
    ``overrides`` (None values ignored), validated."""
    return load_traced_config(*files, overrides=overrides)[0]


def load_traced_config(*files: str | Path, overrides: dict[str, Any] | None = None,
                       overrides_source: str = "the overrides") -> tuple[dict[str, Any], dict[KeyPath, str]]:
    """:func:`load_config`, and where each value was set: key path -> the file (as given) or
    ``overrides_source`` whose merge set it last (``gpstudy.study.provenance.origin``)."""
    config: dict[str, Any] = {}
    origins: dict[KeyPath, str] = {}
    for path in files:
        merge(config, yaml.safe_load(Path(path).read_text()) or {}, origins, str(path))
    merge(config, {key: value for key, value in (overrides or {}).items() if value is not None}, origins,
          overrides_source)
    validate_config(config)
    return config, origins


def merge(config: dict, changes: dict, origins: dict[KeyPath, str] | None = None, source: str = "",
          at: KeyPath = ()) -> None:
    """Update ``config`` in place with ``changes``, merging nested mappings key by key; each key path
    assigned (a value, or a mapping that replaces a non-mapping) is recorded in ``origins`` as set by
    ``source``, and whatever was recorded below it is forgotten."""
    for key, value in changes.items():
        path = (*at, key)
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            merge(config[key], value, origins, source, path)
        else:
            config[key] = copy.deepcopy(value)
            if origins is not None:
                for below in [known for known in origins if known[:len(path)] == path]:
                    del origins[below]
                origins[path] = source
