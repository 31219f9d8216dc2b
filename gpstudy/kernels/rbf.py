"""The squared-exponential (RBF) kernel with ARD lengthscales."""

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from gpstudy.kernels.base import Stationary
from gpstudy.kernels.features import FourierFeatures


class RBF(Stationary):
    """k(x, x') = s2 exp(-r2 / 2) (Rasmussen & Williams, eq. 4.9, with ARD)."""

    def K_r2(self, r2: Tensor) -> Tensor:  # noqa: N802 (GPflow's name)
        return self.variance[..., None, None] * (-0.5 * r2).exp()

    def K(self, x1: Tensor, x2: Tensor | None) -> Tensor:  # noqa: N802 (GPflow's name)
        """K(x1, x2) ``[..., n, m]`` = s2 exp(a' b'^T) with a = x1 / l, b = x2 / l, a' = [a, -|a|^2 / 2, 1] and
        b' = [b, 1, -|b|^2 / 2]: the exponent -r2 / 2 is one product (inner size D + 2), then the exponential and
        the variance in place (:class:`_ScaledExpOfProduct`), 4 passes over ``[..., n, m]``. Not clamped: where
        x1_i = x2_j the exponent is 0 up to rounding, so k may exceed s2 by a rounding error; K(x, x) is symmetric
        up to rounding (the exponent's terms are summed in another order above the diagonal than below). Why it
        is fast: docs/gpus.md#memory-passes-first-round."""
        lengthscale = self.lengthscale.unsqueeze(-2)
        a = x1 / lengthscale
        b = a if x2 is None else x2 / lengthscale
        one = torch.ones((), dtype=a.dtype, device=a.device)
        left = torch.cat([a, -0.5 * a.square().sum(-1, keepdim=True), one.expand(*a.shape[:-1], 1)], dim=-1)
        right = torch.cat([b, one.expand(*b.shape[:-1], 1), -0.5 * b.square().sum(-1, keepdim=True)], dim=-1)
        return _ScaledExpOfProduct.apply(left, right, self.variance[..., None, None])

    @classmethod
    def random_features(cls, options: Mapping[str, Any]) -> FourierFeatures:
        """Random Fourier features, omega ~ N(0, I) (the RBF's spectral density)."""
        return FourierFeatures()


class _ScaledExpOfProduct(torch.autograd.Function):
    """s exp(a b^T) ``[..., n, m]`` for a ``[..., n, k]``, b ``[..., m, k]`` and a scale s ``[..., 1, 1]``: the
    product's exponential and the scale taken in place (4 passes over the result), the result not saved
    (callers add jitter to it in place): the backward forms exp(a b^T) again and G = exp(a b^T) * dK in place
    (5 passes), ds = sum G (1), then G (s b) and G^T (s a), the scale taken on the small factors, not on G."""

    @staticmethod
    def forward(ctx, left: Tensor, right: Tensor, scale: Tensor) -> Tensor:
        ctx.save_for_backward(left, right, scale)
        return (left @ right.mT).exp_().mul_(scale)

    @staticmethod
    @once_differentiable  # a second derivative raises instead of being wrong
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        left, right, scale = ctx.saved_tensors
        weighted = (left @ right.mT).exp_().mul_(grad)  # dK * exp(a b^T)
        grad_scale = weighted.sum_to_size(scale.shape) if ctx.needs_input_grad[2] else None
        # dK * K = s G: s on b and a ([..., m, k], [..., n, k]), a pass over [..., n, m] less
        grad_left = (weighted @ (right * scale)).sum_to_size(left.shape) if ctx.needs_input_grad[0] else None
        grad_right = (weighted.mT @ (left * scale)).sum_to_size(right.shape) if ctx.needs_input_grad[1] else None
        return grad_left, grad_right, grad_scale
