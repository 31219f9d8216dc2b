"""The squared-exponential (RBF) kernel with ARD lengthscales."""

from collections.abc import Mapping
from typing import Any

from torch import Tensor

from gpstudy.kernels.base import Stationary
from gpstudy.kernels.features import FourierFeatures


class RBF(Stationary):
    """k(x, x') = s2 exp(-r2 / 2) (Rasmussen & Williams, eq. 4.9, with ARD)."""

    def K_r2(self, r2: Tensor) -> Tensor:  # noqa: N802 (GPflow's name)
        return self.variance[..., None, None] * (-0.5 * r2).exp()

    def K(self, x1: Tensor, x2: Tensor | None) -> Tensor:  # noqa: N802 (GPflow's name)
        """K(x1, x2) ``[..., n, m]`` = s2 exp(a b^T - |a|^2 / 2 - |b|^2 / 2) with a = x1 / l, b = x2 / l: the
        exponent -r2 / 2 accumulated in place on the product a b^T, 4 elementwise operators over ``[..., n, m]``.
        Not clamped: where x1_i = x2_j the exponent is 0 up to rounding, so k may exceed s2 by a rounding error.
        Why it is fast: docs/gpus.md#memory-passes-first-round."""
        lengthscale = self.lengthscale.unsqueeze(-2)
        a = x1 / lengthscale
        b = a if x2 is None else x2 / lengthscale
        exponent = a @ b.mT
        exponent.sub_(0.5 * a.square().sum(-1).unsqueeze(-1)).sub_(0.5 * b.square().sum(-1).unsqueeze(-2))
        return self.variance[..., None, None] * exponent.exp()

    @classmethod
    def random_features(cls, options: Mapping[str, Any]) -> FourierFeatures:
        """Random Fourier features, omega ~ N(0, I) (the RBF's spectral density)."""
        return FourierFeatures()
