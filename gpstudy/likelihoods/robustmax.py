"""The robust-max likelihood (Hernandez-Lobato, Hernandez-Lobato and Dupont 2011, "Robust multi-class
Gaussian process classification"; GPflow's ``MultiClass`` with ``RobustMax``): the label is the arg-max of
C latent functions, flipped to another class with probability epsilon."""

import math
from typing import Any, ClassVar

import torch
from torch import Tensor

from gpstudy import generators as draws
from gpstudy.likelihoods.base import MultiClassLikelihood, normal_quadrature
from gpstudy.numerics import DEFAULT_DTYPE

EPSILON = 1e-3  # probability of a label other than the arg-max (GPflow's default)
QUADRATURE_POINTS = 20  # Gauss-Hermite nodes over the label's latent (GPflow's default): P(argmax) within
# 4e-4 (C = 10) where a point's latent stds are within a factor 1.8, 3e-3 within 3.2


class RobustMax(MultiClassLikelihood):
    """p(y = c | f) = 1 - epsilon if c = argmax_k f_k, else epsilon / (C - 1); latents f ``[..., C]``.

    Invariant to the scale of f. Under independent f_k ~ N(m_k, v_k) everything follows from
    P(argmax = c) = int N(f_c | m_c, v_c) prod_{k != c} Phi((f_c - m_k) / sqrt(v_k)) df_c,
    a one-dimensional integral computed by Gauss-Hermite quadrature (as GPflow's
    ``RobustMax.prob_is_largest``); p(y | f) takes two values, so
    E log p(y | f) = log(1 - epsilon) P + log(epsilon / (C - 1)) (1 - P) with P = P(argmax = y), and
    int p(y | f) N(f) df = (1 - epsilon) P + epsilon / (C - 1) (1 - P). Deterministic: ``generators`` are
    ignored. The likelihood has no parameters: ``dtype`` and ``batch_shape`` are accepted so that
    ``build_likelihood`` builds every likelihood alike.

    Args:
        classes: C, the number of classes.
        epsilon: the probability of a label other than the arg-max.
        quadrature_points: Gauss-Hermite nodes over f_c.
    """

    options_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "classes": {"type": "integer", "minimum": 2},
            "epsilon": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1, "default": EPSILON},
            "quadrature_points": {"type": "integer", "minimum": 1, "default": QUADRATURE_POINTS},
        },
        "required": ["classes"],
        "additionalProperties": False,
    }

    def __init__(
        self,
        classes: int,
        epsilon: float = EPSILON,
        quadrature_points: int = QUADRATURE_POINTS,
        dtype: torch.dtype = DEFAULT_DTYPE,
        batch_shape: tuple[int, ...] = (),
    ):
        super().__init__(classes)
        self.epsilon = epsilon
        self.quadrature_points = quadrature_points

    def _label_probability(self, probability_is_largest: Tensor) -> Tensor:
        """(1 - epsilon) P + epsilon / (C - 1) (1 - P): the probability of a label that is the arg-max with
        probability P."""
        off = self.epsilon / (self.classes - 1)  # p(y | f) where y is not the arg-max
        return (1 - self.epsilon) * probability_is_largest + off * (1 - probability_is_largest)

    def log_prob(self, y: Tensor, f: Tensor) -> Tensor:
        """log(1 - epsilon) where y is the arg-max of f ``[..., n, C]``, else log(epsilon / (C - 1)); ``[..., n]``."""
        index, is_label = self.class_index(y)
        return self._label_probability((f.argmax(-1) == index).to(f.dtype)).log().where(is_label, torch.nan)

    def probability_is_largest(self, y: Tensor, mean: Tensor, var: Tensor) -> Tensor:
        """P(argmax_k f_k = y) ``[*batch, n]`` under f ~ N(mean, var) ``[*batch, n, C]``, labels ``[*batch, n]``.

        Nodes f_y = m_y + sqrt(v_y) x_i of N(0, 1) quadrature, each weighted by
        prod_{k != y} Phi((f_y - m_k) / sqrt(v_k)). Phi is ``ndtr``, exactly 0 or 1 far out, so a vanishing
        v gives the hard arg-max; a zero v_k is taken as the smallest normal number, so that it divides
        without NaN (a tie of means at zero variance counts half). NaN where y is no label in 0..C-1
        (``class_index``).
        """
        nodes, weights = normal_quadrature(self.quadrature_points, mean)
        index, is_label = self.class_index(y)
        label = index.unsqueeze(-1)  # [*batch, n, 1]
        std = var.clamp_min(torch.finfo(var.dtype).tiny).sqrt()  # [*batch, n, C]
        f_label = torch.take_along_dim(mean, label, -1) + torch.take_along_dim(std, label, -1) * nodes  # [*batch, n, Q]
        cdf = torch.special.ndtr((f_label.unsqueeze(-1) - mean.unsqueeze(-2)) / std.unsqueeze(-2))  # [*, n, Q, C]
        is_label_class = torch.arange(self.classes, device=mean.device) == label  # [*batch, n, C]
        cdf = torch.where(is_label_class.unsqueeze(-2), torch.ones_like(cdf), cdf)
        return (cdf.prod(-1) @ weights).where(is_label, torch.nan)

    def expected_log_prob(
        self, y: Tensor, mean: Tensor, var: Tensor, generators: draws.Generators | None = None
    ) -> Tensor:
        """log(1 - epsilon) P + log(epsilon / (C - 1)) (1 - P) ``[*batch, n]``, P = P(argmax = y)."""
        probability = self.probability_is_largest(y, mean, var)
        return math.log(1 - self.epsilon) * probability + math.log(self.epsilon / (self.classes - 1)) * (
            1 - probability
        )

    def log_predictive_density(
        self, y: Tensor, mean: Tensor, var: Tensor, generators: draws.Generators | None = None
    ) -> Tensor:
        """log((1 - epsilon) P + epsilon / (C - 1) (1 - P)) ``[*batch, n]``, P = P(argmax = y)."""
        return self._label_probability(self.probability_is_largest(y, mean, var)).log()

    def predictive(self, mean: Tensor, var: Tensor, generators: draws.Generators | None = None) -> Tensor:
        """Class probabilities (1 - epsilon) P_c + epsilon / (C - 1) (1 - P_c) ``[*batch, n, C]``,
        P_c = P(argmax = c), one quadrature per class (holding ``[*batch, n, C, Q, C]`` values)."""
        classes = torch.arange(self.classes, device=mean.device).expand(*mean.shape)  # [*batch, n, C]
        every = (
            mean.unsqueeze(-2).expand(*mean.shape, self.classes),
            var.unsqueeze(-2).expand(*var.shape, self.classes),
        )  # [*batch, n, C, C]: the latents per class
        return self._label_probability(self.probability_is_largest(classes, *every))
