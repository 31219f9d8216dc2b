"""The softmax likelihood p(y = c | f) = softmax(f)_c over C latent functions, for multi-class labels."""

import math
from typing import Any, ClassVar

import torch
from torch import Tensor

from gpstudy import generators as draws
from gpstudy.likelihoods.base import MultiClassLikelihood
from gpstudy.numerics import DEFAULT_DTYPE

PREDICTIVE_SAMPLES = 100  # Monte Carlo samples per point of the predictive and its log density


class Softmax(MultiClassLikelihood):
    """p(y = c | f) = exp(f_c) / sum_k exp(f_k), labels y in {0, ..., C - 1}, latents f ``[..., C]``.

    Gaussian expectations by Monte Carlo with reparameterized samples f = mean + sqrt(var) eps,
    eps ~ N(0, I) drawn from ``generators`` (``gpstudy.generators``; ``None`` is an error). Training
    (``expected_log_prob``) draws ``num_samples`` per point and class, the GPNet paper's 1 by default;
    prediction (``predictive``, ``log_predictive_density``) draws ``predictive_samples``, holding
    ``[*batch, predictive_samples, n, C]`` values at once. The likelihood has no parameters: ``dtype`` and
    ``batch_shape`` are accepted so that ``build_likelihood`` builds every likelihood alike.

    Args:
        classes: C, the number of classes.
        num_samples: samples per point and class of ``expected_log_prob``.
        predictive_samples: samples per point and class of the predictive.
    """

    options_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "classes": {"type": "integer", "minimum": 2},
            "num_samples": {"type": "integer", "minimum": 1},
            "predictive_samples": {"type": "integer", "minimum": 1},
        },
        "required": ["classes"],
        "additionalProperties": False,
    }

    def __init__(
        self,
        classes: int,
        num_samples: int = 1,
        predictive_samples: int = PREDICTIVE_SAMPLES,
        dtype: torch.dtype = DEFAULT_DTYPE,
        batch_shape: tuple[int, ...] = (),
    ):
        super().__init__(classes)
        self.num_samples = num_samples
        self.predictive_samples = predictive_samples

    def log_prob(self, y: Tensor, f: Tensor) -> Tensor:
        """log softmax(f)_y ``[..., n]`` for labels ``[..., n]`` (any dtype) and latents ``[..., n, C]``; NaN
        where y is no label in 0..C-1 (``class_index``)."""
        index, is_label = self.class_index(y)
        log_p = torch.take_along_dim(f.log_softmax(-1), index.unsqueeze(-1), dim=-1).squeeze(-1)
        return log_p.where(is_label, torch.nan)

    def _sample(self, mean: Tensor, var: Tensor, generators: draws.Generators | None, num_samples: int) -> Tensor:
        """f = mean + sqrt(var) eps ``[*batch, num_samples, n, C]`` for ``[*batch, n, C]`` moments."""
        if generators is None:
            raise ValueError(
                "the softmax likelihood integrates by Monte Carlo: pass generators "
                "(one torch.Generator, or one per split; see gpstudy.generators)"
            )
        split = len(draws.batch_shape(generators))
        eps = draws.randn((*mean.shape[split:-2], num_samples, *mean.shape[-2:]), generators, like=mean)
        return mean.unsqueeze(-3) + var.sqrt().unsqueeze(-3) * eps

    def expected_log_prob(
        self, y: Tensor, mean: Tensor, var: Tensor, generators: draws.Generators | None = None
    ) -> Tensor:
        """(1 / S) sum_s log softmax(f_s)_y ``[*batch, n]``, S = ``num_samples``."""
        f = self._sample(mean, var, generators, self.num_samples)
        return self.log_prob(y.unsqueeze(-2), f).mean(-2)

    def log_predictive_density(
        self, y: Tensor, mean: Tensor, var: Tensor, generators: draws.Generators | None = None
    ) -> Tensor:
        """log (1 / S) sum_s softmax(f_s)_y ``[*batch, n]``, S = ``predictive_samples``."""
        f = self._sample(mean, var, generators, self.predictive_samples)
        return self.log_prob(y.unsqueeze(-2), f).logsumexp(-2) - math.log(self.predictive_samples)

    def predictive(self, mean: Tensor, var: Tensor, generators: draws.Generators | None = None) -> Tensor:
        """Class probabilities (1 / S) sum_s softmax(f_s) ``[*batch, n, C]``, S = ``predictive_samples``."""
        return self._sample(mean, var, generators, self.predictive_samples).softmax(-1).mean(-3)
