"""The kernel base classes: ARD lengthscales, variance, positivity, shapes and ``diag``."""

import inspect
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from gpstudy.kernels.features import FeatureMap
from gpstudy.linalg import inverse_positive, positive
from gpstudy.numerics import DEFAULT_DTYPE


class Kernel(nn.Module):
    """A kernel s2 k(x / l, x' / l) with ARD lengthscales l and variance s2.

    A subclass implements ``K`` and ``K_diag`` (a stationary one only ``K_r2``: see ``Stationary``)
    and, where it has random features, ``random_features``; one with options of its own gives them
    back as ``options``. With a ``batch_shape`` (one kernel per split:
    ``(S,)``) every hyperparameter has it as leading dimensions and inputs are ``[*batch_shape, n, D]``.

    Args:
        input_dim: D, the number of input dimensions.
        lengthscale: initial lengthscales, one value for every dimension or a sequence of D.
        variance: initial variance s2.
        dtype: dtype of the parameters.
        batch_shape: leading dimensions of the hyperparameters.
    """

    options_schema: ClassVar[dict[str, Any]] = {  # JSON schema of the options a config may pass
        "type": "object",
        "additionalProperties": False,
        "properties": {},
    }

    def __init__(
        self,
        input_dim: int,
        lengthscale: float | Sequence[float] = 1.0,
        variance: float = 1.0,
        dtype: torch.dtype = DEFAULT_DTYPE,
        batch_shape: tuple[int, ...] = (),
    ):
        super().__init__()
        self.input_dim = input_dim
        lengthscale = torch.as_tensor(lengthscale, dtype=dtype).expand(*batch_shape, input_dim).clone()
        variance = torch.as_tensor(variance, dtype=dtype).expand(batch_shape).clone()
        self.raw_lengthscale = nn.Parameter(inverse_positive(lengthscale))
        self.raw_variance = nn.Parameter(inverse_positive(variance))

    @property
    def lengthscale(self) -> Tensor:
        """ARD lengthscales l, shape ``[*batch_shape, D]``."""
        return positive(self.raw_lengthscale)

    @property
    def variance(self) -> Tensor:
        """Variance s2, shape ``[*batch_shape]``."""
        return positive(self.raw_variance)

    def forward(self, x1: Tensor, x2: Tensor | None = None, diag: bool = False) -> Tensor:
        """The covariance matrix K(x1, x2) ``[..., n, m]``, or with ``diag`` k(x1_i, x1_i) ``[..., n]``.

        Args:
            x1: ``[..., n, D]``.
            x2: ``[..., m, D]``; ``x1`` when omitted.
            diag: return the diagonal of K(x1, x1) only (``x2`` must be omitted).
        """
        if diag:
            if x2 is not None:
                raise ValueError("diag=True computes k(x, x); do not pass x2")
            return self.K_diag(x1)
        return self.K(x1, x2)

    def K(self, x1: Tensor, x2: Tensor | None) -> Tensor:  # noqa: N802 (GPflow's name)
        """K(x1, x2) ``[..., n, m]``; ``x2 = None`` means K(x1, x1)."""
        raise NotImplementedError

    def K_diag(self, x: Tensor) -> Tensor:  # noqa: N802 (GPflow's name)
        """k(x_i, x_i) ``[..., n]``."""
        raise NotImplementedError

    @property
    def options(self) -> dict[str, Any]:
        """The options it was built with (``options_schema``'s keys); none by default."""
        return {}

    @classmethod
    def resolved_options(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        """``options`` (a config's ``kernel_options``) with the constructor's defaults for those not given."""
        parameters = inspect.signature(cls.__init__).parameters
        return {name: options.get(name, parameters[name].default) for name in cls.options_schema["properties"]}

    @classmethod
    def random_features(cls, options: Mapping[str, Any]) -> FeatureMap:
        """The random-feature map of this kernel built with ``options`` (a config's ``kernel_options``),
        whose expected inner product is the kernel: what it declares it has.

        Raises:
            ValueError: saying why it has none (by default: none at all).
        """
        raise ValueError(f"{cls.__name__} has no random-feature map")

    def feature_map(self) -> FeatureMap:
        """The random-feature map whose expected inner product is this kernel (``random_features``)."""
        return self.random_features(self.options)


class Stationary(Kernel):
    """A stationary kernel k(x, x') = K_r2(r2), r2 = sum_d (x_d - x'_d)^2 / l_d^2 (ARD).

    A subclass implements only ``K_r2``; the variance s2 is the base class's, for ``K_r2`` to use.
    """

    def scaled_squared_distance(self, x1: Tensor, x2: Tensor) -> Tensor:
        """r2_ij = ||(x1_i - x2_j) / l||^2 for ``[..., n, D]`` and ``[..., m, D]``, shape ``[..., n, m]``."""
        lengthscale = self.lengthscale.unsqueeze(-2)
        a, b = x1 / lengthscale, x2 / lengthscale
        cross = a @ b.mT
        r2 = a.square().sum(-1).unsqueeze(-1) + b.square().sum(-1).unsqueeze(-2) - 2 * cross
        return r2.clamp_min(0.0)

    def K(self, x1: Tensor, x2: Tensor | None) -> Tensor:  # noqa: N802 (GPflow's name)
        return self.K_r2(self.scaled_squared_distance(x1, x1 if x2 is None else x2))

    def K_diag(self, x: Tensor) -> Tensor:  # noqa: N802 (GPflow's name)
        """s2 at every point (K_r2(0) = s2 for every stationary kernel here), a broadcast view ``[..., n]``."""
        variance = self.variance.unsqueeze(-1)
        return variance.expand(torch.broadcast_shapes(variance.shape, x.shape[:-1]))

    def K_r2(self, r2: Tensor) -> Tensor:  # noqa: N802 (GPflow's name)
        """The kernel as a function of the scaled squared distances ``[..., n, m]``, elementwise."""
        raise NotImplementedError
