"""AutoGP: a sparse GP with a mixture q(u), Monte Carlo expectations and a leave-one-out objective
(Krauth, Bonilla, Cutajar and Filippone, 2017).

Where the authors' MNIST code (ebonilla/AutoGP: experiments/mnist.py, autogp/gaussian_process.py,
autogp/kernels/radial_basis.py, autogp/datasets/mnist.py) differs from what we first wrote, each
difference is an option; its default is the paper's text where it speaks, the code where it is silent:

* ``latent_priors``: paper eq. 4-7, one kernel kappa_j and inducing inputs Z_j per latent process;
  code: a list of 10 kernels (mnist.py:34) and Z tiled to one copy per latent, each trained on its own
  (gaussian_process.py:50-54, 85). Default ``per_latent`` (paper and code); ``shared``: one kernel
  and one Z for every latent, ours before. With one latent (Q = 1) the two are the same model.
* ``initial_covariance``: paper appendix D.1, "initialized the posterior mean to a zero vector, and
  the posterior covariances to identity matrices"; code: m = 0 and a raw Cholesky of zeros with an
  exponentiated diagonal, S = I (gaussian_process.py:67-84). Default ``identity`` (paper and code);
  ``prior``: S = K_ZZ, q(u) = p(u) at the start, ours before. m = 0 either way.
* ``white_noise``: the paper is silent; the code's RBF adds 0.01 (radial_basis.py:11, 24, 44; the
  arc-cosine 1e-4, arc_cosine.py:10) to K_ZZ (a kernel called with one argument) and to k(x, x) (its
  diagonal), not to K_Zx: p(u) = N(0, K_ZZ + w I) and sigma^2 (eq. 12) starts from k(x, x) + w, in the
  training marginals and the predictions alike. Default 0.01 (the code); 0 was ours before.
* Per-pixel standardisation is a data-stage option (``standardize_inputs`` of a data set,
  ``gpstudy.data.split``): the code standardises every pixel with the training set's mean and
  standard deviation (datasets/mnist.py:25-43, 90-95); the paper reports MNIST "without ... doing any
  kind of pre-processing of the data" (section 7.3). Default off (the paper's words).
"""

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from gpstudy import generators as draws
from gpstudy.gaussian import cross_entropy, entropy, log_density
from gpstudy.kernels import Kernel
from gpstudy.likelihoods import Likelihood
from gpstudy.linalg import (
    add_diagonal,
    cholesky,
    inverse_positive,
    jittered_scale_tril,
    positive,
    raw_of_scale_tril,
    scale_tril,
)
from gpstudy.methods.base import Method, MethodConfig
from gpstudy.methods.inducing import kmeans_centres
from gpstudy.methods.problem import Problem


def is_loo_step(step: int, variational_phase: int, loo_phase: int) -> bool:
    """Whether iteration ``step`` (1-based) is in a leave-one-out phase: each cycle runs
    ``variational_phase`` ELBO iterations, then ``loo_phase`` LOO iterations (Algorithm 1)."""
    return (step - 1) % (variational_phase + loo_phase) >= variational_phase


def sample_log_prob(
    likelihood: Likelihood, y: Tensor, mean: Tensor, var: Tensor, samples: int, generators: draws.Generators
) -> Tensor:
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


def expected_log_prob(
    likelihood: Likelihood,
    y: Tensor,
    weights: Tensor,
    mean: Tensor,
    var: Tensor,
    samples: int,
    generators: draws.Generators,
) -> Tensor:
    """sum_k pi_k (1/S) sum_s log p(y_n | f_n^(k,s)) ``[*batch, n]`` (eq. 15); ``weights`` pi ``[*batch, K]``,
    the rest as ``sample_log_prob``."""
    log_p = sample_log_prob(likelihood, y, mean, var, samples, generators)
    return (weights.unsqueeze(-1) * log_p.mean(-2)).sum(-2)


def leave_one_out(
    likelihood: Likelihood,
    y: Tensor,
    weights: Tensor,
    mean: Tensor,
    var: Tensor,
    samples: int,
    generators: draws.Generators,
) -> Tensor:
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


def give_each_latent_its_kernel(kernel: Kernel, batch_dims: int, latents: int) -> None:
    """Give ``kernel`` one set of hyperparameters per latent function, in place: every parameter
    ``[*batch, ...]`` (``batch_dims`` split dimensions) becomes ``[*batch, Q, ...]``, each latent starting at
    the kernel's values (the authors' code builds Q equal kernels); its inputs then broadcast over
    ``[*batch, Q, n, D]``. In place, so that whoever reports the kernel reports the trained one.

    Raises:
        ValueError: the kernel already has a latent dimension (given to another AutoGP before).
    """
    if kernel.variance.dim() != batch_dims:
        raise ValueError(
            f"the kernel's variance has shape {tuple(kernel.variance.shape)}, not the {batch_dims} split "
            "dimension(s) of the data: it already has one set of hyperparameters per latent"
        )
    for module in kernel.modules():
        for name, parameter in list(module.named_parameters(recurse=False)):
            value = parameter.detach().unsqueeze(batch_dims)
            value = value.expand(*value.shape[:batch_dims], latents, *value.shape[batch_dims + 1 :]).clone()
            setattr(module, name, nn.Parameter(value, requires_grad=parameter.requires_grad))


def to_likelihood_layout(latent: Tensor) -> Tensor:
    """``[..., Q, n]`` to the likelihood's ``[..., n]`` (Q = 1) or ``[..., n, Q]``."""
    return latent.squeeze(-2) if latent.shape[-2] == 1 else latent.mT


class AutoGP(Method):
    """AutoGP: q(u) = sum_k pi_k prod_j N(u_j; m_kj, S_kj) (eq. 9), u_j = f_j(Z_j), not whitened.

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
    The LOO objective has no KL term: a LOO phase moves Z and the kernel away from q(u) and raises the KL,
    which the next ELBO phase pays back (``benchmarks/autogp_phases.py``; docs/classification.md).

    Z starts at k-means centres of the training inputs, pi uniform, m = 0; kernel and likelihood are
    trained in both phases with ``config.online_hyperparameters`` (as AutoGP does), else only Z in the LOO
    phase. Where the authors' MNIST code differs, each difference is an option (the module's docstring).

    The Q = ``likelihood.latent_dim`` latent functions (C for a softmax) have their own q_k(u_j) either way.
    With ``per_latent`` (and Q > 1) the kernel's hyperparameters get a latent dimension in place
    (``give_each_latent_its_kernel``): lengthscales ``[*batch, Q, D]``, Z ``[*batch, Q, M, D]``; with
    ``shared`` Z is ``[*batch, M, D]``. Internally the prior's factors carry a group axis G (Q or 1):
    L_Z ``[*batch, G, M, M]``.
    """

    name = "autogp"
    display_name = "AutoGP"
    options_schema = {
        "components": {"type": "integer", "minimum": 1, "description": "K, Gaussians in the mixture q(u)"},
        "covariance": {"enum": ["full", "diagonal"], "description": "the covariances S_kj of q(u)"},
        "samples": {
            "type": "integer",
            "minimum": 1,
            "description": "S, Monte Carlo samples per point, component and latent (ELBO and LOO)",
        },
        "variational_phase": {
            "type": "integer",
            "minimum": 1,
            "description": "iterations of each ELBO phase (paper: 100 epochs)",
        },
        "loo_phase": {
            "type": "integer",
            "minimum": 0,
            "description": "iterations of each leave-one-out phase after it (0: no LOO)",
        },
        "online_hyperparameters": {"type": "boolean", "description": "learn kernel and likelihood parameters"},
        "latent_priors": {
            "enum": ["per_latent", "shared"],
            "description": "per_latent: each latent function its own kernel and inducing inputs "
            "(paper eq. 4, authors' code) | shared: one kernel and one Z for all",
        },
        "initial_covariance": {
            "enum": ["identity", "prior"],
            "description": "S_kj at the start, m = 0 either way: identity (paper appendix D.1, "
            "authors' code) | prior (K_ZZ: q(u) = p(u))",
        },
        "white_noise": {
            "type": "number",
            "minimum": 0,
            "description": "w added to K_ZZ and k(x, x), not K_Zx (the authors' kernels: RBF 0.01, arc-cosine 1e-4)",
        },
    }

    @classmethod
    def supported_likelihoods(cls, options: Mapping[str, Any]) -> tuple[str, ...]:
        # any log_prob, by Monte Carlo; not the robust-max, whose log density is flat in f: reparameterized
        # samples of it give no gradient
        return ("gaussian", "bernoulli", "softmax")

    def __init__(self, problem: Problem, config: MethodConfig):
        super().__init__(problem, config)
        latents = self.likelihood.latent_dim
        self.per_latent = config.latent_priors == "per_latent" and latents > 1  # Q > 1 kernels and Zs
        inducing_inputs = kmeans_centres(problem.x_train, config.M, problem.generators)  # [*batch, M, D]
        batch_shape = inducing_inputs.shape[:-2]
        if self.per_latent:
            give_each_latent_its_kernel(self.kernel, len(batch_shape), latents)
            inducing_inputs = inducing_inputs.unsqueeze(-3).expand(*batch_shape, latents, -1, -1).clone()
        self.learn_hyperparameters(config.online_hyperparameters)
        self.inducing_inputs = nn.Parameter(inducing_inputs)  # Z, [*batch, M, D] (per latent [*batch, Q, M, D])
        size = inducing_inputs.shape[-2]
        shape = (*batch_shape, config.components, latents, size)  # K, Q, M
        if config.initial_covariance == "prior":
            with torch.no_grad():
                chol = self.prior_scale_tril().unsqueeze(-4)  # q_k(u_j) = p(u_j), [*batch, 1, G, M, M]
        else:
            chol = torch.eye(size, dtype=inducing_inputs.dtype, device=inducing_inputs.device)  # S = I
        chol = chol.expand(*shape, size)
        if config.covariance == "full":
            raw_scale = raw_of_scale_tril(chol)
        else:
            raw_scale = inverse_positive(chol.diagonal(dim1=-2, dim2=-1))
        self.raw_weights = nn.Parameter(
            inducing_inputs.new_zeros(shape[:-2]),  # pi = softmax, [*batch, K]
            requires_grad=config.components > 1,
        )  # K = 1: pi = 1, nothing to train
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

    def with_group_axis(self, prior: Tensor, dim: int) -> Tensor:
        """A tensor of the prior with its group axis G at ``dim``: per latent it has one (Q), shared none (1)."""
        return prior if self.per_latent else prior.unsqueeze(dim)

    def prior_scale_tril(self) -> Tensor:
        """L_Z ``[*batch, G, M, M]``, L_Z L_Z^T = K_ZZ + w I + jitter: the factor of p(u_j) (eq. 4), w the
        ``white_noise``."""
        prior = add_diagonal(self.kernel(self.inducing_inputs), self.config.white_noise)
        return self.with_group_axis(jittered_scale_tril(prior), -3)

    def marginals(self, x: Tensor, detach_q: bool = False, chol_zz: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Means b and variances sigma^2 ``[*batch, K, Q, n]`` of q_k(f_j(x)) (eqs. 11-12), q detached if asked;
        ``chol_zz``: ``prior_scale_tril()`` when the caller has it.

        With a = K_ZZ^-1 K_Zx = L^-T P, P = L^-1 K_Zx: b = a^T m, sigma^2 = k_xx + w - |P|^2 + a^T S a.
        """
        chol_zz = self.prior_scale_tril() if chol_zz is None else chol_zz
        inputs = x.unsqueeze(-3) if self.per_latent else x  # [*batch, 1, n, D]: for every latent's kernel
        cross = self.with_group_axis(self.kernel(self.inducing_inputs, inputs), -3)  # K_Zx, [*batch, G, M, n]
        projection = torch.linalg.solve_triangular(chol_zz, cross, upper=False)
        a = torch.linalg.solve_triangular(chol_zz.mT, projection, upper=True)  # K_ZZ^-1 K_Zx, [*batch, G, M, n]
        a = a.unsqueeze(-4)  # [*batch, 1, G, M, n]: for every component
        q_mean, raw_scale = self.q_mean, self.raw_q_scale
        if detach_q:
            q_mean, raw_scale = q_mean.detach(), raw_scale.detach()
        mean = (q_mean.unsqueeze(-2) @ a).squeeze(-2)
        if self.config.covariance == "full":
            quadratic = (scale_tril(raw_scale).mT @ a).square().sum(-2)  # |L^T a|^2
        else:
            quadratic = (positive(raw_scale).square().unsqueeze(-1) * a.square()).sum(-2)
        prior_var = self.with_group_axis(self.kernel(inputs, diag=True), -2) + self.config.white_noise  # [*batch, G, n]
        conditional = prior_var - projection.square().sum(-2)  # [K~]_nn
        return mean, conditional.unsqueeze(-3) + quadratic

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
        chol_zz = (self.prior_scale_tril() if chol_zz is None else chol_zz).unsqueeze(-4)  # [*batch, 1, G, M, M]
        scale, weights = self.q_scale_tril, self.weights
        cross = cross_entropy(self.q_mean, scale, torch.zeros_like(self.q_mean), chol_zz)  # [*batch, K, Q]
        cross = (weights.unsqueeze(-1) * cross).sum((-2, -1))
        if self.config.components == 1:
            return cross - entropy(scale).sum((-2, -1))
        return cross - mixture_entropy_bound(weights, self.q_mean, scale)

    def loss(self, x_batch: Tensor, y_batch: Tensor, step: int, generators: draws.Generators) -> Tensor:
        loo = is_loo_step(step, self.config.variational_phase, self.config.loo_phase)
        chol_zz = self.prior_scale_tril()  # once per step, for the marginals and the KL
        mean, var = self.marginals(x_batch, detach_q=loo, chol_zz=chol_zz)
        data_scale = self.config.n_train / y_batch.shape[-1]  # N/n: both objectives on the full data's scale
        if loo:
            return data_scale * leave_one_out(
                self.likelihood, y_batch, self.weights.detach(), mean, var, self.config.samples, generators
            ).sum(-1)
        expected = expected_log_prob(
            self.likelihood, y_batch, self.weights, mean, var, self.config.samples, generators
        ).sum(-1)
        return -(data_scale * expected - self.kl_divergence(chol_zz))
