"""The squared-exponential (RBF) kernel with ARD lengthscales."""

from torch import Tensor

from gpstudy.kernels.base import Kernel


class RBF(Kernel):
    """k(x, x') = s2 exp(-r2 / 2) (Rasmussen & Williams, eq. 4.9, with ARD)."""

    def K_r2(self, r2: Tensor) -> Tensor:  # noqa: N802 (GPflow's name)
        return self.variance[..., None, None] * (-0.5 * r2).exp()
