"""The multilayer arc-cosine kernel (Cho & Saul, 2009) as AutoGP writes it (Krauth et al., 2017, app. B)."""

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor

from gpstudy.kernels.base import Kernel
from gpstudy.kernels.features import ArcCosineFeatures
from gpstudy.numerics import DEFAULT_DTYPE

DEGREES = (0, 1, 2)  # degrees d with a closed-form J_d
J_AT_ZERO = {0: math.pi, 1: math.pi, 2: 3 * math.pi}  # J_d(0), the angle of k(x, x)


def angular(degree: int, angle: Tensor) -> Tensor:
    """J_d(angle) of eq. 23: pi - t, sin t + (pi - t) cos t, 3 sin t cos t + (pi - t)(1 + 2 cos^2 t)."""
    rest = math.pi - angle
    if degree == 0:
        return rest
    cos, sin = angle.cos(), angle.sin()
    if degree == 1:
        return sin + rest * cos
    return 3 * sin * cos + rest * (1 + 2 * cos.square())


class ArcCosine(Kernel):
    """k(x, x') = s2 kappa_d^(L)(x / l, x' / l), degree d, depth L (AutoGP eqs. 20-24).

    kappa^(1)(x, x') = |x|^d |x'|^d J_d(phi) (eq. 21) with phi the angle between x and x' (eq. 24);
    kappa^(l+1)(x, x') = (1 / pi) (kappa^(l)(x, x) kappa^(l)(x', x'))^(d / 2) J_d(phi^(l)) (eq. 20)
    with phi^(l) the angle of eq. 22. Eq. 21 has no 1 / pi where Cho & Saul (2009) have one: a
    constant factor, absorbed by s2. Not stationary: the diagonal is computed in closed form,
    kappa^(1)(x, x) = |x|^(2d) J_d(0) and kappa^(l+1)(x, x) = kappa^(l)(x, x)^d J_d(0) / pi. Off the
    diagonal the cosines are clamped just inside [-1, 1], where arccos has a finite slope, so
    gradients stay finite; K(x) takes its diagonal from the closed form. A zero input has cosine 0.
    AutoGP used d = 1, L = 3; only L = 1 has random features.

    Args:
        input_dim: D.
        degree: d in {0, 1, 2}.
        depth: L >= 1.
        lengthscale, variance, dtype, batch_shape: as ``Kernel``.
    """

    options_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"degree": {"enum": list(DEGREES)}, "depth": {"type": "integer", "minimum": 1}},
    }

    def __init__(
        self,
        input_dim: int,
        degree: int = 1,
        depth: int = 1,
        lengthscale: float | Sequence[float] = 1.0,
        variance: float = 1.0,
        dtype: torch.dtype = DEFAULT_DTYPE,
        batch_shape: tuple[int, ...] = (),
    ):
        if degree not in DEGREES or not isinstance(depth, int) or depth < 1:
            raise ValueError(f"ArcCosine needs degree in {DEGREES} and an integer depth >= 1, got {degree} and {depth}")
        super().__init__(input_dim, lengthscale, variance, dtype, batch_shape)
        self.degree, self.depth = degree, depth

    def _scaled(self, x: Tensor) -> Tensor:
        return x / self.lengthscale.unsqueeze(-2)

    def _layers_diag(self, norm2: Tensor) -> list[Tensor]:
        """kappa^(l)(x, x) for l = 0 (|x|^2), 1, ..., L, each ``[..., n]``."""
        layers = [norm2]
        for layer in range(self.depth):
            scale = 1.0 if layer == 0 else 1 / math.pi
            layers.append(scale * J_AT_ZERO[self.degree] * layers[-1] ** self.degree)
        return layers

    def K(self, x1: Tensor, x2: Tensor | None) -> Tensor:  # noqa: N802 (GPflow's name)
        a = self._scaled(x1)
        b = a if x2 is None else self._scaled(x2)
        diag1 = self._layers_diag(a.square().sum(-1))
        diag2 = diag1 if x2 is None else self._layers_diag(b.square().sum(-1))
        kappa = a @ b.mT  # kappa^(0) = x . x'
        finfo = torch.finfo(kappa.dtype)
        for layer in range(self.depth):
            # kappa(x, x) kappa(x', x'), floored for x = 0
            product = (diag1[layer].unsqueeze(-1) * diag2[layer].unsqueeze(-2)).clamp_min(finfo.tiny)
            angle = (kappa * product.rsqrt()).clamp(finfo.eps - 1, 1 - finfo.eps).arccos()  # eqs. 22, 24
            scale = 1.0 if layer == 0 else 1 / math.pi
            kappa = scale * product ** (self.degree / 2) * angular(self.degree, angle)  # eqs. 20, 21
            if x2 is None:
                kappa = kappa.diagonal_scatter(diag1[layer + 1], dim1=-2, dim2=-1)
        return self.variance[..., None, None] * kappa

    def K_diag(self, x: Tensor) -> Tensor:  # noqa: N802 (GPflow's name)
        return self.variance[..., None] * self._layers_diag(self._scaled(x).square().sum(-1))[-1]

    @property
    def options(self) -> dict[str, Any]:
        return {"degree": self.degree, "depth": self.depth}

    @classmethod
    def random_features(cls, options: Mapping[str, Any]) -> ArcCosineFeatures:
        """Random features of the depth-1 kernel, omega ~ N(0, I) (Cho & Saul, 2009, eq. 1)."""
        options = cls.resolved_options(options)
        if options["depth"] != 1:
            raise ValueError(
                f"ArcCosine of depth {options['depth']} has no random-feature map: only depth 1 is "
                "an expectation over one layer of random weights"
            )
        return ArcCosineFeatures(options["degree"])
