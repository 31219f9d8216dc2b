"""Observation models p(y | f) behind one interface, found by name in ``LIKELIHOODS``."""

from typing import Any

import torch

from gpstudy.likelihoods.base import Likelihood
from gpstudy.likelihoods.bernoulli import Bernoulli
from gpstudy.likelihoods.gaussian import GaussianLikelihood
from gpstudy.likelihoods.robustmax import RobustMax
from gpstudy.likelihoods.softmax import Softmax
from gpstudy.numerics import DEFAULT_DTYPE

LIKELIHOODS: dict[str, type[Likelihood]] = {  # every likelihood by name; tests enumerate it
    "gaussian": GaussianLikelihood,
    "bernoulli": Bernoulli,
    "softmax": Softmax,
    "robustmax": RobustMax,
}


def build_likelihood(
    name: str, options: dict[str, Any], dtype: torch.dtype = DEFAULT_DTYPE, batch_shape: tuple[int, ...] = ()
) -> Likelihood:
    """The likelihood registered as ``name``, built from ``options`` (its ``options_schema``).

    Args:
        name: a key of ``LIKELIHOODS``: "gaussian", "bernoulli", "softmax" or "robustmax".
        options: the likelihood's constructor options, e.g. ``{"classes": 10}`` for "softmax" or "robustmax".
        dtype: dtype of its parameters.
        batch_shape: leading dimensions of its parameters, ``(S,)`` for a batch of S splits.
    """
    if name not in LIKELIHOODS:
        raise ValueError(f"unknown likelihood {name!r}; known likelihoods: {', '.join(sorted(LIKELIHOODS))}")
    return LIKELIHOODS[name](**options, dtype=dtype, batch_shape=batch_shape)


__all__ = ["LIKELIHOODS", "Bernoulli", "GaussianLikelihood", "Likelihood", "RobustMax", "Softmax", "build_likelihood"]
