"""Parameterizations of positive quantities and lower Cholesky factors: every model's softplus and scale_tril,
so that no module writes its own."""

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from gpstudy import numerics


def positive(raw: Tensor) -> Tensor:
    """Map an unconstrained parameter to a positive value: softplus(raw) + POSITIVE_FLOOR."""
    return F.softplus(raw) + numerics.POSITIVE_FLOOR


SOFTPLUS_BETA, SOFTPLUS_THRESHOLD = 1.0, 20.0  # F.softplus's defaults, with which ``positive`` calls it


def inverse_positive(value: Tensor) -> Tensor:
    """The unconstrained parameter whose ``positive`` is ``value`` (value > POSITIVE_FLOOR)."""
    shifted = value - numerics.POSITIVE_FLOOR
    return shifted + torch.log(-torch.expm1(-shifted))  # log(exp(v) - 1), stable for large v


def scale_tril(raw: Tensor) -> Tensor:
    """A lower Cholesky factor ``[..., n, n]`` from a raw square matrix: strict lower triangle kept, diagonal
    ``positive`` (softplus + ``numerics.POSITIVE_FLOOR``).

    Under torch.compile the expression tril + diag_embed, which inductor fuses into one kernel (the compiled
    numbers of ``configs/paper-cpu.yaml``'s regeneration are that graph's); elsewhere :class:`_ScaleTril`,
    equal to the expression bit for bit. Why it is fast: docs/gpus.md#memory-passes-second-round.

    Args:
        raw: ``[..., n, n]``; its upper triangle is ignored.
    """
    if torch.compiler.is_compiling():
        return torch.tril(raw, diagonal=-1) + torch.diag_embed(positive(raw.diagonal(dim1=-2, dim2=-1)))
    return _ScaleTril.apply(raw)


class _ScaleTril(torch.autograd.Function):
    """tril(raw, -1) + diag_embed(positive(diag raw)) as the strict lower triangle copied and its diagonal
    then written into it in place, and its gradient likewise; every element by the same floating-point
    operations as autograd's (x + 0 is x), its diagonal's gradient by ``softplus_backward``, autograd's formula
    for ``F.softplus``. Why it is fast: docs/gpus.md#memory-passes-second-round."""

    @staticmethod
    def forward(ctx, raw: Tensor) -> Tensor:
        factor = raw.tril(-1)
        factor.diagonal(dim1=-2, dim2=-1).copy_(positive(raw.diagonal(dim1=-2, dim2=-1)))
        ctx.save_for_backward(raw)
        return factor

    @staticmethod
    @once_differentiable  # a second derivative raises instead of being wrong
    def backward(ctx, grad: Tensor) -> Tensor:
        (raw,) = ctx.saved_tensors
        grad_raw = grad.tril(-1)
        grad_raw.diagonal(dim1=-2, dim2=-1).copy_(
            torch.ops.aten.softplus_backward(
                grad.diagonal(dim1=-2, dim2=-1), raw.diagonal(dim1=-2, dim2=-1), SOFTPLUS_BETA, SOFTPLUS_THRESHOLD
            )
        )
        return grad_raw


def raw_of_scale_tril(chol: Tensor) -> Tensor:
    """The raw matrix ``[..., n, n]`` whose ``scale_tril`` is the lower Cholesky factor ``chol`` (its
    diagonal above the positivity floor)."""
    return torch.tril(chol, diagonal=-1) + torch.diag_embed(inverse_positive(chol.diagonal(dim1=-2, dim2=-1)))


def raw_scale_tril(diagonal: float, size: int, like: Tensor, batch_shape: tuple[int, ...] = ()) -> Tensor:
    """The raw matrices ``[*batch_shape, size, size]`` whose ``scale_tril`` is ``diagonal * I``."""
    value = torch.full((*batch_shape, size), diagonal, dtype=like.dtype, device=like.device)
    return torch.diag_embed(inverse_positive(value))
