"""Cholesky factors and triangular solves by blocks, and the one place that chooses them over the library's.

On a GPU a batched Cholesky factor (cuSOLVER's potrf) and a batched triangular solve run at a fraction of
the rate of a matrix product, so their work is moved into products. Split in two,
[A11 A12; A21 A22] = [L11 0; L21 L22] [L11 0; L21 L22]^T gives

    L11 = chol(A11),   L21 = A21 L11^-T,   L22 = chol(A22 - L21 L21^T),

and a triangular solve [L11 0; L21 L22] [X1; X2] = [B1; B2] gives X1 = L11^-1 B1, X2 = L22^-1 (B2 - L21 X1):
recursing on the halves, only leaves of at most ``numerics.FACTOR_BLOCK`` rows are left to the library
(``torch.linalg.cholesky_ex``, ``torch.linalg.solve_triangular``); the rest of the n^3 work is matrix
products. Each writes its blocks in place into one result (no concatenation per level), outside autograd;
their gradients are the library's formulas, computed with the blocked solves (first derivatives only: a
second one through them raises).

:func:`cholesky_ex` and :func:`solve_triangular` choose (:func:`library_device`): on a CPU exactly the
library's calls (LAPACK's own blocked potrf and trsm), elsewhere (CUDA, and ``meta``, where
``benchmarks/gpu_estimate.py`` counts a GPU's work) the blocked forms. Why it should be faster (estimated,
not yet measured on a GPU): docs/gpus.md#blocked-factorizations.
"""

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from gpstudy import numerics


def library_device(tensor: Tensor) -> bool:
    """Whether ``tensor`` is on a CPU, where the library's factorizations and solves (LAPACK) run as they
    are; on any other device this module's blocked forms and ``linalg.inverse_by_products`` run."""
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
    """c - a @ b for three ``[..., r, s]`` of one batch shape: one GEMM that reads c (``baddbmm``), no
    elementwise pass."""
    flat = [each.reshape(-1, *each.shape[-2:]) for each in (c, a, b)]
    return torch.baddbmm(*flat, alpha=-1).reshape(c.shape)


def _solve_left_into(matrix: Tensor, rhs: Tensor, upper: bool, out: Tensor) -> None:
    """Write matrix^-1 rhs into ``out`` ``[..., n, k]``, by halves of the triangular ``matrix`` ``[..., n, n]``:
    the half solved first (the top of a lower matrix, the bottom of an upper one), then the other from the
    right-hand sides less the off-diagonal block times the first's solution."""
    size = matrix.shape[-1]
    if size <= numerics.FACTOR_BLOCK:
        out.copy_(torch.linalg.solve_triangular(matrix, rhs, upper=upper))
        return
    half = size // 2
    first, second = (slice(half, None), slice(None, half)) if upper else (slice(None, half), slice(half, None))
    _solve_left_into(matrix[..., first, first], rhs[..., first, :], upper, out[..., first, :])
    rest = _minus_product(rhs[..., second, :], matrix[..., second, first], out[..., first, :])
    _solve_left_into(matrix[..., second, second], rest, upper, out[..., second, :])


def _solve_left(matrix: Tensor, rhs: Tensor, upper: bool) -> Tensor:
    """matrix^-1 rhs ``[..., n, k]`` (:func:`_solve_left_into` a new tensor of the broadcast batch shape)."""
    batch = torch.broadcast_shapes(matrix.shape[:-2], rhs.shape[:-2])  # both expanded to it: views, no copies
    out = rhs.new_empty((*batch, *rhs.shape[-2:]))
    _solve_left_into(matrix.expand(*batch, -1, -1), rhs.expand(*batch, -1, -1), upper, out)
    return out


class _SolveLeft(torch.autograd.Function):
    """X = A^-1 B by :func:`_solve_left`, its backward ``torch.linalg.solve_triangular``'s formulas:
    dB = A^-T dX (a blocked solve), dA = -dB X^T on A's triangle."""

    @staticmethod
    def forward(ctx, matrix: Tensor, rhs: Tensor, upper: bool) -> Tensor:
        solution = _solve_left(matrix, rhs, upper)
        ctx.upper = upper
        ctx.save_for_backward(matrix, solution)
        return solution

    @staticmethod
    @once_differentiable  # a second derivative raises instead of being wrong
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, Tensor, None]:
        matrix, solution = ctx.saved_tensors
        grad_rhs = _solve_left(matrix.mT, grad, not ctx.upper)
        grad_matrix = None
        if ctx.needs_input_grad[0]:
            product = -(grad_rhs @ solution.mT)
            grad_matrix = product.triu() if ctx.upper else product.tril()
        return grad_matrix, grad_rhs, None  # autograd sums them over broadcast batch dimensions


def blocked_solve_triangular(matrix: Tensor, rhs: Tensor, *, upper: bool, left: bool = True) -> Tensor:
    """``torch.linalg.solve_triangular``'s X (matrix X = rhs with ``left``, X matrix = rhs without) for a
    triangular ``[..., n, n]`` matrix, by halves of the matrix: leaves of at most ``numerics.FACTOR_BLOCK``
    rows by the library, the off-diagonal blocks' updates as products, written in place into one result;
    its gradients by the library's formulas, with blocked solves. Only the triangle ``upper`` names is read.
    A right-side solve is the left-side one of the transposes: X A = B <=> A^T X^T = B^T."""
    if matrix.shape[-1] <= numerics.FACTOR_BLOCK:
        return torch.linalg.solve_triangular(matrix, rhs, upper=upper, left=left)
    if left:
        return _SolveLeft.apply(matrix, rhs, upper)
    return _SolveLeft.apply(matrix.mT, rhs.mT, not upper).mT


def _invert_lower_into(matrix: Tensor, out: Tensor) -> None:
    """Write the inverse of the lower-triangular ``matrix`` ``[B, n, n]`` into ``out`` ``[B, n, n]`` (a view may be
    strided), by halves: inv([L11 0; L21 L22]) = [X11 0; -X22 L21 X11, X22] with X11 = L11^-1, X22 = L22^-1,
    leaves of at most ``numerics.FACTOR_BLOCK`` rows the library's solve of the identity."""
    size = matrix.shape[-1]
    if size <= numerics.FACTOR_BLOCK:
        eye = torch.eye(size, dtype=matrix.dtype, device=matrix.device)
        out.copy_(torch.linalg.solve_triangular(matrix, eye, upper=False))
        return
    half = size // 2
    _invert_lower_into(matrix[:, :half, :half], out[:, :half, :half])
    _invert_lower_into(matrix[:, half:, half:], out[:, half:, half:])
    out[:, :half, half:].zero_()
    inner = torch.bmm(matrix[:, half:, :half], out[:, :half, :half])  # L21 X11
    out[:, half:, :half].baddbmm_(out[:, half:, half:], inner, beta=0, alpha=-1)  # beta 0: its values are not read


def lower_triangular_inverse(matrix: Tensor) -> Tensor:
    """L^-1 ``[..., n, n]`` of a lower-triangular ``[..., n, n]`` L by halves (:func:`_invert_lower_into`): the
    library solves the identity only at leaves of at most ``numerics.FACTOR_BLOCK`` rows, with as many right-hand
    sides as rows: split once, n^3 / 4 of triangular-solve work at two leaves and n^3 / 2 of products, where a
    blocked solve of the whole identity does n^3 / 2 of each. Only the lower triangle is read. A value: it refuses
    an input that would want a gradient."""
    if torch.is_grad_enabled() and matrix.requires_grad:
        raise ValueError("blocked.lower_triangular_inverse computes a value without gradient; call it under no_grad")
    size = matrix.shape[-1]
    inverse = matrix.new_empty(matrix.shape)
    _invert_lower_into(matrix.reshape(-1, size, size), inverse.view(-1, size, size))
    return inverse


def _factor_into(matrix: Tensor, out: Tensor) -> Tensor:
    """Write the lower Cholesky factor of ``matrix`` (its lower triangle) into ``out`` ``[..., n, n]`` by
    halves; return ``info`` ``[...]``: the first failed leaf's, its order counted in the whole matrix."""
    size = matrix.shape[-1]
    if size <= numerics.FACTOR_BLOCK:
        factor, info = torch.linalg.cholesky_ex(matrix)
        out.copy_(factor)
        return info
    half = size // 2
    top_info = _factor_into(matrix[..., :half, :half], out[..., :half, :half])  # L11
    out[..., :half, half:].zero_()
    left = out[..., half:, :half]
    _solve_left_into(out[..., :half, :half], matrix[..., half:, :half].mT, False, left.mT)  # L21^T = L11^-1 A21^T
    bottom_info = _factor_into(_minus_product(matrix[..., half:, half:], left, left.mT), out[..., half:, half:])
    return torch.where(top_info > 0, top_info, torch.where(bottom_info > 0, bottom_info + half, bottom_info))


def _mirrored_lower_of_transposed_product(factor: Tensor, grad: Tensor) -> Tensor:
    """P = Phi(L^T G) made symmetric ``[..., n, n]``, for a lower-triangular L and any G ``[..., n, n]``: the lower
    triangle of L^T G / 2 mirrored onto the upper one (so its diagonal halved, Murray 2016's Phi). The lower
    triangle's blocks L11^T G11 + L21^T G21, L22^T G21 and L22^T G22 by halves, n^3 of products where the full
    L^T G is 2 n^3, each product halved by its alpha (exact: a power of two), then one ``where`` of it and its
    transpose: 3 passes over the matrix, where tril, tril(-1), the sum and the halving made 9. Only G's lower
    triangle enters (as in tril(L^T G) itself: k >= i >= j in L_ki G_kj)."""
    size = factor.shape[-1]
    half = size // 2
    lower, upstream = factor.reshape(-1, size, size), grad.reshape(-1, size, size)
    product = lower.new_empty(lower.shape)  # its upper right block is never read: ``where`` takes its transpose
    top_left, bottom_left = lower[:, :half, :half].mT, lower[:, half:, :half].mT  # L11^T, L21^T
    bottom_right = lower[:, half:, half:].mT  # L22^T
    product[:, :half, :half].baddbmm_(top_left, upstream[:, :half, :half], beta=0, alpha=0.5)
    product[:, :half, :half].baddbmm_(bottom_left, upstream[:, half:, :half], alpha=0.5)
    product[:, half:, :half].baddbmm_(bottom_right, upstream[:, half:, :half], beta=0, alpha=0.5)
    product[:, half:, half:].baddbmm_(bottom_right, upstream[:, half:, half:], beta=0, alpha=0.5)
    lower_triangle = torch.ones(size, size, dtype=torch.bool, device=factor.device).tril_()
    return torch.where(lower_triangle, product, product.mT).view(factor.shape)


class _Cholesky(torch.autograd.Function):
    """(L, info) by :func:`_factor_into`, its backward ``torch.linalg.cholesky``'s formula (Murray 2016):
    dA = L^-T P L^-1 with P = Phi(L^T dL) made symmetric (blocked solves), a symmetric gradient."""

    @staticmethod
    def forward(ctx, matrix: Tensor) -> tuple[Tensor, Tensor]:
        factor = matrix.new_empty(matrix.shape)
        info = _factor_into(matrix, factor)
        ctx.save_for_backward(factor)
        ctx.mark_non_differentiable(info)
        return factor, info

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor, grad_info: None) -> Tensor:
        (factor,) = ctx.saved_tensors
        inner = _mirrored_lower_of_transposed_product(factor, grad)  # P, half a full product's work
        left = _solve_left(factor.mT, inner, upper=True)  # L^-T P
        return _solve_left(factor.mT, left.mT, upper=True).mT  # (L^-T P) L^-1


def blocked_cholesky_ex(matrix: Tensor) -> tuple[Tensor, Tensor]:
    """``torch.linalg.cholesky_ex`` by halves: L11 = chol(A11), L21 = A21 L11^-T (a blocked solve),
    L22 = chol(A22 - L21 L21^T), leaves of at most ``numerics.FACTOR_BLOCK`` rows by the library, written in
    place into one factor; its gradient the library's (symmetric), by blocked solves.

    Reads the lower triangle of the symmetric ``[..., n, n]`` matrix, as the library does. ``info`` ``[...]``
    is 0 where every leaf factored, else the order of the first leading minor a leaf found not
    positive-definite, counted in the whole matrix, so that the deferred checks and retries of
    ``linalg.cholesky`` read it as they read the library's. A NaN entry of the lower triangle reaches a later
    pivot; whether a leaf reports a NaN pivot is the library's affair (LAPACK does, cuSOLVER may not:
    ``linalg.factor.cholesky`` checks the diagonal off a CPU). A failed matrix's factor is undefined (NaN or
    infinite entries, where the library's is partial); the others' are unaffected."""
    if matrix.shape[-1] <= numerics.FACTOR_BLOCK:
        return torch.linalg.cholesky_ex(matrix)
    return _Cholesky.apply(matrix)
