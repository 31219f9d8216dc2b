"""The Matern 3/2 and 5/2 kernels with ARD lengthscales (Rasmussen & Williams, eq. 4.17)."""

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from gpstudy.kernels.base import Stationary
from gpstudy.kernels.features import FourierFeatures


def _distance(r2: Tensor) -> Tensor:
    """r = sqrt(r2), with r2 floored at the smallest normal number: at r2 = 0 (the diagonal) the
    gradient is zero instead of 0 * inf = NaN, and the value is unchanged to machine precision."""
    return r2.clamp_min(torch.finfo(r2.dtype).tiny).sqrt()


class Matern32(Stationary):
    """k(x, x') = s2 (1 + sqrt(3) r) exp(-sqrt(3) r), r = sqrt(r2) (R&W eq. 4.17, nu = 3/2, with ARD)."""

    def K_r2(self, r2: Tensor) -> Tensor:  # noqa: N802 (GPflow's name)
        scaled = math.sqrt(3) * _distance(r2)
        return self.variance[..., None, None] * (1 + scaled) * (-scaled).exp()

    @classmethod
    def random_features(cls, options: Mapping[str, Any]) -> FourierFeatures:
        """Random Fourier features, omega ~ Student-t with 3 degrees of freedom (R&W eq. 4.15)."""
        return FourierFeatures(degrees_of_freedom=3)


class Matern52(Stationary):
    """k(x, x') = s2 (1 + sqrt(5) r + 5 r^2 / 3) exp(-sqrt(5) r) (R&W eq. 4.17, nu = 5/2, with ARD)."""

    def K_r2(self, r2: Tensor) -> Tensor:  # noqa: N802 (GPflow's name)
        scaled = math.sqrt(5) * _distance(r2)
        return self.variance[..., None, None] * (1 + scaled + 5 / 3 * r2) * (-scaled).exp()

    @classmethod
    def random_features(cls, options: Mapping[str, Any]) -> FourierFeatures:
        """Random Fourier features, omega ~ Student-t with 5 degrees of freedom (R&W eq. 4.15)."""
        return FourierFeatures(degrees_of_freedom=5)
