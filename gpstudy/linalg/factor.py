"""Cholesky factors with jitter and one deferred check per training step, and the solves and inverses a
factor gives.

A failed factorization is retried matrix by matrix with growing jitter (``numerics.CHOLESKY_MAX_TRIES``),
so one split's trouble never changes another split's numbers; inside :func:`deferred_factor_checks` a
training step looks at every factor's ``info`` once, on the host, instead of once per factor.
"""

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

from gpstudy import numerics
from gpstudy.linalg import blocked
from gpstudy.linalg.products import symmetric_product
from gpstudy.runtime.host_sync import deliberate

logger = logging.getLogger(__name__)


class CholeskyError(RuntimeError):
    """A matrix stayed non-positive-definite after every jitter escalation."""


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
    """``matrix += value * I`` in place, its gradient the incoming one: no pass over the matrix either way (no
    clone forward, no copy of the gradient backward); the same additions as ``add_diagonal``. The gradient
    leaves in the matrix's layout, as autograd's copy would leave it (a reduction over it, as a kernel's
    variance's gradient, sums in that order): copied only where it arrives in another. Why it is fast:
    docs/gpus.md#memory-passes-second-round."""

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
    itself, which inductor fuses (the Function, which marks its input dirty, would break the graph and
    recompile where grad mode changes, as in a prediction under ``no_grad``)."""
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
            failed = [
                each & kept.reshape(-1, *[1] * (each.dim() - 1)) if each.shape[:1] == lost.shape else each
                for each in failed
            ]
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


def _cholesky_ex(matrix: Tensor) -> tuple[Tensor, Tensor]:
    """``blocked.cholesky_ex`` with LAPACK's ``info`` ``[...]`` on every device: the order of the first leading
    minor whose pivot is not positive or is NaN (LAPACK's potrf tests ``ajj <= 0 or isnan(ajj)``). Off a CPU the
    leaves' library (cuSOLVER's potrf tests ``ajj <= 0`` alone) runs on through a NaN pivot with ``info`` 0, and
    makes every pivot after it NaN; so there, where the library reported no failure, the first NaN on the
    factor's diagonal is one (read on the device: no host sync). Where it reported one, its ``info`` stands: no
    NaN pivot comes before it, and the factor after it is undefined. A NaN entry below the diagonal makes its
    row's pivot NaN, as LAPACK finds it; a +inf pivot is no failure, as in LAPACK's dpotrf."""
    factor, info = blocked.cholesky_ex(matrix)
    if blocked.library_device(matrix):  # LAPACK has reported a NaN pivot itself
        return factor, info
    found, first = factor.diagonal(dim1=-2, dim2=-1).isnan().max(-1)  # the first NaN pivot, where any is
    return factor, torch.where(found & (info == 0), first + 1, info)  # int64: no cast to int32, a launch more


def cholesky(matrix: Tensor) -> Tensor:
    """Lower Cholesky factor, retrying the failed matrices of a batch with growing jitter.

    The jitter of each matrix grows on its own (JITTER, 10 JITTER, ..., ``numerics.CHOLESKY_MAX_TRIES``
    tries), so one split's trouble never changes another split's numbers; the check costs one device
    sync per call, not per matrix. A matrix that no jitter saves, or that holds NaN (a split already
    lost), gets a NaN factor: its split becomes a failed run while the others go on. When every
    matrix of the call fails, ``CholeskyError`` names the size and the last jitter tried.

    Inside :func:`deferred_factor_checks` the factor is returned unchecked and its ``info`` recorded for
    the caller's one check (a failed matrix's factor is LAPACK's partial one, which a later operator may
    refuse with ``torch.linalg.LinAlgError``: ``gpstudy.training.optim.optimizer_step`` then reruns the step checked).

    Args:
        matrix: symmetric ``[..., n, n]``.
    """
    factor, info = _cholesky_ex(matrix)
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
            logger.warning(
                "Cholesky of %d of %d matrices (%d x %d) failed; retrying them with jitter %.1e",
                int(retry.sum()),
                retry.numel(),
                size,
                size,
                tried,
            )
            jitter = torch.where(retry, tried, jitter)
            retry = (_cholesky_ex(add_diagonal(matrix.detach(), jitter))[1] > 0) & ~lost
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


def solve_lower(chol: Tensor, rhs: Tensor) -> Tensor:
    """L^-1 rhs for a lower-triangular ``[..., n, n]`` L and ``[..., n, k]`` rhs."""
    return blocked.solve_triangular(chol, rhs, upper=False)


def inverse_from_scale_tril(chol: Tensor) -> Tensor:
    """(L L^T)^-1 ``[..., n, n]`` for a lower-triangular ``[..., n, n]`` L: on a CPU LAPACK's potri
    (``torch.cholesky_inverse``, 2 n^3 / 3); on any other device :func:`inverse_by_products` (on CUDA
    ``cholesky_inverse`` is a potrs of the identity, 2 n^3 at factorization rate; ``meta`` is where
    ``benchmarks/gpu_estimate.py`` counts a GPU's work). Why: docs/speed.md#inverses-and-solves-as-products."""
    if blocked.library_device(chol):
        return torch.cholesky_inverse(chol)
    return inverse_by_products(chol)


def inverse_by_products(chol: Tensor) -> Tensor:
    """(L L^T)^-1 = L^-T L^-1 ``[..., n, n]``, symmetric as ``symmetric_product`` makes it, for a
    lower-triangular ``[..., n, n]`` L: L^-1 by halves (``blocked.lower_triangular_inverse``: from
    ``numerics.FACTOR_BLOCK`` rows half the triangular-solve work of a blocked solve of the identity, the same
    products) and the Gram product of the upper-triangular L^-T by halves (n^3, ``symmetric_product``),
    triangular-solve and matrix-product work that a GPU runs at a higher rate than a batched potrs
    (docs/speed.md#inverses-and-solves-as-products). A value, no gradient."""
    return symmetric_product(blocked.lower_triangular_inverse(chol).mT, upper_triangular=True)
