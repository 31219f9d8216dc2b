"""Config files read and merged in order, as Snakemake merges ``--configfile`` over ``config.yaml``."""

import copy
from pathlib import Path
from typing import Any

import yaml

from gpstudy.study.validate import validate_config


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
