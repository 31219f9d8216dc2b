"""Where a run's settings come from: each resolved value beside the file and key path that set it.

The values and their key paths come from :func:`gpstudy.study.settings.traced_run_settings`, the code
path that resolves every run's settings; the files from :func:`gpstudy.study.files.load_traced_config`,
the merge that builds the config.
"""

import json
from typing import Any

from gpstudy.study.files import Sources
from gpstudy.study.schema import training_keys
from gpstudy.study.settings import traced_run_settings

CALLER = "the command line"  # where a setting the caller passed (method, M, an override) comes from
WIDTH = 40  # "key = value" padded to this many characters before its source (a longer one is not cut)


def settings_lines(config: dict[str, Any], sources: Sources, dataset: str, method: str, M: int) -> list[str]:
    """One line per resolved setting of ``method`` at ``M`` on ``dataset``: ``key = value`` and where it
    came from (``file:line: key.path``; a method option under its key; "auto" devices as resolved here)."""
    settings, paths = traced_run_settings(config, dataset, method=method, M=M)
    values = {
        "method": settings.method,
        "M": settings.M,
        "seed": settings.seed,
        **{key: getattr(settings, key) for key in training_keys()},
        **settings.options,
    }
    rows = []
    for key, value in values.items():
        path = paths[key]
        where = CALLER if path is None else f"{sources.of(tuple(path.split('.')))}: {path}"
        written = _value_at(config, path)
        if path is not None and written != value:  # the device: "auto" as this process resolved it
            where += f" ({_shown(written)}, resolved here)"
        rows.append((f"{key} = {_shown(value)}", where))
    width = min(max(len(left) for left, _ in rows), WIDTH)
    return [f"{left:{width}s}   {where}" for left, where in rows]


def _value_at(config: dict[str, Any], path: str | None) -> Any:
    """The value at a dotted key path of ``config`` (None for None)."""
    if path is None:
        return None
    value = config
    for key in path.split("."):
        value = value[key]
    return value


def _shown(value: Any) -> str:
    """A value as config.yaml writes it: strings bare, the rest as JSON (true, null, [1, 2], {})."""
    return value if isinstance(value, str) else json.dumps(value)
