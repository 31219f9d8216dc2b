"""Cholesky factors and triangular solves by blocks, and the one place that chooses them over the library's.

On a GPU a batched Cholesky factor (cuSOLVER's potrf) and a batched triangular solve run at a fraction of
the rate of a matrix product (issue 39: 1-4 and 4-20 TFLOP/s against 30-60 on an H100 in float64). Split
in two, [A11 A12; A21 A22] = [L11 0; L21 L22] [L11 0; L21 L22]^T gives

    L11 = chol(A11),   L21 = A21 L11^-T,   L22 = chol(A22 - L21 L21^T),

and a triangular solve [L11 0; L21 L22] [X1; X2] = [B1; B2] gives X1 = L11^-1 B1, X2 = L22^-1 (B2 - L21 X1):
recursing on the halves, only leaves of at most ``numerics.FACTOR_BLOCK`` rows are left to the library
(``torch.linalg.cholesky_ex``, ``torch.linalg.solve_triangular``); the rest of the n^3 work is matrix
products. Everything is differentiable by autograd through the blocks.

:func:`cholesky_ex` and :func:`solve_triangular` choose (:func:`library_device`): on a CPU exactly the
library's calls (LAPACK's own blocked potrf and trsm), elsewhere (CUDA, and ``meta``, where
``benchmarks/gpu_estimate.py`` counts a GPU's work) the blocked forms.
"""

import torch
import torch.nn.functional as F
from torch import Tensor

from gpstudy import numerics


def library_device(tensor: Tensor) -> bool:
    """Whether ``tensor`` is on a CPU, where the library's factorizations and solves (LAPACK) run as they
    are; on any other device this module's blocked forms and ``gaussian.inverse_by_products`` run."""
    return tensor.device.type == "cpu"


def cholesky_ex(matrix: Tensor) -> tuple[Tensor, Tensor]:
    """``torch.linalg.cholesky_ex(matrix)`` on a CPU, :func:`blocked_cholesky_ex` elsewhere: the lower
    factor ``[..., n, n]`` and ``info`` ``[...]`` (0, or the order of the first leading minor found not
    positive-definite), nothing read on the host."""
    if library_device(matrix):
        return torch.linalg.cholesky_ex(matrix)
    return blocked_cholesky_ex(matrix)


def solve_triangular(matrix: Tensor, rhs: Tensor, *, upper: bool, left: bool = True) -> Tensor:
    """``torch.linalg.solve_triangular(matrix, rhs, upper=upper, left=left)`` on a CPU or for fewer than
    ``numerics.FACTOR_BLOCK`` right-hand sides (a memory-bound solve that products would not speed up, only
    add launches to); :func:`blocked_solve_triangular` elsewhere."""
    right_hand_sides = rhs.shape[-1] if left else rhs.shape[-2]
    if library_device(matrix) or right_hand_sides < numerics.FACTOR_BLOCK:
        return torch.linalg.solve_triangular(matrix, rhs, upper=upper, left=left)
    return blocked_solve_triangular(matrix, rhs, upper=upper, left=left)


def _minus_product(c: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """c - a @ b: where the three share their batch shape one GEMM that reads c (``baddbmm``), no
    elementwise pass; else a product and a subtraction (broadcasting)."""
    batch = c.shape[:-2]
    if a.shape[:-2] != batch or b.shape[:-2] != batch:
        return c - a @ b
    flat = [each.reshape(-1, *each.shape[-2:]) for each in (c, a, b)]
    return torch.baddbmm(*flat, alpha=-1).reshape(c.shape)


def _solve_left(matrix: Tensor, rhs: Tensor, upper: bool) -> Tensor:
    """matrix^-1 rhs by halves of the triangular ``matrix`` ``[..., n, n]`` for ``rhs`` ``[..., n, k]``."""
    size = matrix.shape[-1]
    if size <= numerics.FACTOR_BLOCK:
        return torch.linalg.solve_triangular(matrix, rhs, upper=upper)
    half = size // 2
    if upper:  # [U11 U12; 0 U22]: X2 = U22^-1 B2, X1 = U11^-1 (B1 - U12 X2)
        bottom = _solve_left(matrix[..., half:, half:], rhs[..., half:, :], upper)
        top = _solve_left(matrix[..., :half, :half],
                          _minus_product(rhs[..., :half, :], matrix[..., :half, half:], bottom), upper)
    else:  # [L11 0; L21 L22]: X1 = L11^-1 B1, X2 = L22^-1 (B2 - L21 X1)
        top = _solve_left(matrix[..., :half, :half], rhs[..., :half, :], upper)
        bottom = _solve_left(matrix[..., half:, half:],
                             _minus_product(rhs[..., half:, :], matrix[..., half:, :half], top), upper)
    return torch.cat([top, bottom], dim=-2)


def blocked_solve_triangular(matrix: Tensor, rhs: Tensor, *, upper: bool, left: bool = True) -> Tensor:
    """``torch.linalg.solve_triangular``'s X (matrix X = rhs with ``left``, X matrix = rhs without) for a
    triangular ``[..., n, n]`` matrix, by halves of the matrix: leaves of at most ``numerics.FACTOR_BLOCK``
    rows by the library, the off-diagonal blocks' updates as products. Only the triangle ``upper`` names
    is read. A right-side solve is the left-side one of the transposes: X A = B <=> A^T X^T = B^T."""
    if left:
        return _solve_left(matrix, rhs, upper)
    return _solve_left(matrix.mT, rhs.mT, not upper).mT


class _SymmetricGradient(torch.autograd.Function):
    """The identity, whose backward makes the gradient symmetric, (G + G^T) / 2: the gradient
    ``torch.linalg.cholesky`` gives its input, where the blocks read only its lower triangle."""

    @staticmethod
    def forward(ctx, matrix: Tensor) -> Tensor:
        return matrix.view_as(matrix)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        return 0.5 * (grad + grad.mT)


def _cholesky_ex(matrix: Tensor) -> tuple[Tensor, Tensor]:
    """The recursion of :func:`blocked_cholesky_ex` (the lower triangle of ``matrix`` only)."""
    size = matrix.shape[-1]
    if size <= numerics.FACTOR_BLOCK:
        return torch.linalg.cholesky_ex(matrix)
    half = size // 2
    top, top_info = _cholesky_ex(matrix[..., :half, :half])  # L11
    left = _solve_left(top, matrix[..., half:, :half].mT, upper=False).mT  # L21 = A21 L11^-T
    bottom, bottom_info = _cholesky_ex(_minus_product(matrix[..., half:, half:], left, left.mT))  # L22
    factor = torch.cat([F.pad(top, (0, size - half)), torch.cat([left, bottom], dim=-1)], dim=-2)
    info = torch.where(top_info > 0, top_info, torch.where(bottom_info > 0, bottom_info + half, bottom_info))
    return factor, info


def blocked_cholesky_ex(matrix: Tensor) -> tuple[Tensor, Tensor]:
    """``torch.linalg.cholesky_ex`` by halves: L11 = chol(A11), L21 = A21 L11^-T (:func:`blocked_solve_triangular`),
    L22 = chol(A22 - L21 L21^T), leaves of at most ``numerics.FACTOR_BLOCK`` rows by the library.

    Reads the lower triangle of the symmetric ``[..., n, n]`` matrix, as the library does; its gradient is
    the library's symmetric one. ``info`` ``[...]`` is 0 where every leaf factored, else the order of the
    first leading minor a leaf found not positive-definite, counted in the whole matrix (a NaN entry of the
    lower triangle reaches a later leaf's diagonal: positive ``info``, as the library's), so that the deferred
    checks and retries of ``gaussian.cholesky`` read it as they read the library's. A failed matrix's factor
    is undefined (NaN or infinite entries, where the library's is partial); the others' are unaffected."""
    if matrix.requires_grad and matrix.shape[-1] > numerics.FACTOR_BLOCK:
        matrix = _SymmetricGradient.apply(matrix)
    return _cholesky_ex(matrix)
