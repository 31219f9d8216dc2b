"""The random feature expansion (RFE) inference network (section 4.2)."""

import math

import torch
from torch import Tensor, nn

from gpstudy import generators as draws
from gpstudy.gaussian import inverse_positive, positive
from gpstudy.nets.base import InferenceNetwork
from gpstudy.nets.block_tril import BlockTril

WEIGHT_MEAN_INIT_STD = 1e-3  # m ~ N(0, 1e-3^2) at start (STUDY.md, the authors' code)
WEIGHT_SCALE_INIT = math.log1p(math.e)  # softplus(1): L = softplus(1) I at start (STUDY.md)


class RFE(InferenceNetwork):
    """f(x) = w^T phi(x), w ~ N(m, L L^T) (eq. 30), with random Fourier features of an RBF prior.

    phi(x) = sqrt(s2 / H) [cos(x W), sin(x W)] ``[2H]`` with W_dj = omega_dj / l_d (eq. 31 and the
    RFE paragraph of section 4.2). Trainable: the frequencies omega (drawn from N(0, 1)), the
    lengthscales l (initialized from the prior kernel), m and the lower-triangular L (softplus
    diagonal, stored by column blocks: ``BlockTril``). s2 is the prior kernel's variance at
    construction, a fixed buffer. With S generators every parameter has a leading split dimension.

    Args:
        input_dim: D.
        hidden_units: H, the number of frequencies (2H features).
        lengthscale: the prior kernel's lengthscales ``[*batch, D]``, copied.
        variance: the prior kernel's variance s2 ``[*batch]``, copied.
        generators: draw omega and m (one per split; see ``gpstudy.generators``).
    """

    def __init__(
        self,
        input_dim: int,
        hidden_units: int,
        lengthscale: Tensor,
        variance: Tensor,
        generators: draws.Generators,
    ):
        super().__init__()
        lengthscale = lengthscale.detach().clone()
        batch_shape = draws.batch_shape(generators)
        self.hidden_units = hidden_units
        self.frequencies = nn.Parameter(draws.randn((input_dim, hidden_units), generators, lengthscale))
        self.raw_lengthscale = nn.Parameter(inverse_positive(lengthscale))
        self.register_buffer("prior_variance", variance.detach().clone())
        num_features = 2 * hidden_units
        self.weight_mean = nn.Parameter(WEIGHT_MEAN_INIT_STD * draws.randn((num_features,), generators, lengthscale))
        self.weight_scale = BlockTril(num_features, WEIGHT_SCALE_INIT, lengthscale, batch_shape)  # L

    @property
    def lengthscale(self) -> Tensor:
        """The network's lengthscales l ``[*batch, D]``."""
        return positive(self.raw_lengthscale)

    @property
    def weight_scale_tril(self) -> Tensor:
        """L, the lower Cholesky factor of the weights' covariance ``[*batch, 2H, 2H]``."""
        return self.weight_scale.dense()

    def features(self, x: Tensor) -> Tensor:
        """phi(x) ``[*batch, n, 2H]`` for ``x`` ``[*batch, n, D]``."""
        projection = x @ (self.frequencies / self.lengthscale.unsqueeze(-1))  # x W, [*batch, n, H]
        scale = (self.prior_variance / self.hidden_units).sqrt()[..., None, None]
        return scale * torch.cat([projection.cos(), projection.sin()], dim=-1)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The mean Phi m ``[*batch, n]`` and covariance factor Phi L ``[*batch, n, 2H]``."""
        phi = self.features(x)
        return (phi @ self.weight_mean.unsqueeze(-1)).squeeze(-1), self.weight_scale.left_multiply(phi)
