"""Inference methods behind one interface, found by name in ``METHODS``."""

from gpstudy.methods.autogp import AutoGP
from gpstudy.methods.base import Method, MethodConfig
from gpstudy.methods.exact_gp import ExactGP
from gpstudy.methods.fbnn import FBNN
from gpstudy.methods.gpnet import GPNet
from gpstudy.methods.odvgp import ODVGP
from gpstudy.methods.problem import Problem
from gpstudy.methods.svgp import SVGP

METHODS: dict[str, type[Method]] = {method.name: method for method in (ExactGP, SVGP, GPNet, FBNN, ODVGP, AutoGP)}


def build_method(name: str, problem: Problem, config: MethodConfig) -> Method:
    """The method registered as ``name`` (a key of ``METHODS``), built on ``problem`` with its settings ``config``."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; known methods: {', '.join(sorted(METHODS))}")
    return METHODS[name](problem, config)


__all__ = ["FBNN", "GPNet", "METHODS", "ODVGP", "SVGP", "AutoGP", "ExactGP", "Method", "MethodConfig", "Problem",
           "build_method"]
