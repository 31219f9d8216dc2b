"""The likelihood interface p(y | f): densities, their Gaussian expectations and the predictive."""

import math
from functools import cache
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from gpstudy import generators as draws


class Likelihood(nn.Module):
    """An observation model p(y | f) with f ~ N(mean, var) elementwise (independent latent marginals).

    Shapes: labels or targets ``y`` are ``[*batch, n]``; latents ``f``, ``mean`` and ``var`` are
    ``[*batch, n]`` when ``latent_dim`` is 1 and ``[*batch, n, latent_dim]`` otherwise. Methods that
    integrate by Monte Carlo draw through ``gpstudy.generators``: ``generators`` is one
    ``torch.Generator``, or one per split of a batch; closed-form and quadrature likelihoods ignore it.

    A subclass sets ``task``, ``options_schema`` and, where it has one latent per class,
    ``several_latents``, and implements the four maths methods. Its constructor takes its options
    (keyword arguments matching ``options_schema``) plus ``dtype`` and ``batch_shape``, the way
    ``build_likelihood`` calls it.
    """

    task: ClassVar[str]  # "regression" or "classification"
    options_schema: ClassVar[dict[str, Any]]  # JSON schema of the constructor's options
    several_latents: ClassVar[bool] = False  # whether ``latent_dim`` is C > 1 (one latent per class) rather than 1
    linear_in_variance: ClassVar[bool] = False  # whether ``expected_log_prob`` is affine in ``var``

    @property
    def latent_dim(self) -> int:
        """The number of latent functions per point (1; a softmax has one per class)."""
        return 1

    @classmethod
    def label_classes(cls, options: dict[str, Any]) -> int | None:
        """The number of classes C of the labels 0..C-1 this likelihood built from ``options`` takes; None
        for a regression likelihood."""
        return None

    def log_prob(self, y: Tensor, f: Tensor) -> Tensor:
        """log p(y | f) elementwise ``[*batch, n]``."""
        raise NotImplementedError

    def expected_log_prob(
        self, y: Tensor, mean: Tensor, var: Tensor, generators: draws.Generators | None = None
    ) -> Tensor:
        """E_{N(f | mean, var)} log p(y | f) ``[*batch, n]``: the data term of a variational ELBO."""
        raise NotImplementedError

    def log_predictive_density(
        self, y: Tensor, mean: Tensor, var: Tensor, generators: draws.Generators | None = None
    ) -> Tensor:
        """log int p(y | f) N(f | mean, var) df ``[*batch, n]``: the test log-likelihood of a point."""
        raise NotImplementedError

    def predictive(
        self, mean: Tensor, var: Tensor, generators: draws.Generators | None = None
    ) -> Tensor | tuple[Tensor, Tensor]:
        """The predictive distribution of y: its moments (regression) or class probabilities
        (classification), see the subclass."""
        raise NotImplementedError


class MultiClassLikelihood(Likelihood):
    """A likelihood of labels y in {0, ..., C - 1} with one latent function per class, C = ``classes``."""

    task: ClassVar[str] = "classification"
    several_latents: ClassVar[bool] = True

    def __init__(self, classes: int):
        super().__init__()
        self.classes = classes

    @property
    def latent_dim(self) -> int:
        """C, one latent function per class."""
        return self.classes

    @classmethod
    def label_classes(cls, options: dict[str, Any]) -> int:
        """C, the ``classes`` option."""
        return options["classes"]

    def class_index(self, y: Tensor) -> tuple[Tensor, Tensor]:
        """The labels ``y`` as class indices clamped into 0..C-1 (safe to index the class axis with), and
        where they were labels at all: integers in 0..C-1. Computed on the device (no host sync); a
        likelihood makes its value NaN where a label is none, so such a run fails instead of reading
        past the class axis."""
        index = y.long()
        return index.clamp(0, self.classes - 1), (index == y) & (index >= 0) & (index < self.classes)


def normal_quadrature(points: int, like: Tensor) -> tuple[Tensor, Tensor]:
    """Gauss-Hermite nodes z_i and weights w_i ``[points]`` (dtype and device of ``like``) with
    E_{N(0, 1)} g(z) ~ sum_i w_i g(z_i); the weights sum to 1. Made once per size, dtype and device: a
    training step copies nothing from the host."""
    return _hermite(points, like.dtype, like.device)


@cache
def _hermite(points: int, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, Tensor]:
    """``normal_quadrature``'s nodes and weights (computed in float64, then cast), once per argument."""
    nodes, weights = np.polynomial.hermite.hermgauss(points)  # int e^{-x^2} g(x) dx ~ sum_i weights_i g(nodes_i)
    return (
        torch.as_tensor(nodes * math.sqrt(2), dtype=dtype, device=device),
        torch.as_tensor(weights / math.sqrt(math.pi), dtype=dtype, device=device),
    )
