"""Gaussian maths, written once: Cholesky with jitter, densities, KL, conditioning, GPNet's target.

Every function takes full covariances (or their lower Cholesky factors) with optional leading batch
dimensions: means are ``[..., n]``, covariances and factors ``[..., n, n]``. The module also holds the
two parameterizations every model uses for positive quantities and Cholesky factors, so that no
module writes its own softplus.

References: Shi, Sun and Zhu (2019), "Scalable Training of Inference Networks for Gaussian-Process
Models", eq. 7-11 (numbered 7, 12-28 in ``papers/gpnet-full-with-appendix.txt``).
"""

import logging
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from gpstudy import blocked, numerics
from gpstudy.host_sync import deliberate

logger = logging.getLogger(__name__)


class CholeskyError(RuntimeError):
    """A matrix stayed non-positive-definite after every jitter escalation."""


def positive(raw: Tensor) -> Tensor:
    """Map an unconstrained parameter to a positive value: softplus(raw) + POSITIVE_FLOOR."""
    return F.softplus(raw) + numerics.POSITIVE_FLOOR


SOFTPLUS_BETA, SOFTPLUS_THRESHOLD = 1.0, 20.0  # F.softplus's defaults, with which ``positive`` calls it


def inverse_positive(value: Tensor) -> Tensor:
    """The unconstrained parameter whose ``positive`` is ``value`` (value > POSITIVE_FLOOR)."""
    shifted = value - numerics.POSITIVE_FLOOR
    return shifted + torch.log(-torch.expm1(-shifted))  # log(exp(v) - 1), stable for large v


def scale_tril(raw: Tensor) -> Tensor:
    """A lower Cholesky factor from a raw square matrix: strict lower triangle kept, diagonal positive.

    Under torch.compile the expression of tril, diag_embed and their sum, which inductor fuses into one kernel
    itself (and whose compiled numbers ``configs/paper-cpu.yaml``'s regeneration has: the Function, equal in
    eager, moves them by rounding); elsewhere :class:`_ScaleTril`, the same numbers in fewer passes.

    Args:
        raw: ``[..., n, n]``; its upper triangle is ignored.
    """
    if torch.compiler.is_compiling():
        return torch.tril(raw, diagonal=-1) + torch.diag_embed(positive(raw.diagonal(dim1=-2, dim2=-1)))
    return _ScaleTril.apply(raw)


class _ScaleTril(torch.autograd.Function):
    """tril(raw, -1) + diag_embed(positive(diag raw)) as the strict lower triangle copied and its diagonal
    then written (2 passes over ``[..., n, n]`` instead of the 6 of tril, diag_embed and their sum), and its
    gradient likewise (2 instead of 6: tril, the diagonal's embedding and the sum of the two); every element
    by the same floating-point operations as autograd's (x + 0 is x), its diagonal's gradient by
    ``softplus_backward``, autograd's formula for ``F.softplus`` (issue 39, item 4)."""

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
        grad_raw.diagonal(dim1=-2, dim2=-1).copy_(torch.ops.aten.softplus_backward(
            grad.diagonal(dim1=-2, dim2=-1), raw.diagonal(dim1=-2, dim2=-1), SOFTPLUS_BETA, SOFTPLUS_THRESHOLD))
        return grad_raw


def raw_of_scale_tril(chol: Tensor) -> Tensor:
    """The raw matrix ``[..., n, n]`` whose ``scale_tril`` is the lower Cholesky factor ``chol`` (its
    diagonal above the positivity floor)."""
    return torch.tril(chol, diagonal=-1) + torch.diag_embed(inverse_positive(chol.diagonal(dim1=-2, dim2=-1)))


def raw_scale_tril(diagonal: float, size: int, like: Tensor, batch_shape: tuple[int, ...] = ()) -> Tensor:
    """The raw matrices ``[*batch_shape, size, size]`` whose ``scale_tril`` is ``diagonal * I``."""
    value = torch.full((*batch_shape, size), diagonal, dtype=like.dtype, device=like.device)
    return torch.diag_embed(inverse_positive(value))


HALVES_FROM = 128  # rows of F from which F F^T is computed by row halves; below it one product launches less


def _symmetric_product(factor: Tensor, upper_triangular: bool = False, alpha: float = 1.0) -> Tensor:
    """F F^T, symmetric: from the blocks of two row halves, the off-diagonal block once (3/4 of a full
    product; its diagonal blocks symmetric as BLAS makes them), or for fewer than ``HALVES_FROM`` rows
    exactly, from one product's lower triangle.

    With ``upper_triangular`` (a square upper-triangular F = [[F11, F12], [0, F22]]) the bottom half's
    zeros enter no product: [F11 F12][F11 F12]^T, F22 F12^T and F22 F22^T, n^3 in all (half a full product).
    ``alpha`` scales the result (alpha F F^T), by the GEMMs.
    """
    if factor.shape[-2] < HALVES_FROM:
        product = factor @ factor.mT if alpha == 1.0 else alpha * (factor @ factor.mT)
        return product.tril() + product.tril(-1).mT
    rows = factor.shape[-2]
    product = factor.new_empty((*factor.shape[:-1], rows))  # returned itself, not a view (``add_jitter_``'s)
    _symmetric_product_into(factor.reshape(-1, rows, factor.shape[-1]), product.view(-1, rows, rows), upper_triangular,
                            alpha)
    return product


def _symmetric_product_into(factor: Tensor, out: Tensor, upper_triangular: bool = False, alpha: float = 1.0) -> None:
    """Write ``_symmetric_product``'s alpha F F^T by row halves into ``out`` ``[B, n, n]`` (a view may be strided)
    for F ``[B, n, r]``: the GEMMs write into its blocks (alpha applied by them)."""
    half = factor.shape[-2] // 2
    top = factor[:, :half, :]
    if upper_triangular:  # the bottom rows and their product with the top: columns half: only
        bottom, top_right = factor[:, half:, half:], top[..., half:]
    else:
        bottom, top_right = factor[:, half:, :], top
    lower_left = out[:, half:, :half]
    lower_left.baddbmm_(bottom, top_right.mT, beta=0, alpha=alpha)  # beta 0: uninitialized values are not read
    out[:, :half, :half].baddbmm_(top, top.mT, beta=0, alpha=alpha)
    out[:, half:, half:].baddbmm_(bottom, bottom.mT, beta=0, alpha=alpha)
    out[:, :half, half:].copy_(lower_left.mT)  # the one pass: a quarter read and written (cat's: 2 of the whole)


@torch.no_grad()
def stacked_gram(head: Tensor, tail: Tensor, tail_block: Tensor) -> Tensor:
    """[H; T] [H; T]^T ``[..., h + t, h + t]`` for the rows of H ``[..., h, r]`` stacked on those of T
    ``[..., t, r]``, with the bottom-right block ``tail_block`` ``[..., t, t]`` (T T^T, made by the caller
    already) copied in instead of computed again: H H^T as ``_symmetric_product`` into its block, T H^T one
    product into its block, mirrored above. No concatenation of H and T, and 3/8 of the stacked Gram's
    products at h = t (issue 39: GPNet's q_t over [X_B; X_M], whose X_M block its loss has formed). A value,
    no gradient.
    """
    h, t, r = head.shape[-2], tail.shape[-2], head.shape[-1]
    joint = head.new_empty((*head.shape[:-2], h + t, h + t))
    blocks = joint.view(-1, h + t, h + t)
    heads = head.reshape(-1, h, r)
    if h < HALVES_FROM:
        blocks[:, :h, :h].copy_(_symmetric_product(heads))
    else:
        _symmetric_product_into(heads, blocks[:, :h, :h])
    lower_left = blocks[:, h:, :h]
    lower_left.baddbmm_(tail.reshape(-1, t, r), heads.mT, beta=0)
    blocks[:, :h, h:].copy_(lower_left.mT)
    blocks[:, h:, h:].copy_(tail_block.reshape(-1, t, t))
    return joint


class _Gram(torch.autograd.Function):
    """F F^T computed as ``_symmetric_product``, with a backward of one product, (G + G^T) F,
    instead of autograd's two."""

    @staticmethod
    def forward(ctx, factor: Tensor) -> Tensor:
        ctx.save_for_backward(factor)
        return _symmetric_product(factor)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (factor,) = ctx.saved_tensors
        return (grad + grad.mT) @ factor


def gram(factor: Tensor) -> Tensor:
    """``factor @ factor.mT`` ``[..., n, n]`` for a ``[..., n, r]`` factor, exactly symmetric, with a
    cheaper forward and backward than autograd's."""
    return _Gram.apply(factor)


def add_diagonal(matrix: Tensor, value: Tensor | float) -> Tensor:
    """``matrix + value * I`` for ``[..., n, n]`` matrices and a scalar or batched ``value`` ``[...]``."""
    result = matrix.clone()  # one pass over the matrix; only the diagonal is then touched
    diagonal = result.diagonal(dim1=-2, dim2=-1)
    if isinstance(value, Tensor):
        diagonal.add_(value.unsqueeze(-1))
    else:  # a Python number enters the kernel as an argument: no tensor of it, no copy to the device
        diagonal.add_(value)
    return result


def add_jitter(matrix: Tensor) -> Tensor:
    """``matrix + JITTER * I``: what every kernel and network covariance carries."""
    return add_diagonal(matrix, numerics.JITTER)


class _AddToDiagonal(torch.autograd.Function):
    """``matrix += value * I`` in place, its gradient the incoming one: no pass over the matrix either way
    (``add_diagonal``'s clone, and autograd's copy of the gradient for an in-place write into a view of a tensor
    that needs a gradient, are one each, issue 39, item 4); the same additions as ``add_diagonal``. The gradient
    leaves in the matrix's layout, as autograd's copy left it (a reduction over it, as a kernel's variance's
    gradient, sums in that order): copied only where it arrives in another."""

    @staticmethod
    def forward(ctx, matrix: Tensor, value: float) -> Tensor:
        matrix.diagonal(dim1=-2, dim2=-1).add_(value)
        ctx.mark_dirty(matrix)
        ctx.strides = matrix.stride()
        return matrix

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        if grad.stride() == ctx.strides:
            return grad, None
        return grad.new_empty_strided(grad.shape, ctx.strides).copy_(grad), None


def add_jitter_(matrix: Tensor) -> Tensor:
    """``add_jitter`` written into ``matrix`` ``[..., n, n]`` itself, and returned: only for a matrix its caller
    has just made and no one else holds (a kernel's or a Gram's result; autograd refuses one it saved for a
    backward pass at that pass, and a leaf that needs a gradient at once). Under torch.compile ``add_jitter``
    itself, which inductor fuses: the Function, which marks its input dirty, breaks the graph and recompiles
    where grad mode changes (a prediction under ``no_grad``)."""
    if torch.compiler.is_compiling():
        return add_jitter(matrix)
    return _AddToDiagonal.apply(matrix, numerics.JITTER)


class FactorChecks:
    """The ``info`` of every factorization made inside :func:`deferred_factor_checks`, looked at once."""

    def __init__(self):
        self.infos: list[Tensor] = []

    def any_failed(self, lost: Tensor | None = None) -> bool:
        """Whether any factorization failed: a host read (a deliberate synchronisation). On the ``meta``
        device, which has no values, nothing is read and nothing failed.

        Args:
            lost: which splits of a batch ``[S]`` are already lost (no retry can save their factors): their
                failures are left out, unless every split is lost; a factorization without the leading split
                dimension counts whole. None: every failure counts.
        """
        if not self.infos or self.infos[0].device.type == "meta":
            return False
        failed = [info != 0 for info in self.infos]
        if lost is not None:
            kept = ~lost | lost.all()
            failed = [each & kept.reshape(-1, *[1] * (each.dim() - 1)) if each.shape[:1] == lost.shape else each
                      for each in failed]
        with deliberate():
            return bool(torch.cat([each.reshape(-1) for each in failed]).any())


_deferred: list[FactorChecks] = []  # the innermost active ``deferred_factor_checks``, if any


@contextmanager
def deferred_factor_checks() -> Iterator[FactorChecks]:
    """Inside, :func:`cholesky` returns its factor without looking at it on the host and records its
    ``info``; the caller looks once (``any_failed``) and, if anything failed, runs the work again outside,
    where the failed matrices take the jitter path. So a training step synchronises once, not per factor."""
    checks = FactorChecks()
    _deferred.append(checks)
    try:
        yield checks
    finally:
        _deferred.pop()


def active_factor_checks() -> FactorChecks | None:
    """The innermost active :func:`deferred_factor_checks`' record, or None where :func:`cholesky` checks at
    once: for a factor kept across calls, whose check must be recorded again wherever it is reused."""
    return _deferred[-1] if _deferred else None


def cholesky(matrix: Tensor) -> Tensor:
    """Lower Cholesky factor, retrying the failed matrices of a batch with growing jitter.

    The jitter of each matrix grows on its own (JITTER, 10 JITTER, ..., ``numerics.CHOLESKY_MAX_TRIES``
    tries), so one split's trouble never changes another split's numbers; the check costs one device
    sync per call, not per matrix. A matrix that no jitter saves, or that holds NaN (a split already
    lost), gets a NaN factor: its split becomes a failed run while the others go on. When every
    matrix of the call fails, ``CholeskyError`` names the size and the last jitter tried.

    Inside :func:`deferred_factor_checks` the factor is returned unchecked and its ``info`` recorded for
    the caller's one check (a failed matrix's factor is LAPACK's partial one, which a later operator may
    refuse with ``torch.linalg.LinAlgError``: ``gpstudy.optim.optimizer_step`` then reruns the step checked).

    Args:
        matrix: symmetric ``[..., n, n]``.
    """
    factor, info = blocked.cholesky_ex(matrix)
    if _deferred:
        _deferred[-1].infos.append(info)
        return factor
    if not info.any():
        return factor
    size, tried = matrix.shape[-1], 0.0
    with torch.no_grad():  # find each failed matrix's jitter, then factorize once with gradients
        lost = ~torch.isfinite(matrix).flatten(-2).all(-1)  # nothing to retry
        retry = (info > 0) & ~lost
        jitter = torch.zeros(info.shape, dtype=matrix.dtype, device=matrix.device)
        for attempt in range(numerics.CHOLESKY_MAX_TRIES):
            if not retry.any():
                break
            tried = numerics.JITTER * 10.0**attempt
            logger.warning("Cholesky of %d of %d matrices (%d x %d) failed; retrying them with jitter %.1e",
                           int(retry.sum()), retry.numel(), size, size, tried)
            jitter = torch.where(retry, tried, jitter)
            retry = (blocked.cholesky_ex(add_diagonal(matrix.detach(), jitter))[1] > 0) & ~lost
        failed = retry | lost
    if failed.all():
        reason = f"even with jitter {tried:.1e}" if tried else "(non-finite entries)"
        raise CholeskyError(f"Cholesky of a {size} x {size} matrix failed {reason}")
    eye = torch.eye(size, dtype=matrix.dtype, device=matrix.device)
    stand_in = torch.where(failed[..., None, None], eye, add_diagonal(matrix, jitter))  # finite gradients
    factor = blocked.cholesky_ex(stand_in)[0]
    return torch.where(failed[..., None, None], torch.nan, factor)


def jittered_scale_tril(matrix: Tensor) -> Tensor:
    """L with L L^T = matrix + jitter ``[..., m, m]`` (``cholesky`` of ``add_jitter``)."""
    return cholesky(add_jitter(matrix))


def kernel_scale_tril(kernel: Callable[[Tensor], Tensor], inputs: Tensor) -> Tensor:
    """L with L L^T = K(inputs) + jitter ``[..., m, m]``: the factor of the prior over inducing values u = f(inputs)."""
    return cholesky(add_jitter_(kernel(inputs)))


def _half_log_det(chol: Tensor) -> Tensor:
    """0.5 log|L L^T| = sum log diag(L), shape ``[...]``."""
    return chol.diagonal(dim1=-2, dim2=-1).log().sum(-1)


def solve_lower(chol: Tensor, rhs: Tensor) -> Tensor:
    """L^-1 rhs for a lower-triangular ``[..., n, n]`` L and ``[..., n, k]`` rhs."""
    return blocked.solve_triangular(chol, rhs, upper=False)


def inverse_from_scale_tril(chol: Tensor) -> Tensor:
    """(L L^T)^-1 ``[..., n, n]`` for a lower-triangular ``[..., n, n]`` L: on a CPU LAPACK's potri
    (``torch.cholesky_inverse``, 2 n^3 / 3); on any other device :func:`inverse_by_products` (on CUDA
    ``cholesky_inverse`` is a potrs of the identity, 2 n^3 at factorization rate; ``meta`` is where
    ``benchmarks/gpu_estimate.py`` counts a GPU's work)."""
    if blocked.library_device(chol):
        return torch.cholesky_inverse(chol)
    return inverse_by_products(chol)


def inverse_by_products(chol: Tensor) -> Tensor:
    """(L L^T)^-1 = L^-T L^-1 ``[..., n, n]``, symmetric as ``_symmetric_product`` makes it, for a
    lower-triangular ``[..., n, n]`` L: one triangular solve of the identity (n^3) and the Gram product of
    the upper-triangular L^-T by halves (n^3, ``_symmetric_product``), triangular-solve and matrix-product
    work that a GPU runs at a higher rate than a batched potrs."""
    eye = torch.eye(chol.shape[-1], dtype=chol.dtype, device=chol.device)
    return _symmetric_product(solve_lower(chol, eye).mT, upper_triangular=True)


def _trace_and_mahalanobis(mean_q: Tensor, chol_q: Tensor, mean_p: Tensor, chol_p: Tensor) -> Tensor:
    """tr(S_p^-1 S_q) + (m_p - m_q)^T S_p^-1 (m_p - m_q), shape ``[...]``."""
    whitened_scale = solve_lower(chol_p, chol_q)  # L_p^-1 L_q
    whitened_mean = solve_lower(chol_p, (mean_q - mean_p).unsqueeze(-1))  # L_p^-1 (m_q - m_p)
    return whitened_scale.square().sum((-2, -1)) + whitened_mean.square().sum((-2, -1))


def log_density(value: Tensor, mean: Tensor, chol: Tensor) -> Tensor:
    """log N(value | mean, L L^T), shape ``[...]``."""
    whitened = solve_lower(chol, (value - mean).unsqueeze(-1))
    size = value.shape[-1]
    return -0.5 * (size * math.log(2 * math.pi) + whitened.square().sum((-2, -1))) - _half_log_det(chol)


def entropy(chol: Tensor) -> Tensor:
    """H[N(m, L L^T)] = 0.5 n log(2 pi e) + 0.5 log|L L^T|, shape ``[...]``."""
    size = chol.shape[-1]
    return 0.5 * size * (1.0 + math.log(2 * math.pi)) + _half_log_det(chol)


def cross_entropy(mean_q: Tensor, chol_q: Tensor, mean_p: Tensor, chol_p: Tensor) -> Tensor:
    """-E_q[log p] for q = N(mean_q, L_q L_q^T) and p = N(mean_p, L_p L_p^T), shape ``[...]``."""
    size = mean_q.shape[-1]
    quadratic = _trace_and_mahalanobis(mean_q, chol_q, mean_p, chol_p)
    return 0.5 * (size * math.log(2 * math.pi) + quadratic) + _half_log_det(chol_p)


def kl_to_standard_normal(mean: Tensor, chol: Tensor) -> Tensor:
    """KL[N(mean, L L^T) || N(0, I)] = 0.5 (|L|_F^2 + |mean|^2 - n) - sum log diag L, shape ``[...]``."""
    size = mean.shape[-1]
    return 0.5 * (chol.square().sum((-2, -1)) + mean.square().sum(-1) - size) - _half_log_det(chol)


def kl_divergence(mean_q: Tensor, chol_q: Tensor, mean_p: Tensor, chol_p: Tensor) -> Tensor:
    """KL[q || p] for q = N(mean_q, L_q L_q^T) and p = N(mean_p, L_p L_p^T), shape ``[...]``."""
    size = mean_q.shape[-1]
    quadratic = _trace_and_mahalanobis(mean_q, chol_q, mean_p, chol_p)
    return 0.5 * (quadratic - size) + _half_log_det(chol_p) - _half_log_det(chol_q)


class _CovarianceKL(torch.autograd.Function):
    """KL[N(m_q, S_q) || N(m_p, S_p)] from full covariances, with closed-form gradients:
    dS_q = (S_p^-1 - S_q^-1) / 2, dm_q = -dm_p = S_p^-1 d and
    dS_p = (S_p^-1 - S_p^-1 (S_q + d d^T) S_p^-1) / 2, with d = m_q - m_p.

    dS_q is a difference of two inverses: where S_q needs a gradient both are formed
    (``inverse_from_scale_tril``: potri on a CPU, a triangular solve and a Gram product on a GPU), and the forward's
    trace is then the elementwise sum of S_p^-1 * S_q. Otherwise
    nothing is inverted: the value comes from A = L_p^-1 L_q and w = L_p^-1 d (triangular solves), and
    dS_p = L_p^-T (I - A A^T - w w^T) L_p^-1 / 2 from two more (5.2 n^3 in all instead of 6.7 n^3).
    """

    @staticmethod
    def forward(ctx, mean_q: Tensor, cov_q: Tensor, mean_p: Tensor, cov_p: Tensor) -> Tensor:
        chol_q, chol_p = cholesky(cov_q), cholesky(cov_p)
        difference = (mean_q - mean_p).unsqueeze(-1)  # d, [..., n, 1]
        if ctx.needs_input_grad[1]:  # dS_q needs S_p^-1 itself
            precision_p, whitened_scale, whitened_mean = inverse_from_scale_tril(chol_p), None, None
            trace = (precision_p * cov_q).sum((-2, -1))
            alpha = precision_p @ difference  # S_p^-1 d
        else:
            precision_p = None
            whitened_scale = solve_lower(chol_p, chol_q)  # A = L_p^-1 L_q
            whitened_mean = solve_lower(chol_p, difference)  # w = L_p^-1 d
            trace = whitened_scale.square().sum((-2, -1))
            alpha = blocked.solve_triangular(chol_p.mT, whitened_mean, upper=True)  # L_p^-T w = S_p^-1 d
        quadratic = trace + (difference * alpha).sum((-2, -1))
        ctx.save_for_backward(chol_q, chol_p, precision_p, whitened_scale, whitened_mean, alpha)
        return 0.5 * (quadratic - mean_q.shape[-1]) + _half_log_det(chol_p) - _half_log_det(chol_q)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, ...]:
        chol_q, chol_p, precision_p, whitened_scale, whitened_mean, alpha = ctx.saved_tensors
        scale = 0.5 * grad[..., None, None]
        grad_mean = grad.unsqueeze(-1) * alpha.squeeze(-1)
        grad_cov_q = grad_cov_p = None
        if ctx.needs_input_grad[1]:
            grad_cov_q = scale * (precision_p - inverse_from_scale_tril(chol_q))
        if ctx.needs_input_grad[3] and precision_p is not None:  # S_p^-1 S_q S_p^-1 = (S_p^-1 L_q)(S_p^-1 L_q)^T
            spread = _symmetric_product(precision_p @ chol_q) + alpha @ alpha.mT
            grad_cov_p = scale * (precision_p - spread)
        elif ctx.needs_input_grad[3]:  # L_p^-T (I - A A^T - w w^T) L_p^-1
            inner = add_diagonal(-_symmetric_product(whitened_scale) - whitened_mean @ whitened_mean.mT, 1.0)
            left = blocked.solve_triangular(chol_p.mT, inner, upper=True)  # L_p^-T (...)
            grad_cov_p = scale * blocked.solve_triangular(chol_p, left, upper=False, left=False)
        return grad_mean, grad_cov_q, -grad_mean, grad_cov_p


def kl_divergence_of_covariances(mean_q: Tensor, cov_q: Tensor, mean_p: Tensor, cov_p: Tensor) -> Tensor:
    """KL[N(mean_q, cov_q) || N(mean_p, cov_p)] ``[...]`` from full covariances (``cholesky`` of each).

    Its backward is closed form instead of differentiating two Cholesky factors and a triangular
    solve: about half the work of the autograd path (FBNN's whole objective). An inverse is formed
    only where the gradient is one (``cov_q``'s: S_p^-1 - S_q^-1); see ``_CovarianceKL``.
    """
    return _CovarianceKL.apply(mean_q, cov_q, mean_p, cov_p)


def condition(
    mean_a: Tensor,
    mean_b: Tensor,
    cov_aa: Tensor,
    cov_ab: Tensor,
    cov_bb: Tensor,
    value_b: Tensor,
    *,
    diag: bool = False,
) -> tuple[Tensor, Tensor]:
    """p(a | b = value_b) for jointly Gaussian [a; b] (Rasmussen & Williams, eq. A.6).

    Args:
        mean_a: ``[..., a]``.
        mean_b: ``[..., b]``.
        cov_aa: ``[..., a, a]``, or its diagonal ``[..., a]`` when ``diag``.
        cov_ab: ``[..., a, b]``.
        cov_bb: ``[..., b, b]``, observation noise included.
        value_b: ``[..., b]``.
        diag: return only the marginal variances of a.

    Returns:
        The conditional mean ``[..., a]`` and covariance ``[..., a, a]`` (or variances ``[..., a]``).
    """
    chol_bb = cholesky(cov_bb)
    projection = solve_lower(chol_bb, cov_ab.mT)  # L_bb^-1 S_ba, [..., b, a]
    residual = solve_lower(chol_bb, (value_b - mean_b).unsqueeze(-1))  # L_bb^-1 (y - m_b)
    mean = mean_a + (projection.mT @ residual).squeeze(-1)
    if diag:
        return mean, cov_aa - projection.square().sum(-2)
    return mean, cov_aa - projection.mT @ projection


def tempered_prior(
    prior_cov: Tensor, previous_mean: Tensor, previous_cov: Tensor, beta: float
) -> tuple[Tensor, Tensor]:
    """GPNet's tempered prior p(f)^beta q_t(f)^(1-beta) = N(m~, K~) at a finite set of inputs (eq. 8-9).

    K~ = [(1-beta) Sigma^-1 + beta K^-1]^-1 = K B^-1 Sigma and m~ = (1-beta) K~ Sigma^-1 mu = (1-beta) K B^-1 mu
    with the mixture B = beta Sigma + (1-beta) K = L_B L_B^T: one Cholesky factor, no inverse of K or Sigma.
    Below ``HALVES_FROM`` points K B^-1 [Sigma mu] = (L_B^-1 K)^T (L_B^-1 [Sigma mu]), two triangular solves and
    a product, K~ symmetrized. From ``HALVES_FROM`` points (issue 39) K~ is a Gram:
    K B^-1 Sigma = (A - a A B^-1 A) / (1 - a) with A = Sigma, a = beta (as (1-beta) K = B - beta Sigma) for
    beta <= 1/2, else A = K, a = 1 - beta; A B^-1 A = (L_B^-1 A)^T (L_B^-1 A) by row halves (3/4 of a product),
    one triangular solve of A, and m~ = mu - beta (L_B^-1 A)^T (L_B^-1 mu), or (1-beta) (...) with A = K. Each
    side keeps a <= 1/2 (1 - a >= 1/2; a A B^-1 A <= A as B >= a A): the difference loses about
    a |A| / ((1 - a) |K~|) roundings, few where Sigma and K are of one scale, as GPNet's are (against a
    40-digit reference on a GPNet state of 150 points, K~ within 3e-16 of its scale at the study's beta,
    the product form within 1.4e-15; ``tests/test_gaussian.py`` bounds the loss where they are not). The
    non-conjugate objective (section 3.2) uses it directly; ``tempered_target`` conditions it on the batch.

    Args:
        prior_cov: K, the prior covariance ``[..., z, z]`` (jitter included).
        previous_mean: mu, the previous network's mean ``[..., z]``.
        previous_cov: Sigma, the previous network's covariance ``[..., z, z]`` (jitter included).
        beta: the step size beta_t in (0, 1].

    Returns:
        m~ ``[..., z]`` and K~ ``[..., z, z]``.
    """
    chol_mixture = cholesky(beta * previous_cov + (1 - beta) * prior_cov)  # L_B L_B^T = B
    if prior_cov.shape[-1] < HALVES_FROM:  # the form configs/paper-cpu.yaml's Snelson numbers were made with
        whitened_prior = solve_lower(chol_mixture, prior_cov)  # L_B^-1 K
        whitened = solve_lower(chol_mixture, torch.cat([previous_cov, previous_mean.unsqueeze(-1)], dim=-1))
        product = whitened_prior.mT @ whitened  # K B^-1 [S mu] = (L_B^-1 K)^T (L_B^-1 [S mu])
        cov = product[..., :-1]
        return (1 - beta) * product[..., -1], 0.5 * (cov + cov.mT)
    by_previous = beta <= 0.5
    side, weight = (previous_cov, beta) if by_previous else (prior_cov, 1 - beta)  # A, a
    whitened = solve_lower(chol_mixture, side)  # L_B^-1 A
    whitened_mean = solve_lower(chol_mixture, previous_mean.unsqueeze(-1))  # L_B^-1 mu
    cov = _symmetric_product(whitened.mT, alpha=-weight / (1 - weight))  # -a A B^-1 A / (1 - a)
    cov.add_(side, alpha=1 / (1 - weight))  # (A - a A B^-1 A) / (1 - a)
    projected = (whitened.mT @ whitened_mean).squeeze(-1)  # A B^-1 mu
    mean = previous_mean - beta * projected if by_previous else (1 - beta) * projected
    return mean, cov


def tempered_target(
    prior_cov: Tensor,
    previous_mean: Tensor,
    previous_cov: Tensor,
    y_batch: Tensor,
    noise_variance: Tensor | float,
    beta: float,
    n_train: int,
) -> tuple[Tensor, Tensor]:
    """GPNet's target q^_{t+1}(f_M) for a Gaussian likelihood (eq. 10), the marginal at X_M.

    The tempered prior (eq. 8-9) over Z = [X_B; X_M] is conditioned on y_B observed with noise
    variance sigma^2 n / (N beta): the batch likelihood raised to the power N beta / n.

    Args:
        prior_cov: K over Z ``[..., n + m, n + m]``, batch points first.
        previous_mean: mu over Z ``[..., n + m]``.
        previous_cov: Sigma over Z ``[..., n + m, n + m]``.
        y_batch: ``[..., n]``.
        noise_variance: sigma^2 of the Gaussian likelihood.
        beta: the step size beta_t in (0, 1].
        n_train: N, the training-set size.

    Returns:
        The target mean ``[..., m]`` and covariance ``[..., m, m]`` at the measurement points.
    """
    mean, cov = tempered_prior(prior_cov, previous_mean, previous_cov, beta)
    n = y_batch.shape[-1]
    batch_noise = noise_variance * n / (n_train * beta)  # eq. 10: p(y_B | f_B)^(N beta / n)
    return condition(
        mean[..., n:],
        mean[..., :n],
        cov[..., n:, n:],
        cov[..., n:, :n],
        add_diagonal(cov[..., :n, :n], batch_noise),
        y_batch,
    )
