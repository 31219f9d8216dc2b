"""Every default lives once, in config.yaml (issue #28, item 5): no function of gpstudy whose parameter is
a config key gives it a default other than the config's.

A parameter is a config key by its name: a training key, a top-level key, a method option (any method's
value in config.yaml passes), or an alias below for a parameter named otherwise. A default of None is
"not used" (fit without a checkpoint), never a value, and is not compared.
"""

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest
import yaml

import gpstudy
from gpstudy.numerics import DTYPES

REPO = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((REPO / "config.yaml").read_text())
ALIASES = {  # parameter name -> the config key (under training) it takes
    "subset_size": "pretrain_subset",
    "lengthscale": "initial_lengthscale",
}
OTHER_MEANING = {("gpstudy.diagnostics.probes.Probe.__init__", "splits")}  # a probe's batch of splits, not `splits`
KNOWN: dict[tuple[str, str], str] = {}  # stale defaults left on purpose, (function, parameter) -> why (none)


def config_values() -> dict[str, list]:
    """Parameter name -> the values config.yaml gives that key (a method option: every method's)."""
    values: dict[str, list] = {key: [value] for key, value in CONFIG.items() if not isinstance(value, (dict, list))}
    values.update({key: [value] for key, value in CONFIG["training"].items()})  # a run's, over the study-wide null
    for options in CONFIG["methods"].values():
        for key, value in options.items():
            values.setdefault(key, []).append(value)
    values.update({alias: [CONFIG["training"][key]] for alias, key in ALIASES.items()})
    values["dtype"] += [DTYPES[CONFIG["training"]["dtype"]][0]]  # as torch names it in a constructor
    return values


def defaults_in_code() -> list[tuple[str, str, object]]:
    """(function, parameter, default) of every function, method and constructor defined in gpstudy."""
    found = []
    for module_info in pkgutil.walk_packages(gpstudy.__path__, "gpstudy."):
        module = importlib.import_module(module_info.name)
        for _, value in inspect.getmembers(module):
            if getattr(value, "__module__", None) != module.__name__:
                continue
            functions = [value] if inspect.isfunction(value) else []
            if inspect.isclass(value):
                functions = [member for member in vars(value).values() if inspect.isfunction(member)]
            for function in functions:
                for parameter in inspect.signature(function).parameters.values():
                    if parameter.default is not inspect.Parameter.empty:
                        found.append((f"{module.__name__}.{function.__qualname__}", parameter.name, parameter.default))
    return found


def test_the_walk_finds_the_package_defaults():
    found = {(function, name) for function, name, _ in defaults_in_code()}
    assert ("gpstudy.runtime.devices.gpu_slot", "jobs_per_gpu") in found  # a parameter that is a config key
    assert ("gpstudy.training.fit.fit", "checkpoint_minutes") in found  # None: no checkpoint by the clock


@pytest.mark.parametrize(
    "function, name, default",
    [
        pytest.param(*case, marks=[pytest.mark.xfail(reason=KNOWN[case[:2]], strict=True)] if case[:2] in KNOWN else [])
        for case in defaults_in_code()
        if case[1] in config_values() and case[2] is not None and case[:2] not in OTHER_MEANING
    ],
)
def test_a_default_in_code_is_the_configs(function, name, default):
    assert default in config_values()[name], (
        f"{function}({name}={default!r}): config.yaml gives {name} {config_values()[name]}; take it from the "
        "config (no default), or change config.yaml"
    )
