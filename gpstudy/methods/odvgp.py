"""Orthogonally decoupled variational GP, ORTH and ORTHNAT (Salimbeni, Cheng, Boots and Deisenroth 2018)."""

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from gpstudy import generators as draws
from gpstudy import numerics
from gpstudy.gaussian import kl_divergence_of_whitened
from gpstudy.likelihoods import LIKELIHOODS
from gpstudy.linalg import (
    add_jitter_,
    blocked,
    cholesky,
    gram,
    kernel_scale_tril,
    raw_of_scale_tril,
    raw_scale_tril,
    scale_tril,
    solve_lower,
)
from gpstudy.linalg.products import squared_norm
from gpstudy.methods.base import Method, MethodConfig
from gpstudy.methods.inducing import kmeans_centres
from gpstudy.methods.problem import Problem


def _matvec(matrix: Tensor, vector: Tensor) -> Tensor:
    """``matrix @ vector`` for ``[..., n, k]`` and ``[..., k]``."""
    return (matrix @ vector.unsqueeze(-1)).squeeze(-1)


def _raw_of_scale_tril(chol: Tensor) -> Tensor:
    """``raw_of_scale_tril`` with a diagonal below the positivity floor raised to twice the floor, the
    least that ``scale_tril`` represents (a natural step may go there)."""
    diagonal = chol.diagonal(dim1=-2, dim2=-1).clamp_min(2 * numerics.POSITIVE_FLOOR)
    return raw_of_scale_tril(torch.tril(chol, diagonal=-1) + torch.diag_embed(diagonal))


def to_expectation(a_beta: Tensor, raw_scale: Tensor, chol_beta: Tensor) -> tuple[Tensor, Tensor]:
    """The expectation parameters (m_beta, S + m_beta m_beta^T) of q(f(beta)) = N(K_beta a_beta, L L^T).

    Args:
        a_beta: ``[*batch, M]``.
        raw_scale: the raw L ``[*batch, M, M]`` (``gpstudy.linalg.scale_tril``).
        chol_beta: the lower Cholesky factor of K_beta ``[*batch, M, M]``.
    """
    mean = _matvec(chol_beta, _matvec(chol_beta.mT, a_beta))  # m_beta = K_beta a_beta (eq. 14)
    return mean, gram(scale_tril(raw_scale)) + mean.unsqueeze(-1) * mean.unsqueeze(-2)


def expectation_gradients(
    mean: Tensor, second_moment: Tensor, chol_beta: Tensor, grad_a_beta: Tensor, grad_raw_scale: Tensor
) -> tuple[Tensor, Tensor]:
    """dLoss/deta ``[*batch, M]`` and ``[*batch, M, M]`` at eta = (m_beta, S + m_beta m_beta^T) from dLoss/da_beta and
    dLoss/d(raw L), through eta -> (a_beta, raw L), the inverse of ``to_expectation`` (as GPflow's
    ``NaturalGradient``): a_beta = K_beta^-1 m_beta is linear, its part K_beta^-1 dLoss/da_beta (one solve, no
    a_beta formed); raw L = raw(chol(eta_2 - m m^T)) by autograd."""
    with torch.enable_grad():
        expectation = (mean.detach().requires_grad_(), second_moment.detach().requires_grad_())
        chol = cholesky(expectation[1] - expectation[0].unsqueeze(-1) * expectation[0].unsqueeze(-2))
        grad_mean, grad_second_moment = torch.autograd.grad(_raw_of_scale_tril(chol), expectation, grad_raw_scale)
    return grad_mean + torch.cholesky_solve(grad_a_beta.unsqueeze(-1), chol_beta).squeeze(-1), grad_second_moment


def natural_step(
    mean: Tensor, chol: Tensor, grad_mean: Tensor, grad_second_moment: Tensor, step_size: float
) -> tuple[Tensor, Tensor]:
    """One natural-gradient step theta <- theta - tau dLoss/deta on q = N(m, L L^T) (eq. 15-16b,c).

    theta = (S^-1 m, -S^-1 / 2) are the natural and eta = (m, S + m m^T) the expectation parameters;
    the natural gradient in theta is the ordinary gradient in eta.

    Args:
        mean: m ``[*batch, M]``.
        chol: L ``[*batch, M, M]``.
        grad_mean: dLoss/deta_1 ``[*batch, M]``.
        grad_second_moment: dLoss/deta_2 ``[*batch, M, M]`` (symmetric, or its lower-triangle form).
        step_size: tau.

    Returns:
        The new m ``[*batch, M]`` and L ``[*batch, M, M]``.
    """
    precision = torch.cholesky_inverse(chol)
    natural_mean = _matvec(precision, mean) - step_size * grad_mean
    precision = precision + step_size * (grad_second_moment + grad_second_moment.mT)  # -2 theta_2
    # the new L, lower with L L^T = precision^-1, from one factor: with J the reversal of rows and columns and
    # J precision J = R R^T, precision^-1 = (J R^-T J)(J R^-T J)^T, and J R^-T J is lower triangular
    reversed_inverse = blocked.lower_triangular_inverse(cholesky(precision.flip(-2, -1)))  # R^-1
    chol = reversed_inverse.flip(-2, -1).mT  # J R^-T J
    return _matvec(chol, _matvec(chol.mT, natural_mean)), chol


class _Terms(NamedTuple):
    """What eq. 12's marginals at the points x and the KL take (``ODVGP._terms``), ``[*batch, ...]``."""

    chol_beta: Tensor  # L_beta, K_beta = L_beta L_beta^T, [M, M]
    scale: Tensor  # L, S = L L^T, [M, M]
    k_beta_x: Tensor  # K_beta,x, [M, n]
    whitened: Tensor  # L_beta^-1 K_beta,gamma a_gamma, [M]
    projection: Tensor  # A = L_beta^-1 K_beta,x, [M, n]
    whitened_scale: Tensor  # L_beta^-1 L, [M, M]
    projected: Tensor  # K_beta^-1 K_beta,gamma a_gamma, [M]
    back: Tensor  # B = K_beta^-1 K_beta,x, [M, n]


class ODVGP(Method):
    """ODVGP: the orthogonally decoupled basis (eq. 12), not whitened, with the paper's parameters.

    Mean basis gamma ``[*batch, M_gamma, D]`` with a_gamma, covariance basis beta ``[*batch, M, D]``
    with a_beta (the coefficients of k_x,beta: q's mean of f(beta) is K_beta a_beta) and S = L L^T,
    q's covariance of f(beta) (eq. 12, Figure 1):
    m(x) = (k_x,gamma - k_x,beta K_beta^-1 K_beta,gamma) a_gamma + k_x,beta a_beta and
    s(x, x') = k_x,x' - k_x,beta K_beta^-1 (K_beta - S) K_beta^-1 k_beta,x'.
    KL[q || p] = KL[N(K_beta a_beta, S) || N(0, K_beta)]
    + a_gamma^T (K_gamma - K_gamma,beta K_beta^-1 K_beta,gamma) a_gamma / 2 (the norm of the orthogonal
    mean part; K_gamma and K_beta carry jitter). Loss = -[(N/n) sum_B E_q log p(y_b | f_b) - KL].

    Start: gamma and beta at two k-means of the training inputs (sizes M_gamma and M, beta first, as in
    the authors' code), a_gamma = a_beta = 0 and L = I (so S = I, not the prior's K_beta).
    ORTH (``natural_gradient`` false): Adam on everything. ORTHNAT: a_beta and L are left out of Adam;
    ``natural_update`` takes a natural-gradient step on q(f(beta)) from the same iteration's gradients
    (eq. 15-16b,c, with the current K_beta: simultaneous with Adam's step on the rest). Kernel and noise
    are trained only with ``online_hyperparameters``.
    """

    name = "odvgp"
    display_name = "ODVGP"
    options_schema = {
        "mean_basis": {
            "type": "integer",
            "minimum": 0,
            "description": "M_gamma, the size of the mean-only basis gamma (0: SVGP, not whitened)",
        },
        "natural_gradient": {
            "type": "boolean",
            "description": "ORTHNAT: natural-gradient steps on the beta part (a_beta, S); "
            "false: ORTH, Adam on everything",
        },
        "natural_step": {
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": 1,
            "description": "ORTHNAT: the natural-gradient step size tau (authors: 0.05)",
        },
        "online_hyperparameters": {"type": "boolean", "description": "learn kernel and noise by the ELBO"},
    }

    @classmethod
    def supported_likelihoods(cls, options: Mapping[str, Any]) -> tuple[str, ...]:
        # any likelihood of one latent: its expected log density
        return tuple(name for name, likelihood in LIKELIHOODS.items() if not likelihood.several_latents)

    def __init__(self, problem: Problem, config: MethodConfig):
        super().__init__(problem, config)
        self.learn_hyperparameters(config.online_hyperparameters)
        x_train, generators = problem.x_train, problem.generators
        beta = kmeans_centres(x_train, config.M, generators)
        batch_shape, size = beta.shape[:-2], beta.shape[-2]
        gamma = (
            kmeans_centres(x_train, config.mean_basis, generators)
            if config.mean_basis > 0
            else beta.new_zeros((*batch_shape, 0, beta.shape[-1]))
        )
        has_gamma = gamma.shape[-2] > 0  # an empty basis has nothing to train
        self.gamma = nn.Parameter(gamma, requires_grad=has_gamma)  # [*batch, M_gamma, D]
        self.a_gamma = nn.Parameter(gamma.new_zeros(gamma.shape[:-1]), requires_grad=has_gamma)  # [*batch, M_g]
        self.beta = nn.Parameter(beta)  # [*batch, M, D]
        self.a_beta = nn.Parameter(beta.new_zeros((*batch_shape, size)))  # [*batch, M]
        self.raw_scale = nn.Parameter(raw_scale_tril(1.0, size, beta, batch_shape))  # raw L, [*batch, M, M]

    @property
    def effective_M(self) -> int:
        """The covariance basis beta placed: ``config.M``, or N where the training set is smaller."""
        return self.beta.shape[-2]

    @property
    def scale_tril(self) -> Tensor:
        """L, the lower Cholesky factor of S = Cov_q[f(beta)] ``[*batch, M, M]``."""
        return scale_tril(self.raw_scale)

    def adam_parameters(self) -> list[nn.Parameter]:
        """ORTHNAT leaves a_beta and L to ``natural_update``; they keep ``requires_grad`` for their gradients."""
        natural = {id(self.a_beta), id(self.raw_scale)} if self.config.natural_gradient else set()
        return [p for p in super().adam_parameters() if id(p) not in natural]

    def _terms(self, x: Tensor) -> _Terms:
        """What eq. 12's marginals at ``x`` ``[*batch, n, D]`` and the KL take, by two triangular solves with
        L_beta (K_beta = L_beta L_beta^T), each of every right-hand side stacked (one call forward and one
        backward where separate solves made five and five, each a latency-bound call on a GPU):
        L_beta^-1 [K_beta,gamma a_gamma, K_beta,x, L] and L_beta^-T [L_beta^-1 K_beta,gamma a_gamma, A]
        with A = L_beta^-1 K_beta,x.
        """
        chol_beta = kernel_scale_tril(self.kernel, self.beta)
        gamma_part = self.kernel(self.beta, self.gamma) @ self.a_gamma.unsqueeze(-1)  # K_beta,gamma a_gamma
        k_beta_x, scale = self.kernel(self.beta, x), self.scale_tril
        # split, not sliced: each solve's gradient is joined by one concatenation, not zero-filled copies and a sum
        whitened, projection, whitened_scale = solve_lower(
            chol_beta, torch.cat([gamma_part, k_beta_x, scale], dim=-1)
        ).split([1, x.shape[-2], scale.shape[-1]], dim=-1)
        projected, back = blocked.solve_triangular(
            chol_beta.mT, torch.cat([whitened, projection], dim=-1), upper=True
        ).split([1, x.shape[-2]], dim=-1)
        whitened, projected = whitened.squeeze(-1), projected.squeeze(-1)
        return _Terms(chol_beta, scale, k_beta_x, whitened, projection, whitened_scale, projected, back)

    def _marginals(self, x: Tensor, terms: _Terms) -> tuple[Tensor, Tensor]:
        """m(x) and s(x, x) ``[*batch, n]`` of eq. 12 at ``x`` ``[*batch, n, D]``: with A = L_beta^-1 K_beta,x and
        B = K_beta^-1 K_beta,x, m = k_x,gamma a_gamma + K_x,beta (a_beta - K_beta^-1 K_beta,gamma a_gamma) and
        s = k_xx - |A|^2 + |L^T B|^2 (column norms)."""
        coefficients = self.a_beta - terms.projected
        mean = _matvec(self.kernel(x, self.gamma), self.a_gamma) + _matvec(terms.k_beta_x.mT, coefficients)
        variance = (
            self.kernel(x, diag=True)
            - squared_norm(terms.projection, -2)
            + squared_norm(terms.scale.mT @ terms.back, -2)
        )
        return mean, variance

    def predict_f(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """q(f(x)) of eq. 12: mean and marginal variance ``[*batch, n]``."""
        return self._marginals(x, self._terms(x))

    def kl(self, terms: _Terms) -> Tensor:
        """KL[q || p] ``[*batch]``: the beta part, KL[N(K_beta a_beta, L L^T) || N(0, K_beta)] =
        (|L_beta^-1 L|_F^2 + |L_beta^T a_beta|^2 - M) / 2 + log|L_beta| - log|L| (its Mahalanobis term
        a_beta^T K_beta a_beta: no solve), plus the orthogonal mean's norm."""
        whitened_mean = _matvec(terms.chol_beta.mT, self.a_beta)  # L_beta^-1 K_beta a_beta
        kl_beta = kl_divergence_of_whitened(terms.whitened_scale, whitened_mean, terms.scale, terms.chol_beta)
        norm_gamma = (self.a_gamma * _matvec(add_jitter_(self.kernel(self.gamma)), self.a_gamma)).sum(-1)
        return kl_beta + 0.5 * (norm_gamma - squared_norm(terms.whitened, -1))

    def loss(self, x_batch: Tensor, y_batch: Tensor, step: int, generators: draws.Generators) -> Tensor:
        terms = self._terms(x_batch)
        mean, variance = self._marginals(x_batch, terms)
        expected = self.likelihood.expected_log_prob(y_batch, mean, variance, generators).sum(-1)
        return -(self.config.n_train / y_batch.shape[-1] * expected - self.kl(terms))

    def natural_update(self) -> Callable[[], None] | None:
        """ORTHNAT: the natural-gradient step on (a_beta, S) from the gradients the loss left (which it
        clears), at the hyperparameters and bases those gradients were taken at; applied after Adam's step.

        dLoss/deta comes from those of (a_beta, raw L) (``expectation_gradients``).
        """
        if not self.config.natural_gradient or self.a_beta.grad is None or self.raw_scale.grad is None:
            return None
        grads = (self.a_beta.grad, self.raw_scale.grad)
        self.a_beta.grad = self.raw_scale.grad = None
        with torch.no_grad():
            chol_beta = kernel_scale_tril(self.kernel, self.beta)
            mean, second_moment = to_expectation(self.a_beta, self.raw_scale, chol_beta)
            grad_mean, grad_second_moment = expectation_gradients(mean, second_moment, chol_beta, *grads)
            mean, chol = natural_step(mean, self.scale_tril, grad_mean, grad_second_moment, self.config.natural_step)
            a_beta, raw_scale = (
                torch.cholesky_solve(mean.unsqueeze(-1), chol_beta).squeeze(-1),
                _raw_of_scale_tril(chol),
            )

        def apply() -> None:
            with torch.no_grad():
                self.a_beta.copy_(a_beta)
                self.raw_scale.copy_(raw_scale)

        return apply
