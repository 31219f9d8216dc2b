"""Covariance functions: base classes owning lengthscales and variance, one small class per kernel."""

from collections.abc import Mapping
from typing import Any

import jsonschema
import torch

from gpstudy.kernels.arccos import ArcCosine
from gpstudy.kernels.base import Kernel, Stationary
from gpstudy.kernels.cnngp import CNNGP
from gpstudy.kernels.features import ArcCosineFeatures, FeatureMap, FourierFeatures
from gpstudy.kernels.matern import Matern32, Matern52
from gpstudy.kernels.rbf import RBF
from gpstudy.numerics import DEFAULT_DTYPE

KERNELS: dict[str, type[Kernel]] = {  # every kernel by name; tests enumerate it
    "rbf": RBF,
    "matern32": Matern32,
    "matern52": Matern52,
    "arccos": ArcCosine,
    "cnngp": CNNGP,
}


def feature_map_problem(name: str, options: Mapping[str, Any]) -> str | None:
    """Why kernel ``name`` of ``KERNELS`` with ``options`` has no random-feature map (its
    ``random_features``); None where it has one."""
    try:
        KERNELS[name].random_features(options)
    except ValueError as error:
        return str(error)
    return None


def build_kernel(
    name: str,
    input_dim: int,
    options: dict[str, Any],
    dtype: torch.dtype = DEFAULT_DTYPE,
    batch_shape: tuple[int, ...] = (),
    lengthscale: float = 1.0,
) -> Kernel:
    """The kernel ``name`` of ``KERNELS`` with its ``options``, checked against its ``options_schema``
    (and by its constructor, e.g. an arc-cosine depth of 2.0, which JSON counts as an integer), every
    lengthscale starting at ``lengthscale``."""
    if name not in KERNELS:
        raise ValueError(f"unknown kernel {name!r}; known kernels: {', '.join(sorted(KERNELS))}")
    kernel = KERNELS[name]
    try:
        jsonschema.validate(options, kernel.options_schema)
    except jsonschema.ValidationError as error:
        raise ValueError(f"kernel {name!r}: invalid options {options}: {error.message}") from None
    return kernel(input_dim, **options, lengthscale=lengthscale, dtype=dtype, batch_shape=batch_shape)


__all__ = [
    "CNNGP",
    "KERNELS",
    "RBF",
    "ArcCosine",
    "ArcCosineFeatures",
    "FeatureMap",
    "FourierFeatures",
    "Kernel",
    "Matern32",
    "Matern52",
    "Stationary",
    "build_kernel",
    "feature_map_problem",
]
