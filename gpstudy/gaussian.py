"""Gaussian maths, written once: densities, entropy, KL, conditioning, GPNet's tempered prior and target.

Every function takes full covariances (or their lower Cholesky factors) with optional leading batch
dimensions: means are ``[..., n]``, covariances and factors ``[..., n, n]``. The factors, solves and
Grams they are made of are ``gpstudy.linalg``'s.

References: Shi, Sun and Zhu (2019), "Scalable Training of Inference Networks for Gaussian-Process
Models", eq. 7-11 (numbered 7, 12-28 in ``papers/gpnet-full-with-appendix.txt``).
"""

import math

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from gpstudy.linalg import blocked
from gpstudy.linalg.factor import add_diagonal, cholesky, inverse_from_scale_tril, solve_lower
from gpstudy.linalg.products import HALVES_FROM, squared_norm, symmetric_product


def _half_log_det(chol: Tensor) -> Tensor:
    """0.5 log|L L^T| = sum log diag(L), shape ``[...]``."""
    return chol.diagonal(dim1=-2, dim2=-1).log().sum(-1)


def _trace_and_mahalanobis(mean_q: Tensor, chol_q: Tensor, mean_p: Tensor, chol_p: Tensor) -> Tensor:
    """tr(S_p^-1 S_q) + (m_p - m_q)^T S_p^-1 (m_p - m_q) = |L_p^-1 [L_q, m_q - m_p]|_F^2, shape ``[...]``: one
    triangular solve of both (a call less than two, forward and backward)."""
    difference = (mean_q - mean_p).unsqueeze(-1)
    batch = torch.broadcast_shapes(chol_q.shape[:-2], difference.shape[:-2])
    stacked = torch.cat([chol_q.expand(*batch, -1, -1), difference.expand(*batch, -1, -1)], dim=-1)
    return squared_norm(solve_lower(chol_p, stacked), (-2, -1))  # [L_p^-1 L_q, L_p^-1 (m_q - m_p)]


def _kl_of_quadratic(quadratic: Tensor, chol_q: Tensor, chol_p: Tensor) -> Tensor:
    """KL[q || p] = (tr(S_p^-1 S_q) + Mahalanobis - n) / 2 + log|L_p| - log|L_q| from its ``quadratic`` terms."""
    return 0.5 * (quadratic - chol_q.shape[-1]) + _half_log_det(chol_p) - _half_log_det(chol_q)


def log_density(value: Tensor, mean: Tensor, chol: Tensor) -> Tensor:
    """log N(value | mean, L L^T), shape ``[...]``."""
    whitened = solve_lower(chol, (value - mean).unsqueeze(-1))
    size = value.shape[-1]
    return -0.5 * (size * math.log(2 * math.pi) + squared_norm(whitened, (-2, -1))) - _half_log_det(chol)


def entropy(chol: Tensor) -> Tensor:
    """H[N(m, L L^T)] = 0.5 n log(2 pi e) + 0.5 log|L L^T|, shape ``[...]``."""
    size = chol.shape[-1]
    return 0.5 * size * (1.0 + math.log(2 * math.pi)) + _half_log_det(chol)


def cross_entropy(mean_q: Tensor, chol_q: Tensor, mean_p: Tensor, chol_p: Tensor) -> Tensor:
    """-E_q[log p] for q = N(mean_q, L_q L_q^T) and p = N(mean_p, L_p L_p^T), shape ``[...]``."""
    size = mean_q.shape[-1]
    quadratic = _trace_and_mahalanobis(mean_q, chol_q, mean_p, chol_p)
    return 0.5 * (size * math.log(2 * math.pi) + quadratic) + _half_log_det(chol_p)


class _StandardNormalKL(torch.autograd.Function):
    """KL[N(m, L L^T) || N(0, I)] with its closed-form gradient, dm = g m and dL = g (L - diag(1 / diag L)): one
    pass over L backward, where autograd's (the squared norm's, the diagonal's n x n zeros and their sum) made six;
    the same floating-point operations, so the same numbers."""

    @staticmethod
    def forward(ctx, mean: Tensor, chol: Tensor) -> Tensor:
        ctx.save_for_backward(mean, chol)
        size = mean.shape[-1]
        return 0.5 * (squared_norm(chol, (-2, -1)) + squared_norm(mean, -1) - size) - _half_log_det(chol)

    @staticmethod
    @once_differentiable  # a second derivative raises instead of being wrong
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, Tensor | None]:
        mean, chol = ctx.saved_tensors
        grad_mean = grad_chol = None
        if ctx.needs_input_grad[0]:
            grad_mean = (grad.unsqueeze(-1) * mean).sum_to_size(mean.shape)
        if ctx.needs_input_grad[1]:
            grad_chol = chol * grad[..., None, None]
            grad_chol.diagonal(dim1=-2, dim2=-1).sub_(grad.unsqueeze(-1) / chol.diagonal(dim1=-2, dim2=-1))
            grad_chol = grad_chol.sum_to_size(chol.shape)
        return grad_mean, grad_chol


def kl_to_standard_normal(mean: Tensor, chol: Tensor) -> Tensor:
    """KL[N(mean, L L^T) || N(0, I)] = 0.5 (|L|_F^2 + |mean|^2 - n) - sum log diag L, shape ``[...]``, its gradient
    in closed form (``_StandardNormalKL``)."""
    return _StandardNormalKL.apply(mean, chol)


def kl_divergence(mean_q: Tensor, chol_q: Tensor, mean_p: Tensor, chol_p: Tensor) -> Tensor:
    """KL[q || p] for q = N(mean_q, L_q L_q^T) and p = N(mean_p, L_p L_p^T), shape ``[...]``."""
    return _kl_of_quadratic(_trace_and_mahalanobis(mean_q, chol_q, mean_p, chol_p), chol_q, chol_p)


def kl_divergence_of_whitened(
    whitened_scale: Tensor, whitened_difference: Tensor, chol_q: Tensor, chol_p: Tensor
) -> Tensor:
    """``kl_divergence`` ``[...]`` from A = L_p^-1 L_q ``[..., n, n]`` and w = L_p^-1 (m_q - m_p) ``[..., n]``, solved
    by the caller (with other right-hand sides of L_p, in one call): (|A|_F^2 + |w|^2 - n) / 2 + log|L_p| - log|L_q|."""
    quadratic = squared_norm(whitened_scale, (-2, -1)) + squared_norm(whitened_difference, -1)
    return _kl_of_quadratic(quadratic, chol_q, chol_p)


class _CovarianceKL(torch.autograd.Function):
    """KL[N(m_q, S_q) || N(m_p, S_p)] from full covariances, with closed-form gradients:
    dS_q = (S_p^-1 - S_q^-1) / 2, dm_q = -dm_p = S_p^-1 d and
    dS_p = (S_p^-1 - S_p^-1 (S_q + d d^T) S_p^-1) / 2, with d = m_q - m_p.

    dS_q is a difference of two inverses: where S_q needs a gradient both are formed
    (``inverse_from_scale_tril``: potri on a CPU, a triangular solve and a Gram product on a GPU), and the forward's
    trace is then the elementwise sum of S_p^-1 * S_q. Otherwise
    nothing is inverted: the value comes from A = L_p^-1 L_q and w = L_p^-1 d (triangular solves), and
    dS_p = L_p^-T (I - A A^T - w w^T) L_p^-1 / 2 from two more (5.2 n^3 in all instead of 6.7 n^3).

    Its second output is S_q's diagonal, whose gradient the backward adds onto dS_q's diagonal in place: a
    caller that also takes q's variances from S_q (an ELBO's expected log-likelihood) gets their gradient without
    autograd's n x n zeros and sum of two n x n gradients.
    """

    @staticmethod
    def forward(ctx, mean_q: Tensor, cov_q: Tensor, mean_p: Tensor, cov_p: Tensor) -> tuple[Tensor, Tensor]:
        ctx.set_materialize_grads(False)
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
        return _kl_of_quadratic(quadratic, chol_q, chol_p), cov_q.diagonal(dim1=-2, dim2=-1).clone()

    @staticmethod
    def backward(ctx, grad: Tensor | None, grad_variances: Tensor | None) -> tuple[Tensor | None, ...]:
        chol_q, chol_p, precision_p, whitened_scale, whitened_mean, alpha = ctx.saved_tensors
        if grad is None:  # the variances alone were used
            grad = alpha.new_zeros(alpha.shape[:-2])
        scale = 0.5 * grad[..., None, None]
        grad_mean = grad.unsqueeze(-1) * alpha.squeeze(-1)
        grad_cov_q = grad_cov_p = None
        if ctx.needs_input_grad[1]:
            grad_cov_q = scale * (precision_p - inverse_from_scale_tril(chol_q))
            if grad_variances is not None:
                grad_cov_q.diagonal(dim1=-2, dim2=-1).add_(grad_variances)
        if ctx.needs_input_grad[3] and precision_p is not None:  # S_p^-1 S_q S_p^-1 = (S_p^-1 L_q)(S_p^-1 L_q)^T
            spread = symmetric_product(precision_p @ chol_q) + alpha @ alpha.mT
            grad_cov_p = scale * (precision_p - spread)
        elif ctx.needs_input_grad[3]:  # L_p^-T (I - A A^T - w w^T) L_p^-1
            inner = add_diagonal(-symmetric_product(whitened_scale) - whitened_mean @ whitened_mean.mT, 1.0)
            left = blocked.solve_triangular(chol_p.mT, inner, upper=True)  # L_p^-T (...)
            grad_cov_p = scale * blocked.solve_triangular(chol_p, left, upper=False, left=False)
        return grad_mean, grad_cov_q, -grad_mean, grad_cov_p


def kl_divergence_of_covariances(mean_q: Tensor, cov_q: Tensor, mean_p: Tensor, cov_p: Tensor) -> Tensor:
    """KL[N(mean_q, cov_q) || N(mean_p, cov_p)] ``[...]`` from full covariances (``cholesky`` of each).

    Its backward is closed form instead of differentiating two Cholesky factors and a triangular
    solve: about half the work of the autograd path (FBNN's whole objective). An inverse is formed
    only where the gradient is one (``cov_q``'s: S_p^-1 - S_q^-1); see ``_CovarianceKL``.
    """
    return _CovarianceKL.apply(mean_q, cov_q, mean_p, cov_p)[0]


def kl_divergence_and_variances(mean_q: Tensor, cov_q: Tensor, mean_p: Tensor, cov_p: Tensor) -> tuple[Tensor, Tensor]:
    """``kl_divergence_of_covariances`` ``[...]`` and the diagonal of ``cov_q`` ``[..., n]``, whose gradient joins
    the KL's in its backward (no n x n pass of its own: ``_CovarianceKL``)."""
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
    residual = (value_b - mean_b).unsqueeze(-1)
    batch = torch.broadcast_shapes(cov_ab.shape[:-2], residual.shape[:-2])
    stacked = torch.cat([cov_ab.mT.expand(*batch, -1, -1), residual.expand(*batch, -1, -1)], dim=-1)
    solved = solve_lower(chol_bb, stacked)  # one solve: L_bb^-1 [S_ba, y - m_b], [..., b, a + 1]
    projection, residual = solved[..., :-1], solved[..., -1:]
    mean = mean_a + (projection.mT @ residual).squeeze(-1)
    if diag:
        return mean, cov_aa - squared_norm(projection, -2)
    return mean, cov_aa - projection.mT @ projection


def tempered_prior(
    prior_cov: Tensor,
    previous_mean: Tensor,
    previous_cov: Tensor,
    beta: float | Tensor,
    by_previous: bool | None = None,
) -> tuple[Tensor, Tensor]:
    """GPNet's tempered prior p(f)^beta q_t(f)^(1-beta) = N(m~, K~) at a finite set of inputs (eq. 8-9).

    K~ = [(1-beta) Sigma^-1 + beta K^-1]^-1 = K B^-1 Sigma and m~ = (1-beta) K~ Sigma^-1 mu = (1-beta) K B^-1 mu
    with the mixture B = beta Sigma + (1-beta) K = L_B L_B^T: one Cholesky factor, no inverse of K or Sigma.
    Below ``HALVES_FROM`` points K B^-1 [Sigma mu] = (L_B^-1 K)^T (L_B^-1 [Sigma mu]), two triangular solves and
    a product, K~ symmetrized (exactly symmetric). From ``HALVES_FROM`` points K~ is a Gram:
    K B^-1 Sigma = (A - a A B^-1 A) / (1 - a) with A = Sigma, a = beta (as (1-beta) K = B - beta Sigma) for
    beta <= 1/2, else A = K, a = 1 - beta; A B^-1 A = (L_B^-1 A)^T (L_B^-1 A) by row halves (3/4 of a product),
    one triangular solve of A, and m~ = mu - beta (L_B^-1 A)^T (L_B^-1 mu), or (1-beta) (...) with A = K. Each
    side keeps a <= 1/2 (1 - a >= 1/2; a A B^-1 A <= A as B >= a A): the difference loses about
    a |A| / ((1 - a) |K~|) roundings, few where Sigma and K are of one scale, as GPNet's are
    (``tests/test_gaussian.py`` bounds the loss where they are not). This K~ is symmetric only up to its
    inputs' and BLAS's rounding: the Cholesky factors that read it read one triangle. The non-conjugate
    objective (section 3.2) uses it directly; ``tempered_target`` conditions it on the batch. Why it is fast,
    and how close to a 40-digit reference: docs/gpus.md#third-round.

    Args:
        prior_cov: K, the prior covariance ``[..., z, z]`` (jitter included).
        previous_mean: mu, the previous network's mean ``[..., z]``.
        previous_cov: Sigma, the previous network's covariance ``[..., z, z]`` (jitter included).
        beta: the step size beta_t in (0, 1]: a float, or a 0-dim tensor on the matrices' device (no host
            read: the same operators whatever its value).
        by_previous: whether beta <= 1/2 (the side A = Sigma); None: read from a float ``beta``. A tensor
            ``beta`` needs it (the caller knows it on the host).

    Returns:
        m~ ``[..., z]`` and K~ ``[..., z, z]``.
    """
    if prior_cov.shape[-1] < HALVES_FROM:  # the form configs/paper-cpu.yaml's Snelson numbers were made with
        chol_mixture = cholesky(beta * previous_cov + (1 - beta) * prior_cov)  # L_B L_B^T = B
        whitened_prior = solve_lower(chol_mixture, prior_cov)  # L_B^-1 K
        whitened = solve_lower(chol_mixture, torch.cat([previous_cov, previous_mean.unsqueeze(-1)], dim=-1))
        product = whitened_prior.mT @ whitened  # K B^-1 [S mu] = (L_B^-1 K)^T (L_B^-1 [S mu])
        cov = product[..., :-1]
        return (1 - beta) * product[..., -1], 0.5 * (cov + cov.mT)
    if by_previous is None:
        if isinstance(beta, Tensor):
            raise ValueError("tempered_prior: a tensor beta needs by_previous (beta <= 1/2, known on the host)")
        by_previous = beta <= 0.5
    if isinstance(beta, Tensor):  # lerp's tensor weight is of its matrices' dtype
        beta = beta.to(prior_cov.dtype)
    chol_mixture = cholesky(torch.lerp(prior_cov, previous_cov, beta))  # B = K + beta (Sigma - K): one pass
    side, weight = (previous_cov, beta) if by_previous else (prior_cov, 1 - beta)  # A, a
    whitened = solve_lower(chol_mixture, side)  # L_B^-1 A
    whitened_mean = solve_lower(chol_mixture, previous_mean.unsqueeze(-1))  # L_B^-1 mu
    # G + (A - G) / (1 - a) = (A - a G) / (1 - a) with G = A B^-1 A: one pass, a tensor weight as a float one
    cov = symmetric_product(whitened.mT).lerp_(side, 1 / (1 - weight))
    projected = (whitened.mT @ whitened_mean).squeeze(-1)  # A B^-1 mu
    mean = previous_mean - beta * projected if by_previous else (1 - beta) * projected
    return mean, cov


def tempered_target(
    prior_cov: Tensor,
    previous_mean: Tensor,
    previous_cov: Tensor,
    y_batch: Tensor,
    noise_variance: Tensor | float,
    beta: float | Tensor,
    n_train: int,
    by_previous: bool | None = None,
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
        by_previous: as ``tempered_prior``'s.

    Returns:
        The target mean ``[..., m]`` and covariance ``[..., m, m]`` at the measurement points.
    """
    mean, cov = tempered_prior(prior_cov, previous_mean, previous_cov, beta, by_previous)
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
