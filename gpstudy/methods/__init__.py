"""Inference methods behind one interface, found by name in ``METHODS``: a method is one module of this
package and its class in ``METHODS``, which gives its ``name`` and its ``display_name`` (tables and figures:
``gpstudy.report.labels``) to the study and the report (docs/new-method.md)."""

from collections.abc import Mapping
from typing import Any

import torch
from torch.torch_version import TorchVersion

from gpstudy.methods.autogp import AutoGP
from gpstudy.methods.base import Method, MethodConfig
from gpstudy.methods.exact_gp import ExactGP
from gpstudy.methods.fbnn import FBNN
from gpstudy.methods.gpnet import GPNet
from gpstudy.methods.odvgp import ODVGP
from gpstudy.methods.problem import Problem
from gpstudy.methods.svgp import SVGP

# every method, in plot order (gpstudy.report.labels.display_names: Figure 4's rows, the config's variants after)
METHODS: dict[str, type[Method]] = {method.name: method for method in (SVGP, GPNet, FBNN, ExactGP, ODVGP, AutoGP)}


def build_method(name: str, problem: Problem, config: MethodConfig) -> Method:
    """The method registered as ``name`` (a key of ``METHODS``), built on ``problem`` with its settings ``config``."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; known methods: {', '.join(sorted(METHODS))}")
    return METHODS[name](problem, config)


def pairing_problems(
    method: str, options: Mapping[str, Any], kernel: str, kernel_options: Mapping[str, Any], likelihood: str
) -> list[str]:
    """What keeps method ``method`` (of ``METHODS``) with its ``options`` from training with kernel ``kernel``
    (of ``gpstudy.kernels.KERNELS``) built with ``kernel_options`` and likelihood ``likelihood`` (of
    ``gpstudy.likelihoods.LIKELIHOODS``), each problem naming both sides; [] where they fit.

    What the method declares it needs: options that fit together and the likelihood (``check_options``:
    e.g. a likelihood of several latents needs a network with several), a likelihood it supports
    (``supported_likelihoods``) and a kernel it can use (``kernel_problems``: e.g. an RFE network needs
    a kernel with a random-feature map). Validation asks this of every planned job before any runs
    (``gpstudy.study.check_settings``). ``options`` and ``kernel_options`` must be valid by their schemas.
    """
    declared = METHODS[method]
    problems = []
    try:
        declared.check_options(options, likelihood)
    except ValueError as error:
        problems.append(f"options of method {method!r}: {error}")
    supported = declared.supported_likelihoods(options)
    if likelihood not in supported:
        problems.append(
            f"method {method!r} (with these options) cannot train with likelihood {likelihood!r}; "
            f"it supports {', '.join(supported)}"
        )
    return problems + declared.kernel_problems(options, kernel, kernel_options)


def compile_problem(method: str) -> str | None:
    """Why the installed torch cannot train method ``method`` (of ``METHODS``) compiled
    (``training.torch_compile``: below its ``compile_needs_torch``), with the fix; None where it can."""
    needed = METHODS[method].compile_needs_torch
    if needed is None or TorchVersion(torch.__version__) >= needed:
        return None
    return (
        f"training.torch_compile: true needs torch >= {needed} for method {method!r} (its compiled training fails "
        f"before it: docs/installation.md), but torch {torch.__version__} is installed; upgrade torch, or set "
        "training.torch_compile: false"
    )


__all__ = [
    "FBNN",
    "GPNet",
    "METHODS",
    "ODVGP",
    "SVGP",
    "AutoGP",
    "ExactGP",
    "Method",
    "MethodConfig",
    "Problem",
    "build_method",
    "compile_problem",
    "pairing_problems",
]
