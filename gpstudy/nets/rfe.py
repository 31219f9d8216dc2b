"""The random feature expansion (RFE) inference network (section 4.2)."""

import math

import torch
from torch import Tensor, nn

from gpstudy.gaussian import inverse_positive, positive, raw_scale_tril, scale_tril, standard_normal, tril_matmul
from gpstudy.nets.base import InferenceNetwork

WEIGHT_MEAN_INIT_STD = 1e-3  # m ~ N(0, 1e-3^2) at start (STUDY.md, the authors' code)
WEIGHT_SCALE_INIT = math.log1p(math.e)  # softplus(1): L = softplus(1) I at start (STUDY.md)


class RFE(InferenceNetwork):
    """f(x) = w^T phi(x), w ~ N(m, L L^T) (eq. 30), with random Fourier features of an RBF prior.

    phi(x) = sqrt(s2 / H) [cos(x W), sin(x W)] ``[2H]`` with W_dj = omega_dj / l_d (eq. 31 and the
    RFE paragraph of section 4.2). Trainable: the frequencies omega (drawn from N(0, 1)), the
    lengthscales l (initialized from the prior kernel), m and the lower-triangular L (softplus
    diagonal). s2 is the prior kernel's variance at construction, a fixed buffer.

    Args:
        input_dim: D.
        hidden_units: H, the number of frequencies (2H features).
        lengthscale: the prior kernel's lengthscales ``[D]``, copied.
        variance: the prior kernel's variance s2, copied.
        generator: draws omega and m.
    """

    def __init__(
        self,
        input_dim: int,
        hidden_units: int,
        lengthscale: Tensor,
        variance: Tensor,
        generator: torch.Generator,
    ):
        super().__init__()
        lengthscale = lengthscale.detach().clone()
        self.hidden_units = hidden_units
        self.frequencies = nn.Parameter(standard_normal((input_dim, hidden_units), generator, lengthscale))
        self.raw_lengthscale = nn.Parameter(inverse_positive(lengthscale))
        self.register_buffer("prior_variance", variance.detach().clone())
        num_features = 2 * hidden_units
        weight_mean = WEIGHT_MEAN_INIT_STD * standard_normal((num_features,), generator, lengthscale)
        self.weight_mean = nn.Parameter(weight_mean)  # m, [2H]
        self.raw_weight_scale = nn.Parameter(raw_scale_tril(WEIGHT_SCALE_INIT, num_features, lengthscale))

    @property
    def lengthscale(self) -> Tensor:
        """The network's lengthscales l ``[D]``."""
        return positive(self.raw_lengthscale)

    @property
    def weight_scale_tril(self) -> Tensor:
        """L, the lower Cholesky factor of the weights' covariance ``[2H, 2H]``."""
        return scale_tril(self.raw_weight_scale)

    def features(self, x: Tensor) -> Tensor:
        """phi(x) ``[n, 2H]`` for ``x`` ``[n, D]``."""
        projection = x @ (self.frequencies / self.lengthscale.unsqueeze(-1))  # x W, [n, H]
        scale = (self.prior_variance / self.hidden_units).sqrt()
        return scale * torch.cat([projection.cos(), projection.sin()], dim=-1)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The mean Phi m ``[n]`` and covariance factor Phi L ``[n, 2H]``."""
        phi = self.features(x)
        return phi @ self.weight_mean, tril_matmul(phi, self.weight_scale_tril)
