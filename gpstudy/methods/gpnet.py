"""GPNet: inference networks trained by stochastic functional mirror descent (Shi et al. 2019)."""

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from gpstudy import generators as draws
from gpstudy.gaussian import kl_divergence_of_covariances, tempered_prior, tempered_target
from gpstudy.likelihoods import GaussianLikelihood, Likelihood
from gpstudy.methods.base import InferenceNetworkMethod, MethodConfig, function_space_elbo, gaussian_likelihood
from gpstudy.methods.problem import Problem

BETA_SCHEDULES = {  # the time in beta_t = beta0 / (1 + xi sqrt(time)) at iteration t = 1, 2, ...
    "sqrt_t": lambda step: step,  # the paper (section 3.3)
    "sqrt_t_minus_1": lambda step: step - 1,  # the authors' code: beta_1 = beta0
}


def beta_schedule(step: int | Tensor, beta0: float, xi: float, schedule: str) -> float | Tensor:
    """beta_t = beta0 / (1 + xi sqrt(t)) (section 3.3), or with sqrt(t - 1) (the authors' code), t = 1, 2, ...;
    for a float64 tensor t, a tensor of the same value (the same floating-point operations)."""
    time = BETA_SCHEDULES[schedule](step)
    if isinstance(time, Tensor):
        return torch.full_like(time, beta0) / (time.sqrt() * xi + 1.0)
    return beta0 / (1.0 + xi * math.sqrt(time))


@dataclass(frozen=True)
class MirrorStep:
    """What an objective of iteration t sees besides q_gamma: the batch, the prior, q_t, beta_t and N."""

    y_batch: Tensor  # [*batch, n]
    prior_cov: Tensor  # K over Z = [X_B; X_M], detached
    previous_mean: Tensor  # q_t over Z, detached
    previous_cov: Tensor
    beta: float | Tensor  # beta_t: a float, or a 0-dim tensor on the device (a training step's)
    by_previous: bool  # whether beta_t <= 1/2 (the tempered prior's side, known on the host)
    n_train: int  # N
    generators: draws.Generators  # the draws of a Monte Carlo expected log-likelihood


def conjugate_loss(likelihood: GaussianLikelihood, mean: Tensor, cov: Tensor, step: MirrorStep) -> Tensor:
    """KL[q_gamma(f_M) || q^_{t+1}(f_M)] (eq. 11) with the closed-form target of eq. 10, from the two covariances
    with a closed-form backward (``kl_divergence_of_covariances``: 2 factors and 2 triangular solves a step, where
    autograd through the factors made 4 solves: each a latency-bound call on a GPU).

    Args:
        likelihood: the Gaussian likelihood (its noise enters the target, without gradient).
        mean, cov: q_gamma at the M measurement points X_M only (the KL's support), trained.
        step: the iteration's batch ``[n]``, prior and q_t over Z, beta_t and N (its generators unused:
            the target is closed form).
    """
    noise = likelihood.noise_variance.detach()
    target_mean, target_cov = tempered_target(
        step.prior_cov,
        step.previous_mean,
        step.previous_cov,
        step.y_batch,
        noise,
        step.beta,
        step.n_train,
        step.by_previous,
    )  # q^_{t+1}(f_M), eq. 10
    return kl_divergence_of_covariances(mean, cov, target_mean, target_cov)


def elbo_loss(likelihood: Likelihood, mean: Tensor, cov: Tensor, step: MirrorStep) -> Tensor:
    """-L_t (section 3.2) for any likelihood, up to a constant in gamma, over Z = [X_B; X_M].

    L_t = beta (N/n) sum_B E_q log p(y_b | f_b) - beta KL[q || p] - (1 - beta) KL[q || q_t]
        = beta (N/n) sum_B E_q log p(y_b | f_b) - KL[q || p^beta q_t^(1-beta)] + const,
    the tempered prior p^beta q_t^(1-beta) being the one of eq. 8-9. Arguments as ``conjugate_loss``,
    except that ``mean`` and ``cov`` are q_gamma over all of Z and that the likelihood may have C > 1
    latents: then q and q_t are ``[*batch, C, z]`` and ``[*batch, C, z, z]``, K ``[*batch, 1, z, z]``
    shared by the classes, the tempered prior and the KL are per class (the KL summed over classes) and
    the expected log-likelihood draws its Monte Carlo samples from ``step.generators``
    (``function_space_elbo``).
    """
    tempered_mean, tempered_cov = tempered_prior(
        step.prior_cov, step.previous_mean, step.previous_cov, step.beta, step.by_previous
    )
    data_scale = step.beta * step.n_train / step.y_batch.shape[-1]
    return -function_space_elbo(
        likelihood, step.y_batch, mean, cov, tempered_mean, tempered_cov, data_scale, step.generators
    )


OBJECTIVES = {  # objective: (loss, whether q_gamma is trained at X_B too or at X_M only)
    "conjugate": (conjugate_loss, False),  # Gaussian likelihood: match the closed-form target (eq. 11)
    "elbo": (elbo_loss, True),  # any likelihood: maximize L_t (section 3.2)
}


class GPNet(InferenceNetworkMethod):
    """GPNet (Algorithm 1) with an RFE network, or for classification (section 5.3) an NTK network of
    C latents under ``objective="elbo"``.

    Each iteration draws X_M from c(x), sets Z = [X_B; X_M] and moves q_gamma towards the bootstrapped
    mirror-descent update q^_{t+1} proportional to p(y_B | f)^(N beta / n) p(f)^beta q_t(f)^(1-beta)
    (eq. 7). q_t = q_{gamma_t} is the network at the start of the iteration: its output at Z,
    computed without gradient. This is what the paper's frozen copy computes, since the copy
    equals the live network whenever a loss is evaluated; so no copy is kept, the state dict holds
    the live network only, and a checkpoint resumes exactly. With ``online_hyperparameters`` the
    loss also carries minus the minibatch bound
    sum_B E_{q_t} log p(y_b | f_b) - KL[q_t(f_B) || p(f_B)] (section 3.3),
    whose gradient reaches only the kernel and noise (with ``objective="elbo"`` the noise also gets
    the gradient of L_t's expected log-likelihood; the prior and q_t never get any). Prediction: the
    network's mean, and its marginal variance plus sigma^2 (several latents: the likelihood's
    predictive of the network's marginals ``[*batch, n, C]``).
    """

    name = "gpnet"
    display_name = "GPNet"
    options_schema = {
        **InferenceNetworkMethod.options_schema,
        "beta0": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "description": "beta_t's start"},
        "xi": {"type": "number", "minimum": 0, "description": "beta_t's decay"},
        "beta_schedule": {"enum": sorted(BETA_SCHEDULES), "description": "sqrt_t (paper) | sqrt_t_minus_1 (code)"},
        "objective": {"enum": sorted(OBJECTIVES), "description": "conjugate (eq. 8-11) | elbo (section 3.2)"},
    }

    def __init__(self, problem: Problem, config: MethodConfig):
        if config.objective not in OBJECTIVES:
            raise ValueError(f"unknown GPNet objective {config.objective!r}; known: {sorted(OBJECTIVES)}")
        if config.objective == "conjugate":  # its closed-form target holds the noise variance
            gaussian_likelihood(problem.likelihood, f"method {self.name!r} with objective 'conjugate'")
        super().__init__(problem, config)
        # t on the device, so that no Python number new at each step reaches an operator (a CUDA graph of the
        # step would keep the first one): advanced by a constant from one step to the next (_device_step)
        self.register_buffer("_step", torch.zeros((), dtype=torch.float64), persistent=False)
        self._step_held: int | None = None  # the t that _step holds

    def _device_step(self, step: int) -> Tensor:
        """t as a 0-dim float64 tensor on the method's device: the one held for the same t again (a checked
        rerun), advanced by 1 in place for the next t, written only where t jumps (the first step, a resume)."""
        if self._step_held is not None and step == self._step_held + 1:
            self._step.add_(1)
        elif step != self._step_held:
            self._step.fill_(step)
        self._step_held = step
        return self._step

    @classmethod
    def supported_likelihoods(cls, options: Mapping[str, Any]) -> tuple[str, ...]:
        """The conjugate objective needs the Gaussian likelihood; L_t takes any of one latent, and those
        of several (softmax) where the network outputs several."""
        return ("gaussian",) if options["objective"] == "conjugate" else cls.network_likelihoods(options)

    def loss(self, x_batch: Tensor, y_batch: Tensor, step: int, generators: draws.Generators) -> Tensor:
        inputs = self.measurement_set(x_batch, generators)  # Z = [X_B; X_M]
        n = y_batch.shape[-1]
        schedule = (self.config.beta0, self.config.xi, self.config.beta_schedule)
        beta_on_host = beta_schedule(step, *schedule)  # only for the side of the tempered prior
        # compiled, t is a symbol of the graph already; eager, beta_t is computed on the device from t there
        beta = beta_on_host if torch.compiler.is_compiling() else beta_schedule(self._device_step(step), *schedule)
        objective, trains_batch = OBJECTIVES[self.config.objective]
        # q_gamma where the loss differentiates it; its values there are also q_t's (same parameters)
        trained_from = 0 if trains_batch else n
        # and, without gradient, at the points before them: q_t's head (one network pass builds both)
        (mean, factor), (head_mean, head_factor) = self.network.forward_and_held(
            inputs[..., trained_from:, :], inputs[..., :trained_from, :]
        )
        cov = self.network.covariance(factor)
        with torch.no_grad():  # q_t(f_Z): the network before this step; no gradient into the target
            previous_mean = torch.cat([head_mean, mean.detach()], dim=-1)
            previous_cov = self.network.stacked_covariance(head_factor, factor.detach(), cov.detach())
        with torch.no_grad():  # K_ZZ: the mirror step's prior, no gradient (the bound's K_BB below has its own)
            prior_cov = self.prior_covariance(inputs)
        step_data = MirrorStep(
            y_batch,
            prior_cov,
            previous_mean,
            previous_cov,
            beta,
            beta_on_host <= 0.5,
            self.config.n_train,
            generators,
        )
        loss = objective(self.likelihood, mean, cov, step_data)
        if self.config.online_hyperparameters:  # minibatch bound with q_t fixed (section 3.3)
            bound = function_space_elbo(
                self.likelihood,
                y_batch,
                previous_mean[..., :n],
                previous_cov[..., :n, :n],
                torch.zeros_like(previous_mean[..., :n]),
                self.prior_covariance(inputs[..., :n, :]),  # K_BB: its gradient not spread over all of K_ZZ
                generators=generators,
            )
            loss = loss - bound
        return loss
