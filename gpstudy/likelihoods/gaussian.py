"""The Gaussian likelihood p(y | f) = N(y | f, sigma^2) of regression."""

import math
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from gpstudy import generators as draws
from gpstudy.likelihoods.base import Likelihood
from gpstudy.linalg import inverse_positive, positive
from gpstudy.numerics import DEFAULT_DTYPE


class GaussianLikelihood(Likelihood):
    """p(y | f) = N(y | f, sigma^2), the noise variance kept positive through softplus.

    Values ``y``, ``f`` are ``[*batch_shape, n]``: one noise variance per split of a batch. Every
    expectation is in closed form; ``generators`` are ignored.

    Args:
        noise_variance: initial sigma^2 (STUDY.md: 0.1).
        dtype: dtype of the parameter.
        batch_shape: leading dimensions of sigma^2.
    """

    task: ClassVar[str] = "regression"
    linear_in_variance: ClassVar[bool] = True
    options_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"noise_variance": {"type": "number", "exclusiveMinimum": 0}},
        "additionalProperties": False,
    }

    def __init__(
        self, noise_variance: float = 0.1, dtype: torch.dtype = DEFAULT_DTYPE, batch_shape: tuple[int, ...] = ()
    ):
        super().__init__()
        noise_variance = torch.as_tensor(noise_variance, dtype=dtype).expand(batch_shape).clone()
        self.raw_noise_variance = nn.Parameter(inverse_positive(noise_variance))

    @property
    def noise_variance(self) -> Tensor:
        """sigma^2, shape ``[*batch_shape]``."""
        return positive(self.raw_noise_variance)

    def _noise(self) -> Tensor:
        """sigma^2 shaped to broadcast against ``[*batch_shape, n]`` values."""
        return self.noise_variance.unsqueeze(-1)

    def log_prob(self, y: Tensor, f: Tensor) -> Tensor:
        """log N(y | f, sigma^2) elementwise, shape of ``y``."""
        noise = self._noise()
        return -0.5 * (math.log(2 * math.pi) + noise.log() + (y - f).square() / noise)

    def expected_log_prob(
        self, y: Tensor, mean: Tensor, var: Tensor, generators: draws.Generators | None = None
    ) -> Tensor:
        """E_{N(f | mean, var)} log N(y | f, sigma^2) in closed form, elementwise, shape of ``y``:
        -(log(2 pi sigma^2) + ((y - mean)^2 + var) / sigma^2) / 2."""
        noise = self._noise()
        return -0.5 * (math.log(2 * math.pi) + noise.log() + ((y - mean).square() + var) / noise)

    def log_predictive_density(
        self, y: Tensor, mean: Tensor, var: Tensor, generators: draws.Generators | None = None
    ) -> Tensor:
        """log N(y | mean, var + sigma^2) elementwise, shape of ``y``."""
        total = var + self._noise()
        return -0.5 * (math.log(2 * math.pi) + total.log() + (y - mean).square() / total)

    def predictive(
        self, mean: Tensor, var: Tensor, generators: draws.Generators | None = None
    ) -> tuple[Tensor, Tensor]:
        """Moments of y from those of f: (mean, var + sigma^2)."""
        return mean, var + self._noise()
