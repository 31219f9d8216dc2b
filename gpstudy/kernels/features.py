"""Random-feature maps phi with E_omega[phi(x) . phi(x')] = k(x, x'), one per kernel family.

A map draws the frequencies omega ``[*batch, D, H]`` of a unit-lengthscale kernel and turns the
projections p = (x / l) omega ``[*batch, n, H]`` and the variance s2 ``[*batch]`` into features.
"""

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from gpstudy import generators as draws


class FeatureMap:
    """The interface: ``draw_frequencies``, ``num_features`` and ``__call__``."""

    def draw_frequencies(self, input_dim: int, count: int, generators: draws.Generators, like: Tensor) -> Tensor:
        """omega ``[*batch, D, count]`` for unit lengthscales, dtype and device of ``like``."""
        raise NotImplementedError

    def num_features(self, count: int) -> int:
        """The number of features of ``count`` frequencies."""
        raise NotImplementedError

    def __call__(self, projection: Tensor, variance: Tensor) -> Tensor:
        """phi ``[*batch, n, num_features]`` from p ``[*batch, n, count]`` and s2 ``[*batch]``."""
        raise NotImplementedError


@dataclass(frozen=True)
class FourierFeatures(FeatureMap):
    """Random Fourier features of a stationary kernel (Rahimi & Recht, 2007).

    phi = sqrt(s2 / H) [cos p, sin p] ``[2H]``, omega drawn from the kernel's normalized spectral
    density: N(0, I) for the RBF; for a Matern nu kernel the multivariate Student-t with 2 nu degrees
    of freedom (R&W eq. 4.15), omega = z sqrt(2 nu / u), z ~ N(0, I), u ~ chi^2_{2 nu}.
    """

    degrees_of_freedom: int | None = None  # 2 nu of a Matern kernel; None: Gaussian frequencies (RBF)

    def draw_frequencies(self, input_dim: int, count: int, generators: draws.Generators, like: Tensor) -> Tensor:
        omega = draws.randn((input_dim, count), generators, like)
        if self.degrees_of_freedom is None:
            return omega
        chi2 = draws.randn((self.degrees_of_freedom, count), generators, like).square().sum(-2, keepdim=True)
        return omega * (self.degrees_of_freedom / chi2).sqrt()

    def num_features(self, count: int) -> int:
        return 2 * count

    def __call__(self, projection: Tensor, variance: Tensor) -> Tensor:
        scale = (variance / projection.shape[-1]).sqrt()[..., None, None]
        return _ScaledCosSin.apply(projection, scale)


WRITE_HALVES_FROM = 2**15  # projections from which cos and sin are written into their halves; below it the
# concatenation, whose extra pass costs less than out= into a slice dispatches (docs/gpus.md#third-round)


class _ScaledCosSin(torch.autograd.Function):
    """scale [cos p, sin p] ``[*batch, n, 2H]`` for p ``[*batch, n, H]``, the cosine and sine written into their
    halves of the result (no concatenation; below ``WRITE_HALVES_FROM`` projections, under torch.compile or
    where ``scale`` broadcasts over a batch, the concatenation), with a backward from that output alone
    (d/dp of scale cos p is -scale sin p, the other half), not autograd's chain through the product,
    concatenation, sine and cosine. ``scale`` ``[*batch, 1, 1]`` is positive (its gradient divides by it).
    Why it is fast: docs/gpus.md#memory-passes-first-round and docs/gpus.md#third-round."""

    @staticmethod
    def forward(ctx, projection: Tensor, scale: Tensor) -> Tensor:
        ctx.projection_shape = projection.shape
        if (
            torch.compiler.is_compiling()
            or scale.shape[:-2] != projection.shape[:-2]
            or projection.numel() < WRITE_HALVES_FROM
        ):
            # inductor fuses these into one pass (it refuses out= into a slice); a batch to broadcast; a small map
            features = scale * torch.cat([projection.cos(), projection.sin()], dim=-1)
        else:  # cos and sin written into their halves, then scaled in place
            count = projection.shape[-1]
            features = projection.new_empty((*projection.shape[:-1], 2 * count))
            torch.cos(projection, out=features[..., :count])
            torch.sin(projection, out=features[..., count:])
            features.mul_(scale)
        ctx.save_for_backward(features, scale)
        return features

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, Tensor | None]:
        features, scale = ctx.saved_tensors
        count = features.shape[-1] // 2
        scaled_cos, scaled_sin = features[..., :count], features[..., count:]
        grad_projection = grad_scale = None
        if ctx.needs_input_grad[0]:
            grad_projection = torch.addcmul(grad[..., count:] * scaled_cos, grad[..., :count], scaled_sin, value=-1)
            grad_projection = grad_projection.sum_to_size(ctx.projection_shape)
        if ctx.needs_input_grad[1]:
            grad_scale = (grad * features).sum_to_size(scale.shape) / scale
        return grad_projection, grad_scale


@dataclass(frozen=True)
class ArcCosineFeatures(FeatureMap):
    """Random features of the depth-1 arc-cosine kernel (Cho & Saul, 2009, eq. 1).

    phi = sqrt(2 pi s2 / H) Theta(p) p^d ``[H]``, omega ~ N(0, I): Cho & Saul's
    2 E[Theta(p) p^d Theta(p') p'^d] = (1 / pi) |x|^d |x'|^d J_d, so the factor 2 pi gives eq. 21 of
    AutoGP (no 1 / pi), the kernel of ``ArcCosine``.
    """

    degree: int  # d in {0, 1, 2}

    def draw_frequencies(self, input_dim: int, count: int, generators: draws.Generators, like: Tensor) -> Tensor:
        return draws.randn((input_dim, count), generators, like)

    def num_features(self, count: int) -> int:
        return count

    def __call__(self, projection: Tensor, variance: Tensor) -> Tensor:
        scale = (2 * math.pi * variance / projection.shape[-1]).sqrt()[..., None, None]
        if self.degree == 0:
            return scale * (projection > 0).to(projection.dtype)
        return scale * projection.clamp_min(0.0) ** self.degree
