"""The random feature expansion (RFE) inference network (section 4.2)."""

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from gpstudy import generators as draws
from gpstudy.kernels import KERNELS, Kernel, feature_map_problem
from gpstudy.linalg import inverse_positive, positive
from gpstudy.nets.base import InferenceNetwork
from gpstudy.nets.block_tril import BlockTril

WEIGHT_MEAN_INIT_STD = 1e-3  # m ~ N(0, 1e-3^2) at start (STUDY.md, the authors' code)
WEIGHT_SCALE_INIT = math.log1p(math.e)  # softplus(1): L = softplus(1) I at start (STUDY.md)


class RFE(InferenceNetwork):
    """f(x) = w^T phi(x), w ~ N(m, L L^T) (eq. 30), with the random features of the prior kernel.

    phi(x) = the kernel's ``feature_map`` of the projections x W, W_dj = omega_dj / l_d (eq. 31 and
    the RFE paragraph of section 4.2): for an RBF sqrt(s2 / H) [cos(x W), sin(x W)] ``[2H]``.
    Trainable: the frequencies omega (drawn by the feature map: N(0, 1) for an RBF), the lengthscales
    l (initialized from the prior kernel), m and the lower-triangular L (softplus diagonal, stored by
    column blocks: ``BlockTril``). s2 is the prior kernel's variance at construction, a fixed buffer,
    or with ``live_variance`` the kernel's current variance at every call (the authors' code, where
    the kernel learns online), its value only: no gradient reaches the kernel through the network,
    whose hyperparameters learn from their own bound (section 3.3). The kernel is referenced, not a
    submodule, so its parameters stay out of the network's. With S generators every parameter has a
    leading split dimension.

    Args:
        kernel: the prior kernel, with a ``feature_map``.
        hidden_units: H, the number of frequencies (``feature_map.num_features(H)`` features).
        generators: draw omega and m (one per split; see ``gpstudy.generators``).
        live_variance: read s2 from the kernel at every call instead of copying it.
    """

    name = "rfe"

    def __init__(self, kernel: Kernel, hidden_units: int, generators: draws.Generators, *, live_variance: bool):
        super().__init__()
        lengthscale = kernel.lengthscale.detach().clone()
        batch_shape = draws.batch_shape(generators)
        self.hidden_units = hidden_units
        self.feature_map = kernel.feature_map()
        self.frequencies = nn.Parameter(
            self.feature_map.draw_frequencies(kernel.input_dim, hidden_units, generators, lengthscale)
        )
        self.raw_lengthscale = nn.Parameter(inverse_positive(lengthscale))
        self.live_kernel = (kernel,) if live_variance else ()  # a tuple: not registered as a submodule
        if not live_variance:
            self.register_buffer("prior_variance", kernel.variance.detach().clone())
        num_features = self.feature_map.num_features(hidden_units)
        self.weight_mean = nn.Parameter(WEIGHT_MEAN_INIT_STD * draws.randn((num_features,), generators, lengthscale))
        self.weight_scale = BlockTril(num_features, WEIGHT_SCALE_INIT, lengthscale, batch_shape)  # L

    @classmethod
    def kernel_problem(cls, kernel: str, kernel_options: Mapping[str, Any], options: Mapping[str, Any]) -> str | None:
        """The RFE needs the kernel's random-feature map."""
        reason = feature_map_problem(kernel, kernel_options)
        if reason is None:
            return None
        able = ", ".join(name for name in KERNELS if feature_map_problem(name, {}) is None)
        return (
            f"kernel {kernel!r} with options {dict(kernel_options)}: {reason}; network {cls.name!r} needs one: "
            f"use a kernel with one ({able})"
        )

    @classmethod
    def from_options(
        cls,
        kernel: Kernel,
        generators: draws.Generators,
        *,
        latent_dim: int,
        hidden_units: int,
        live_variance: bool,
        options: Mapping[str, Any],
    ) -> "RFE":
        """One latent function (``build`` checks ``latent_dim`` = 1); no options of its own."""
        return cls(kernel, hidden_units, generators, live_variance=live_variance)

    @property
    def variance(self) -> Tensor:
        """s2 ``[*batch]``: the kernel's current variance with ``live_variance`` (no gradient), else the copy."""
        return self.live_kernel[0].variance.detach() if self.live_kernel else self.prior_variance

    @property
    def lengthscale(self) -> Tensor:
        """The network's lengthscales l ``[*batch, D]``."""
        return positive(self.raw_lengthscale)

    @property
    def weight_scale_tril(self) -> Tensor:
        """L, the lower Cholesky factor of the weights' covariance ``[*batch, F, F]`` (F features)."""
        return self.weight_scale.dense()

    def features(self, x: Tensor, projection_weights: Tensor | None = None) -> Tensor:
        """phi(x) ``[*batch, n, F]`` for ``x`` ``[*batch, n, D]``, in ``feature_dtype`` (W given, or made here)."""
        if projection_weights is None:
            projection_weights = self.projection_weights()
        projection = self.in_feature_dtype(x) @ projection_weights  # x W, [*batch, n, H]
        return self.feature_map(projection, self.in_feature_dtype(self.variance))

    def projection_weights(self) -> Tensor:
        """W = omega / l ``[*batch, D, H]`` (eq. 31), in ``feature_dtype``."""
        return self.in_feature_dtype(self.frequencies / self.lengthscale.unsqueeze(-1))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The mean Phi m ``[*batch, n]`` and covariance factor Phi L ``[*batch, n, F]``, computed in
        ``feature_dtype`` and returned in the parameters' dtype."""
        return self._outputs(x, self.projection_weights(), None)

    def forward_and_held(self, x: Tensor, held: Tensor) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
        """``forward`` at ``x`` and, without gradient, at ``held``, from one W and one L's blocks (its diagonal
        blocks' ``scale_tril`` passes made once, not twice)."""
        weights = self.projection_weights()
        blocks = self.weight_scale.blocks(self.feature_dtype)
        outputs = self._outputs(x, weights, blocks)
        with torch.no_grad():
            return outputs, self._outputs(held, weights, blocks)

    def _outputs(self, x: Tensor, projection_weights: Tensor, blocks: list[Tensor] | None) -> tuple[Tensor, Tensor]:
        mean, factor = self.weight_scale.vector_and_left_multiply(
            self.features(x, projection_weights), self.in_feature_dtype(self.weight_mean), blocks
        )
        dtype = self.weight_mean.dtype
        return mean.to(dtype), factor.to(dtype)
