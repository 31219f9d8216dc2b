"""Stochastic variational GP (SVGP) with whitened inducing variables (Hensman et al. 2013)."""

from collections.abc import Mapping
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from gpstudy import generators as draws
from gpstudy.gaussian import kl_to_standard_normal
from gpstudy.likelihoods import LIKELIHOODS
from gpstudy.linalg import (
    active_factor_checks,
    blocked,
    gram,
    jittered_scale_tril,
    kernel_scale_tril,
    raw_scale_tril,
    scale_tril,
)
from gpstudy.linalg.products import squared_norm
from gpstudy.methods.base import Method, MethodConfig
from gpstudy.methods.inducing import INDUCING_INITS
from gpstudy.methods.problem import Problem

SUMMED_VARIANCES_MAX_M_PER_POINT = 0.4  # summed variances only while M < 0.4 n: see ``sums_variances``


def sums_variances(num_inducing: int, batch_size: int, like: Tensor) -> bool:
    """Whether a Gaussian likelihood's loss takes the batch's summed variances (``SVGP.summed_moments``)
    rather than each point's (``SVGP.marginals``), for M inducing inputs, a batch of n points and the dtype and
    device of ``like``.

    The summed form saves about 6 M^2 n FLOPs of n-sized products but adds about 13 M^3 of M x M
    triangular solves and products (forward and backward, counted by ``torch.utils.flop_counter`` through
    ``benchmarks/speed.py --preset uci --methods svgp``: 0.042 / 2.76 / 20.2 GFLOP a step at M = 100 /
    500 / 1000 with n = 500, against the per-point form's 0.058 / 1.82 / 9.41), so it is the cheaper
    only below M of about 0.44 n: it runs below 0.4 n. And its solves of L_Z^-1 K_Zx K_xZ L_Z^-T against
    an ill-conditioned L_Z lose what float32 has (M = n = 500: the variances' sum 1.4-1.9% off, where the
    per-point form is good to about 1e-6): only float64 takes it. And only on a CPU (``blocked.library_device``):
    on a GPU a triangular solve of M = 100 is a latency-bound call, and the summed form makes 9 such calls a step
    (forward and backward) where the per-point form makes 5 (``benchmarks/gpu_estimate.py``, SVGP-100 at n = 500,
    20 splits: 2.43 against 1.92 ms a step, central).
    """
    return (
        blocked.library_device(like)
        and like.dtype == torch.float64
        and num_inducing < SUMMED_VARIANCES_MAX_M_PER_POINT * batch_size
    )


class KeptFactor(NamedTuple):
    """L_Z kept across calls while Z and the kernel are fixed (``SVGP.prior_scale_tril``)."""

    sources: list[tuple]  # the identity of what it was factored from (``_identity`` of Z's and the kernel's tensors)
    factor: Tensor
    unchecked_info: Tensor | None  # factored inside deferred checks: its ``info``, not yet looked at; None: checked


class SVGP(Method):
    """SVGP: u = f(Z) = L_Z v with q(v) = N(m, S S^T), m = 0 and S = I at start (whitened).

    Loss = -[(N/n) sum_B E_q log p(y_b | f_b) - KL[q(v) || N(0, I)]] (Hensman et al. 2013, eq. 4); where
    the likelihood's expectation is affine in the variance (Gaussian), from the batch's summed variances
    when ``sums_variances`` says that form is the cheaper and accurate one. Z
    starts at ``config.inducing_init`` (k-means centres or distinct training inputs) and is trained
    with ``config.learn_inducing_inputs``; m and S are trained, and kernel and noise too with
    ``config.online_hyperparameters`` (else they stay where they start: Snelson's pretrained values,
    as the paper's section 5.1 keeps them).

    With C = ``likelihood.latent_dim`` > 1 latents (a softmax) the classes share Z and the kernel, and
    each has its own q(v_c): m ``[*batch, C, M]``, S ``[*batch, C, M, M]``; the KL is the sum over the
    classes and the latents are ``[*batch, n, C]``. With one latent there is no class dimension.

    Where neither Z nor the kernel is trained, L_Z is factored once and kept (``prior_scale_tril``).
    """

    name = "svgp"
    display_name = "SVGP"
    compile_needs_torch = None  # compiled SVGP trains as the eager one at torch 2.4.0 and 2.6.0 (docs/installation.md)
    options_schema = {
        "online_hyperparameters": {"type": "boolean", "description": "learn kernel and noise by the ELBO"},
        "inducing_init": {
            "enum": sorted(INDUCING_INITS),
            "description": "Z's start: kmeans (centres of the training inputs) | training_points "
            "(M distinct training inputs, drawn per split)",
        },
        "learn_inducing_inputs": {"type": "boolean", "description": "train Z (false: fixed where it starts)"},
    }

    @classmethod
    def supported_likelihoods(cls, options: Mapping[str, Any]) -> tuple[str, ...]:
        return tuple(LIKELIHOODS)  # any likelihood: its expected log density under q's marginals, per latent

    def __init__(self, problem: Problem, config: MethodConfig):
        super().__init__(problem, config)
        self.learn_hyperparameters(config.online_hyperparameters)
        self.latent_dim = problem.likelihood.latent_dim
        inducing_inputs = INDUCING_INITS[config.inducing_init](problem.x_train, config.M, problem.generators)
        num_inducing = inducing_inputs.shape[-2]
        q_batch = (*inducing_inputs.shape[:-2], *((self.latent_dim,) if self.latent_dim > 1 else ()))  # [*batch, (C)]
        self.inducing_inputs = nn.Parameter(inducing_inputs, requires_grad=config.learn_inducing_inputs)  # Z
        self.q_mean = nn.Parameter(inducing_inputs.new_zeros((*q_batch, num_inducing)))  # m, [*batch, (C,) M]
        self.raw_q_scale = nn.Parameter(raw_scale_tril(1.0, num_inducing, inducing_inputs, q_batch))
        self._fixed_factor: KeptFactor | None = None

    @property
    def effective_M(self) -> int:
        """The inducing inputs Z placed: ``config.M``, or N where the training set is smaller."""
        return self.inducing_inputs.shape[-2]

    @property
    def q_scale_tril(self) -> Tensor:
        """S, the lower Cholesky factor of q(v)'s covariance ``[*batch, M, M]`` (C latents ``[*batch, C, M, M]``)."""
        return scale_tril(self.raw_q_scale)

    def _factored_each_call(self) -> bool:
        """Whether Z or the kernel is trained, so that L_Z is factored at each call."""
        return any(source.requires_grad for source in (self.inducing_inputs, *self.kernel.parameters()))

    def prior_scale_tril(self) -> Tensor:
        """L_Z, the lower Cholesky factor of K_ZZ + jitter ``[*batch, M, M]``.

        Where Z or the kernel is trained, it is factored at each call. Where neither is, it is factored
        once, outside autograd, and kept with the identity of what it came from (Z's and the kernel's
        tensors: storage, version counter, device, dtype, shape; nothing read on the host): it is
        factored again when any of them has changed (a loaded checkpoint, a move to another device, a
        value set by hand, in place or by a new tensor), so it never goes stale.

        A factor made inside ``linalg.deferred_factor_checks`` (a training step's) is kept unchecked, with
        its ``info``: each later step that reuses it records that ``info`` again with its own factors, and
        the first call outside the deferred checks (the step's checked rerun, or an evaluation) looks at
        it, keeping the factor if it did not fail and else factoring again, checked, with the jitter a
        failed matrix gets. So a kept factor never hides a failure, and a step that reuses it reads
        nothing on the host and factors nothing.
        """
        if self._factored_each_call():
            return kernel_scale_tril(self.kernel, self.inducing_inputs)
        sources = [
            _identity(source) for source in (self.inducing_inputs, *self.kernel.parameters(), *self.kernel.buffers())
        ]
        checks, kept = active_factor_checks(), self._fixed_factor
        if kept is not None and kept.sources == sources and kept.unchecked_info is not None:
            if checks is not None:
                checks.infos.append(kept.unchecked_info)  # looked at with this step's own factors
            elif not kept.unchecked_info.any():  # looked at now: a host read, as a checked factorization's
                kept = self._fixed_factor = kept._replace(unchecked_info=None)
            else:
                kept = None  # failed: factored again, checked
        if kept is None or kept.sources != sources:
            with torch.no_grad():
                factor = kernel_scale_tril(
                    self.kernel, self.inducing_inputs
                )  # inside deferred checks: records its info
            kept = self._fixed_factor = KeptFactor(sources, factor, None if checks is None else checks.infos[-1])
        return kept.factor

    def prior_at(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """L_Z ``[*batch, M, M]`` and K_Zx ``[*batch, M, n]`` for ``x`` ``[*batch, n, D]`` of Z's batch shape;
        where L_Z is factored at each call, both from one kernel evaluation K(Z, [Z; x]) (half the
        operators of two, which is what a small step costs)."""
        if not self._factored_each_call():
            return self.prior_scale_tril(), self.kernel(self.inducing_inputs, x)
        num_inducing = self.inducing_inputs.shape[-2]
        joint = self.kernel(self.inducing_inputs, torch.cat([self.inducing_inputs, x], dim=-2))  # [K_ZZ, K_Zx]
        # split, not sliced: the two gradients are joined by one concatenation, not two zero-filled copies and a sum
        prior, cross = joint.split([num_inducing, x.shape[-2]], dim=-1)
        return jittered_scale_tril(prior), cross

    def predict_f(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """q(f(x)) = int p(f(x) | u) q(u) du (Hensman et al. 2013), marginal means and variances
        ``[*batch, n]``; C latents ``[*batch, n, C]``."""
        return self.marginals(x, self.prior_scale_tril(), self.kernel(self.inducing_inputs, x), self.q_scale_tril)

    def marginals(
        self, x: Tensor, prior_scale_tril: Tensor, cross_covariance: Tensor, q_scale_tril: Tensor
    ) -> tuple[Tensor, Tensor]:
        """``predict_f`` from L_Z, K_Zx and S: with A = L_Z^-1 K_Zx, mean A^T m, variance k_xx - |A|^2 + |S^T A|^2
        (column norms), per class."""
        projection = blocked.solve_triangular(prior_scale_tril, cross_covariance, upper=False)
        prior_variance = self.kernel(x, diag=True)
        if self.latent_dim > 1:  # one class dimension in front of the points, shared by the classes
            projection, prior_variance = projection.unsqueeze(-3), prior_variance.unsqueeze(-2)
        mean = (projection.mT @ self.q_mean.unsqueeze(-1)).squeeze(-1)
        variance = prior_variance - squared_norm(projection, -2) + squared_norm(q_scale_tril.mT @ projection, -2)
        return (mean.mT, variance.mT) if self.latent_dim > 1 else (mean, variance)

    def summed_moments(
        self, x: Tensor, prior_scale_tril: Tensor, cross_covariance: Tensor, q_scale_tril: Tensor
    ) -> tuple[Tensor, Tensor]:
        """The means of q(f(x)) ``[*batch, n]`` and the sum of their variances ``[*batch]`` (one latent), without
        the variance of each point: with A = L_Z^-1 K_Zx, sum_i var_i = sum_i k_ii + tr((S S^T - I) A A^T)
        (Hensman et al. 2013, eq. 4's trace terms summed over the batch), where A A^T = L_Z^-1 K_Zx K_xZ L_Z^-T
        takes one Gram product of K_Zx and triangular solves of M x M matrices: with the backward, 4 M^2 n
        multiply-adds of n-sized products against ``marginals``'s 10. The mean is K_xZ L_Z^-T m."""
        coefficients = blocked.solve_triangular(prior_scale_tril.mT, self.q_mean.unsqueeze(-1), upper=True)
        mean = (cross_covariance.mT @ coefficients).squeeze(-1)
        left = blocked.solve_triangular(prior_scale_tril, gram(cross_covariance), upper=False)  # L^-1 Psi
        projected = blocked.solve_triangular(prior_scale_tril, left.mT, upper=False)  # A A^T
        trace = (
            ((projected @ q_scale_tril) * q_scale_tril).sum((-2, -1))  # tr(S^T A A^T S)
            - projected.diagonal(dim1=-2, dim2=-1).sum(-1)
        )
        return mean, self.kernel(x, diag=True).sum(-1) + trace

    def kl_divergence(self, q_scale_tril: Tensor) -> Tensor:
        """KL[q(v) || N(0, I)] ``[*batch]`` with S = ``q_scale_tril``, summed over the classes with C latents."""
        kl = kl_to_standard_normal(self.q_mean, q_scale_tril)
        return kl.sum(-1) if self.latent_dim > 1 else kl

    def batch_moments(self, x_batch: Tensor, q_scale_tril: Tensor) -> tuple[Tensor, Tensor]:
        """The means and variances of q(f) ``[*batch, n]`` (C latents ``[*batch, n, C]``) the loss takes at
        ``x_batch``: each point's, or where the likelihood's expectation is affine in the variance and
        ``sums_variances`` chooses it, the batch's mean variance at every point (their sum exact)."""
        prior = self.prior_at(x_batch)
        num_points = x_batch.shape[-2]
        if self.likelihood.linear_in_variance and sums_variances(self.effective_M, num_points, prior[0]):
            mean, variance_sum = self.summed_moments(x_batch, *prior, q_scale_tril)
            return mean, (variance_sum / num_points).unsqueeze(-1).expand_as(mean)
        return self.marginals(x_batch, *prior, q_scale_tril)

    def loss(self, x_batch: Tensor, y_batch: Tensor, step: int, generators: draws.Generators) -> Tensor:
        q_scale_tril = self.q_scale_tril  # once: the moments' and the KL's gradients summed in it, not twice formed
        mean, variance = self.batch_moments(x_batch, q_scale_tril)
        expected = self.likelihood.expected_log_prob(y_batch, mean, variance, generators).sum(-1)
        return -(self.config.n_train / y_batch.shape[-1] * expected - self.kl_divergence(q_scale_tril))


def _identity(tensor: Tensor) -> tuple:
    """What changes whenever a tensor's values may have: its storage, version counter (bumped by every
    in-place write, ``copy_`` and ``load_state_dict`` included), device, dtype and shape."""
    return (tensor.data_ptr(), tensor._version, tensor.device, tensor.dtype, tuple(tensor.shape))
