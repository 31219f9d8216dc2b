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

    @classmethod
    def random_features(cls, options: Mapping[str, Any]) -> FourierFeatures:
        """Random Fourier features, omega ~ N(0, I) (the RBF's spectral density)."""
        return FourierFeatures()
