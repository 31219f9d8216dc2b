"""The study: its configuration (schema, files, validation), each run's resolved settings and the plan of jobs.

Config flows one way: ``config.yaml`` -> ``gpstudy.study`` -> rules and scripts -> ``gpstudy.training`` -> methods.

Each name is imported from its module on first use (PEP 562), so that a data job, which asks only for
``dataset_of``, starts without importing torch (about 3 s of a 3.9 s split job; the paper-cpu study runs
157 data-stage jobs).
"""

import importlib
from typing import Any

_MODULE_OF = {  # public name -> the module of gpstudy.study that defines it
    **dict.fromkeys(
        ["DATA_STAGES", "DataPlan", "data_plan", "data_stage_params", "dataset_of", "own_data", "user_datasets"],
        "datasets",
    ),
    **dict.fromkeys(["DEFAULT_CONFIG", "load_config", "merge", "parse_config_entries"], "files"),
    **dict.fromkeys(["TrainJob", "experiment_metrics", "experiment_targets", "splits_of", "study_jobs"], "jobs"),
    **dict.fromkeys(["ConfigError", "load_schema", "object_schema", "training_keys"], "schema"),
    **dict.fromkeys(
        [
            "RunSettings",
            "SettingsError",
            "check_settings",
            "exact_gp_settings",
            "method_names",
            "run_settings",
            "variant_labels",
        ],
        "settings",
    ),
    "show_study_console": "console",
    "validate_config": "validate",
}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    """The module's names, the lazy ones (``__all__``) among them, as ``dir(gpstudy.study)`` and completion list."""
    return sorted({*globals(), *__all__})
