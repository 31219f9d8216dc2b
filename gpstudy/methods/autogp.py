"""AutoGP: a sparse GP with a mixture q(u), Monte Carlo expectations and a leave-one-out objective
(Krauth, Bonilla, Cutajar and Filippone, 2017)."""

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from gpstudy import generators as draws
from gpstudy.gaussian import (cholesky, cross_entropy, entropy, inverse_positive, kernel_scale_tril, log_density,
                              positive, raw_of_scale_tril, scale_tril)
from gpstudy.likelihoods import Likelihood
from gpstudy.methods.base import Method, MethodConfig
from gpstudy.methods.problem import Problem
from gpstudy.methods.svgp import kmeans_centres


def is_loo_step(step: int, variational_phase: int, loo_phase: int) -> bool:
    """Whether iteration ``step`` (1-based) is in a leave-one-out phase: each cycle runs
    ``variational_phase`` ELBO iterations, then ``loo_phase`` LOO iterations (Algorithm 1)."""
    return (step - 1) % (variational_phase + loo_phase) >= variational_phase


def sample_log_prob(likelihood: Likelihood, y: Tensor, mean: Tensor, var: Tensor, samples: int,
                    generators: draws.Generators) -> Tensor:
    """log p(y_n | f_n^(k,s)) ``[*batch, K, S, n]`` at f = b + sqrt(sigma^2) eps, eps ~ N(0, 1) (eqs. 13-14;
    eq. 14 drops the square root, the authors' code has it).

    Args:
        likelihood: p(y | f), of Q latents.
        y: ``[*batch, n]``.
        mean: b, the marginal means of q_k(f_n) ``[*batch, K, Q, n]`` (eq. 11).
        var: sigma^2, the marginal variances ``[*batch, K, Q, n]`` (eq. 12).
        samples: S.
        generators: one per split (``gpstudy.generators``).
    """
    components, latents, n = mean.shape[-3:]
    eps = draws.randn((components, samples, latents, n), generators, like=mean)
    f = mean.unsqueeze(-3) + var.sqrt().unsqueeze(-3) * eps  # [*batch, K, S, Q, n]
    # the likelihood takes [*batch, points] or [*batch, points, Q]: (K, S, n) flattened into points
    batch = y.shape[:-1]
    f = to_likelihood_layout(f).reshape(*batch, -1, *([latents] if latents > 1 else []))
    ys = y[..., None, None, :].expand(*batch, components, samples, n).reshape(*batch, -1)
    return likelihood.log_prob(ys, f).reshape(*batch, components, samples, n)


def expected_log_prob(likelihood: Likelihood, y: Tensor, weights: Tensor, mean: Tensor, var: Tensor,
                      samples: int, generators: draws.Generators) -> Tensor:
    """sum_k pi_k (1/S) sum_s log p(y_n | f_n^(k,s)) ``[*batch, n]`` (eq. 15); ``weights`` pi ``[*batch, K]``,
    the rest as ``sample_log_prob``."""
    log_p = sample_log_prob(likelihood, y, mean, var, samples, generators)
    return (weights.unsqueeze(-1) * log_p.mean(-2)).sum(-2)


def leave_one_out(likelihood: Likelihood, y: Tensor, weights: Tensor, mean: Tensor, var: Tensor,
                  samples: int, generators: draws.Generators) -> Tensor:
    """log sum_k pi_k (1/S) sum_s 1 / p(y_n | f_n^(k,s)) ``[*batch, n]``, minus the LOO log predictive
    log p(y_n | D_-n) with q for p(f_n | D) (eqs. 16, 31), by logsumexp; arguments as ``expected_log_prob``.

    For a Gaussian likelihood E_q[1 / p] is finite only where sigma^2 < the noise variance, and its Monte
    Carlo estimate has a finite variance only where sigma^2 < half of it: a classification objective.
    """
    log_p = sample_log_prob(likelihood, y, mean, var, samples, generators)
    log_terms = weights.log()[..., None, None] - log_p  # [*batch, K, S, n]
    return log_terms.flatten(-3, -2).logsumexp(-2) - math.log(samples)


def mixture_entropy_bound(weights: Tensor, means: Tensor, scale_trils: Tensor) -> Tensor:
    """-sum_k pi_k log sum_l pi_l N(m_k; m_l, S_k + S_l) ``[*batch]``, Jensen's lower bound on the entropy
    of q(u) = sum_k pi_k prod_j N(m_kj, S_kj) (eq. 9; Nguyen and Bonilla 2014, Dezfouli and Bonilla 2015).

    Args:
        weights: pi ``[*batch, K]``.
        means: m ``[*batch, K, Q, M]``.
        scale_trils: lower Cholesky factors of S ``[*batch, K, Q, M, M]``.
    """
    cov = scale_trils @ scale_trils.mT
    pair_chol = cholesky(cov.unsqueeze(-4) + cov.unsqueeze(-5))  # [k, l]: chol(S_k + S_l), [*batch, K, K, Q, M, M]
    log_normal = log_density(means.unsqueeze(-3), means.unsqueeze(-4), pair_chol).sum(-1)  # [*batch, K, K]
    return -(weights * (weights.log().unsqueeze(-2) + log_normal).logsumexp(-1)).sum(-1)


def to_likelihood_layout(latent: Tensor) -> Tensor:
    """``[..., Q, n]`` to the likelihood's ``[..., n]`` (Q = 1) or ``[..., n, Q]``."""
    return latent.squeeze(-2) if latent.shape[-2] == 1 else latent.mT


class AutoGP(Method):
    """AutoGP: q(u) = sum_k pi_k prod_j N(u_j; m_kj, S_kj) (eq. 9), u_j = f_j(Z), not whitened.

    Loss at a variational step: -[(N/n) sum_B sum_k pi_k E_{q_k(f_n)} log p(y_n | f_n) - KL] (eq. 10), the
    expectation by S reparameterized samples per point, component and latent (eqs. 13-15), with the
    exact KL[q(u) || p(u)] when K = 1 and, when K > 1, its upper bound
    E_q[-log p(u)] - mixture_entropy_bound (cross-entropy in closed form, entropy by Jensen's bound).
    Loss at a leave-one-out step: (N/n) sum_B log sum_k pi_k E_{q_k(f_n)}[1 / p(y_n | f_n)] (eq. 16 negated),
    with pi, m and S detached: only Z, kernel and likelihood get gradients (Algorithm 1), so the optimizer
    skips q. Steps alternate by ``is_loo_step``. The N/n makes the batch sum an unbiased estimate of eq. 16's
    sum over all N points and puts both objectives on one scale, as the authors' code does: the one Adam
    of the training loop carries its second moments from the ELBO phase into the LOO phase, and with a
    plain batch sum (N/n times smaller gradients) its LOO steps came out 15-27x smaller than a fresh
    optimizer's (issue 27); one scale keeps one optimizer, its state and checkpoint as for every method.

    The Q = ``likelihood.latent_dim`` latent functions (C for a softmax) share the kernel and Z (the paper
    allows one of each per latent); each has its own q_k(u_j). Z starts at k-means centres of the training
    inputs, every component at the prior (m = 0, S = K_ZZ) with pi uniform: the components' independent
    samples break their symmetry. Kernel and likelihood are trained in both phases with
    ``config.online_hyperparameters`` (as AutoGP does), else only Z in the LOO phase.
    """

    name = "autogp"
    options_schema = {
        "components": {"type": "integer", "minimum": 1, "description": "K, Gaussians in the mixture q(u)"},
        "covariance": {"enum": ["full", "diagonal"], "description": "the covariances S_kj of q(u)"},
        "samples": {"type": "integer", "minimum": 1,
                    "description": "S, Monte Carlo samples per point, component and latent (ELBO and LOO)"},
        "variational_phase": {"type": "integer", "minimum": 1,
                              "description": "iterations of each ELBO phase (paper: 100 epochs)"},
        "loo_phase": {"type": "integer", "minimum": 0,
                      "description": "iterations of each leave-one-out phase after it (0: no LOO)"},
        "online_hyperparameters": {"type": "boolean", "description": "learn kernel and likelihood parameters"},
    }

    @classmethod
    def supported_likelihoods(cls, options: Mapping[str, Any]) -> tuple[str, ...]:
        # any log_prob, by Monte Carlo; not the robust-max, whose log density is flat in f: reparameterized
        # samples of it give no gradient
        return ("gaussian", "bernoulli", "softmax")

    def __init__(self, problem: Problem, config: MethodConfig):
        super().__init__(problem, config)
        self.learn_hyperparameters(config.online_hyperparameters)
        inducing_inputs = kmeans_centres(problem.x_train, config.M, problem.generators)
        batch_shape = inducing_inputs.shape[:-2]
        shape = (*batch_shape, config.components, self.likelihood.latent_dim, inducing_inputs.shape[-2])  # K, Q, M
        with torch.no_grad():
            chol_zz = kernel_scale_tril(self.kernel, inducing_inputs).unsqueeze(-3).unsqueeze(-3)  # q_k(u_j) = p(u)
        if config.covariance == "full":
            raw_scale = raw_of_scale_tril(chol_zz).expand(*shape, shape[-1])
        else:
            raw_scale = inverse_positive(chol_zz.diagonal(dim1=-2, dim2=-1)).expand(shape)
        self.inducing_inputs = nn.Parameter(inducing_inputs)  # Z, [*batch, M, D]
        self.raw_weights = nn.Parameter(inducing_inputs.new_zeros(shape[:-2]),  # pi = softmax, [*batch, K]
                                        requires_grad=config.components > 1)  # K = 1: pi = 1, nothing to train
        self.q_mean = nn.Parameter(inducing_inputs.new_zeros(shape))  # m, [*batch, K, Q, M]
        self.raw_q_scale = nn.Parameter(raw_scale.clone())  # [*batch, K, Q, M, M] (full) or [*batch, K, Q, M]

    @property
    def effective_M(self) -> int:
        """The inducing inputs Z placed: ``config.M``, or N where the training set is smaller."""
        return self.inducing_inputs.shape[-2]

    @property
    def weights(self) -> Tensor:
        """pi ``[*batch, K]``."""
        return self.raw_weights.softmax(-1)

    @property
    def q_scale_tril(self) -> Tensor:
        """Lower Cholesky factors of S ``[*batch, K, Q, M, M]`` (diagonal with ``covariance: diagonal``)."""
        if self.config.covariance == "full":
            return scale_tril(self.raw_q_scale)
        return torch.diag_embed(positive(self.raw_q_scale))

    def marginals(self, x: Tensor, detach_q: bool = False, chol_zz: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Means b and variances sigma^2 ``[*batch, K, Q, n]`` of q_k(f_j(x)) (eqs. 11-12), q detached if asked;
        ``chol_zz``: L_Z (``kernel_scale_tril`` at Z) when the caller has it.

        With a = K_ZZ^-1 K_Zx = L^-T P, P = L^-1 K_Zx: b = a^T m, sigma^2 = k_xx - |P|^2 + a^T S a.
        """
        chol_zz = kernel_scale_tril(self.kernel, self.inducing_inputs) if chol_zz is None else chol_zz
        projection = torch.linalg.solve_triangular(chol_zz, self.kernel(self.inducing_inputs, x), upper=False)
        a = torch.linalg.solve_triangular(chol_zz.mT, projection, upper=True)  # K_ZZ^-1 K_Zx, [*batch, M, n]
        a = a[..., None, None, :, :]  # [*batch, 1, 1, M, n]: for every component and latent
        q_mean, raw_scale = self.q_mean, self.raw_q_scale
        if detach_q:
            q_mean, raw_scale = q_mean.detach(), raw_scale.detach()
        mean = (q_mean.unsqueeze(-2) @ a).squeeze(-2)
        if self.config.covariance == "full":
            quadratic = (scale_tril(raw_scale).mT @ a).square().sum(-2)  # |L^T a|^2
        else:
            quadratic = (positive(raw_scale).square().unsqueeze(-1) * a.square()).sum(-2)
        conditional = self.kernel(x, diag=True) - projection.square().sum(-2)  # [K~]_nn, [*batch, n]
        return mean, conditional[..., None, None, :] + quadratic

    def predict_f(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The moment-matched marginals of the mixture q(f(x)): mean sum_k pi_k b_k and variance
        sum_k pi_k (sigma_k^2 + (b_k - mean)^2), ``[*batch, n]`` (Q = 1) or ``[*batch, n, Q]``.

        For K > 1 the mixture is not Gaussian: a Gaussian likelihood's test log density of these moments
        differs from the mixture's (moment matching, as the authors' code predicts).
        """
        mean, var = self.marginals(x)
        weights = self.weights[..., None, None]
        mixture_mean = (weights * mean).sum(-3)
        mixture_var = (weights * (var + (mean - mixture_mean.unsqueeze(-3)).square())).sum(-3)
        return to_likelihood_layout(mixture_mean), to_likelihood_layout(mixture_var)

    def kl_divergence(self, chol_zz: Tensor | None = None) -> Tensor:
        """KL[q(u) || p(u)] ``[*batch]``, p(u) = prod_j N(0, K_ZZ) (eq. 4): exact for K = 1, else the upper
        bound sum_k pi_k sum_j E_{q_kj}[-log N(u_j; 0, K_ZZ)] - ``mixture_entropy_bound``; ``chol_zz`` as
        ``marginals``."""
        if chol_zz is None:
            chol_zz = kernel_scale_tril(self.kernel, self.inducing_inputs)
        chol_zz = chol_zz[..., None, None, :, :]
        scale, weights = self.q_scale_tril, self.weights
        cross = cross_entropy(self.q_mean, scale, torch.zeros_like(self.q_mean), chol_zz)  # [*batch, K, Q]
        cross = (weights.unsqueeze(-1) * cross).sum((-2, -1))
        if self.config.components == 1:
            return cross - entropy(scale).sum((-2, -1))
        return cross - mixture_entropy_bound(weights, self.q_mean, scale)

    def loss(self, x_batch: Tensor, y_batch: Tensor, step: int, generators: draws.Generators) -> Tensor:
        loo = is_loo_step(step, self.config.variational_phase, self.config.loo_phase)
        chol_zz = kernel_scale_tril(self.kernel, self.inducing_inputs)  # once per step, for the marginals and the KL
        mean, var = self.marginals(x_batch, detach_q=loo, chol_zz=chol_zz)
        data_scale = self.config.n_train / y_batch.shape[-1]  # N/n: both objectives on the full data's scale
        if loo:
            return data_scale * leave_one_out(self.likelihood, y_batch, self.weights.detach(), mean, var,
                                              self.config.samples, generators).sum(-1)
        expected = expected_log_prob(self.likelihood, y_batch, self.weights, mean, var, self.config.samples,
                                     generators).sum(-1)
        return -(data_scale * expected - self.kl_divergence(chol_zz))
