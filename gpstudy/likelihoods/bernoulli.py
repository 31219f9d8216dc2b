"""The Bernoulli likelihood with the logistic link, p(y = 1 | f) = sigmoid(f), for binary labels."""

from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from gpstudy import generators as draws
from gpstudy.likelihoods.base import Likelihood, normal_quadrature
from gpstudy.numerics import DEFAULT_DTYPE

QUADRATURE_POINTS = 32  # Gauss-Hermite nodes: abs. error < 1e-7 for var <= 4, 2e-5 at var = 9


class Bernoulli(Likelihood):
    """p(y | f) = sigmoid((2y - 1) f) for labels y in {0, 1} and one latent f per point.

    Gaussian expectations by Gauss-Hermite quadrature,
    E_{N(f | m, v)} g(f) ~ sum_i w_i g(m + sqrt(v) z_i) (``normal_quadrature``), differentiable in m and v.
    ``generators`` are ignored. The likelihood has no parameters: ``dtype`` and ``batch_shape`` are
    accepted so that ``build_likelihood`` builds every likelihood alike.
    """

    task: ClassVar[str] = "classification"
    options_schema: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}, "additionalProperties": False}

    def __init__(self, dtype: torch.dtype = DEFAULT_DTYPE, batch_shape: tuple[int, ...] = ()):
        super().__init__()

    @classmethod
    def label_classes(cls, options: dict[str, Any]) -> int:
        """2: labels 0 and 1."""
        return 2

    def log_prob(self, y: Tensor, f: Tensor) -> Tensor:
        """log sigmoid((2y - 1) f) elementwise, computed stably; NaN where y is neither 0 nor 1 (computed on
        the device: such a run fails instead of scoring a label the model has no class for)."""
        y = y.to(f.dtype)
        return F.logsigmoid((2 * y - 1) * f).where((y == 0) | (y == 1), torch.nan)

    def _quadrature(self, y: Tensor, mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor]:
        """log p(y | f_i) at the nodes f_i = mean + sqrt(var) z_i ``[*batch, n, Q]`` and the weights ``[Q]``,
        summing to 1 (``normal_quadrature``)."""
        nodes, weights = normal_quadrature(QUADRATURE_POINTS, mean)
        f = mean.unsqueeze(-1) + var.sqrt().unsqueeze(-1) * nodes
        return self.log_prob(y.unsqueeze(-1), f), weights

    def expected_log_prob(
        self, y: Tensor, mean: Tensor, var: Tensor, generators: draws.Generators | None = None
    ) -> Tensor:
        """E_{N(f | mean, var)} log sigmoid((2y - 1) f) ``[*batch, n]``, by quadrature."""
        log_p, weights = self._quadrature(y, mean, var)
        return (log_p * weights).sum(-1)

    def log_predictive_density(
        self, y: Tensor, mean: Tensor, var: Tensor, generators: draws.Generators | None = None
    ) -> Tensor:
        """log int sigmoid((2y - 1) f) N(f | mean, var) df ``[*batch, n]``, by quadrature (logsumexp)."""
        log_p, weights = self._quadrature(y, mean, var)
        return (log_p + weights.log()).logsumexp(-1)

    def predictive(self, mean: Tensor, var: Tensor, generators: draws.Generators | None = None) -> Tensor:
        """P(y = 1) = int sigmoid(f) N(f | mean, var) df ``[*batch, n]``."""
        return self.log_predictive_density(torch.ones_like(mean), mean, var).exp()
