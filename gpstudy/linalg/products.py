"""Symmetric products F F^T (Grams) by row halves, with a cheaper backward than autograd's."""

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from gpstudy.linalg import blocked

HALVES_FROM = 128  # rows of F from which F F^T is computed by row halves; below it one product launches less


def symmetric_product(factor: Tensor, upper_triangular: bool = False, alpha: float = 1.0) -> Tensor:
    """F F^T ``[..., n, n]`` for F ``[..., n, r]``, symmetric: from the blocks of two row halves, the
    off-diagonal block once (3/4 of a full product; its diagonal blocks symmetric as BLAS makes them, and off a
    CPU made by halves again: ``_diagonal_block_into``), or for fewer than ``HALVES_FROM`` rows exactly, from one
    product's lower triangle.

    With ``upper_triangular`` (a square upper-triangular F = [[F11, F12], [0, F22]]) the bottom half's
    zeros enter no product: [F11 F12][F11 F12]^T, F22 F12^T and F22 F22^T, n^3 in all (half a full product).
    ``alpha`` scales the result (alpha F F^T), by the GEMMs.
    """
    if factor.shape[-2] < HALVES_FROM:
        product = factor @ factor.mT if alpha == 1.0 else alpha * (factor @ factor.mT)
        return product.tril() + product.tril(-1).mT
    rows = factor.shape[-2]
    product = factor.new_empty((*factor.shape[:-1], rows))  # returned itself, not a view (``add_jitter_``'s)
    symmetric_product_into(
        factor.reshape(-1, rows, factor.shape[-1]), product.view(-1, rows, rows), upper_triangular, alpha
    )
    return product


def symmetric_product_into(factor: Tensor, out: Tensor, upper_triangular: bool = False, alpha: float = 1.0) -> None:
    """Write ``symmetric_product``'s alpha F F^T by row halves into ``out`` ``[B, n, n]`` (a view may be strided)
    for F ``[B, n, r]``: the GEMMs write into its blocks (alpha applied by them), one copy mirrors the
    off-diagonal block. Why it is fast: docs/gpus.md#memory-passes-second-round."""
    half = factor.shape[-2] // 2
    top = factor[:, :half, :]
    if upper_triangular:  # the bottom rows and their product with the top: columns half: only
        bottom, top_right = factor[:, half:, half:], top[..., half:]
    else:
        bottom, top_right = factor[:, half:, :], top
    lower_left = out[:, half:, :half]
    lower_left.baddbmm_(bottom, top_right.mT, beta=0, alpha=alpha)  # beta 0: uninitialized values are not read
    _diagonal_block_into(top, out[:, :half, :half], False, alpha)
    _diagonal_block_into(bottom, out[:, half:, half:], upper_triangular, alpha)
    out[:, :half, half:].copy_(lower_left.mT)  # the one pass: a quarter of the result read and written


def _diagonal_block_into(factor: Tensor, out: Tensor, upper_triangular: bool, alpha: float) -> None:
    """alpha F F^T of a half into its diagonal block ``out``: off a CPU (``blocked.library_device``) by halves
    again while it has ``HALVES_FROM`` rows (a Gram's products 3/4, 5/8, 9/16 ... of a full one's: 1000 rows, 9/16),
    on a CPU one GEMM (the numbers the study's CPU runs were made with)."""
    if factor.shape[-2] >= HALVES_FROM and not blocked.library_device(factor):
        symmetric_product_into(factor, out, upper_triangular, alpha)
    else:
        out.baddbmm_(factor, factor.mT, beta=0, alpha=alpha)


@torch.no_grad()
def stacked_gram(head: Tensor, tail: Tensor, tail_block: Tensor) -> Tensor:
    """[H; T] [H; T]^T ``[..., h + t, h + t]`` for the rows of H ``[..., h, r]`` stacked on those of T
    ``[..., t, r]``, with the bottom-right block ``tail_block`` ``[..., t, t]`` (T T^T, made by the caller
    already) copied in instead of computed again: H H^T as ``symmetric_product`` into its block, T H^T one
    product into its block, mirrored above. No concatenation of H and T, and 3/8 of the stacked Gram's
    products at h = t: GPNet's q_t over [X_B; X_M], whose X_M block its loss has formed. A value, no gradient.
    Why it is fast: docs/gpus.md#third-round.
    """
    h, t, r = head.shape[-2], tail.shape[-2], head.shape[-1]
    joint = head.new_empty((*head.shape[:-2], h + t, h + t))
    blocks = joint.view(-1, h + t, h + t)
    heads = head.reshape(-1, h, r)
    if h < HALVES_FROM:
        blocks[:, :h, :h].copy_(symmetric_product(heads))
    else:
        symmetric_product_into(heads, blocks[:, :h, :h])
    lower_left = blocks[:, h:, :h]
    lower_left.baddbmm_(tail.reshape(-1, t, r), heads.mT, beta=0)
    blocks[:, :h, h:].copy_(lower_left.mT)
    blocks[:, h:, h:].copy_(tail_block.reshape(-1, t, t))
    return joint


class _Gram(torch.autograd.Function):
    """F F^T computed as ``symmetric_product``, with a backward of one product, (G + G^T) F,
    instead of autograd's two."""

    @staticmethod
    def forward(ctx, factor: Tensor) -> Tensor:
        ctx.save_for_backward(factor)
        return symmetric_product(factor)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (factor,) = ctx.saved_tensors
        return (grad + grad.mT) @ factor


def gram(factor: Tensor) -> Tensor:
    """``factor @ factor.mT`` ``[..., n, n]`` for a ``[..., n, r]`` factor, exactly symmetric, with a
    cheaper forward and backward than autograd's."""
    return _Gram.apply(factor)


class _SquaredNorm(torch.autograd.Function):
    """sum x^2 over ``dims``: forward one reduction reading x (``torch.linalg.vector_norm``, squared: no square of
    x written), backward one pass, x * 2 dS (autograd's ``square().sum()``: the square written and read forward,
    three passes backward)."""

    @staticmethod
    def forward(ctx, x: Tensor, dims: tuple[int, ...]) -> Tensor:
        ctx.dims = sorted(d % x.ndim for d in dims)
        ctx.save_for_backward(x)
        return torch.linalg.vector_norm(x, dim=dims).square()

    @staticmethod
    @once_differentiable  # a second derivative raises instead of being wrong
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        (x,) = ctx.saved_tensors
        scale = 2 * grad
        for d in ctx.dims:
            scale = scale.unsqueeze(d)
        return x * scale, None


def squared_norm(x: Tensor, dim: int | tuple[int, ...]) -> Tensor:
    """``x.square().sum(dim)`` (its value to a rounding or two: the norm is squared), with one read of x forward
    and one pass backward instead of autograd's four passes forward and three backward."""
    return _SquaredNorm.apply(x, (dim,) if isinstance(dim, int) else tuple(dim))
