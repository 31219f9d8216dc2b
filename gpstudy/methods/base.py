"""The interface every inference method implements, and what the network-based methods share."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from gpstudy import generators as draws
from gpstudy.gaussian import kl_divergence_and_variances, kl_divergence_of_covariances
from gpstudy.likelihoods import LIKELIHOODS, GaussianLikelihood, Likelihood
from gpstudy.linalg import add_jitter_
from gpstudy.methods.measurement import SAMPLERS, build_measurement_sampler
from gpstudy.methods.problem import Problem
from gpstudy.nets import NETWORKS
from gpstudy.numerics import PREDICT_CHUNK

# training.torch_compile's lowest torch: before it, compiling GPNet's or FBNN's training fails (inductor's
# backward at 2.4.0 and 2.6.0, dynamo at 2.9.1, 2.11.0 and 2.12.1: docs/installation.md); a method proven to
# compile on an older torch says None
COMPILE_NEEDS_TORCH = "2.13"


@dataclass(frozen=True)
class MethodConfig:
    """What a method needs beyond data, kernel and likelihood: M, N and its own options, read as
    attributes (``config.beta0``); the options are those of the method's ``options_schema``."""

    M: int  # inducing (SVGP) or measurement (GPNet, FBNN) points
    n_train: int  # N, the training-set size
    options: Mapping[str, Any] = field(default_factory=dict)
    feature_dtype: torch.dtype | None = None  # the network's feature products (training.dtype); None: the parameters'

    def __getattr__(self, name: str) -> Any:
        if name == "options":  # not yet set (copy, unpickling)
            raise AttributeError(name)
        try:
            return self.options[name]
        except KeyError:
            raise AttributeError(f"the method's options have no {name!r}; they are {sorted(self.options)}") from None


class Method(nn.Module):
    """An inference method: a loss to minimize per iteration and a predictive distribution.

    ``adam_parameters()`` is what one Adam trains (by default every parameter with ``requires_grad``;
    frozen tensors have ``requires_grad=False``). A subclass implements ``loss`` and ``predict_f``.

    Splits in a batch: with S generators (one per split) every tensor has a leading split dimension
    (data ``[S, N, D]``, kernel and likelihood built with ``batch_shape=(S,)``), the loss is ``[S]``
    and split s's numbers depend on split s alone. With one generator nothing is batched.

    Args:
        problem: the training data, kernel, likelihood and initialization randomness (``Problem``).
        config: the method's settings.
    """

    name: ClassVar[str]
    display_name: ClassVar[str]  # its name in tables, figures and claims (gpstudy.report.labels)
    options_schema: ClassVar[dict[str, dict]] = {}  # the method's own options: name -> JSON schema
    predict_chunk: int = PREDICT_CHUNK  # points predicted at a time (``training.run.predict``)
    compile_needs_torch: ClassVar[str | None] = COMPILE_NEEDS_TORCH  # torch_compile's lowest torch; None: any

    @classmethod
    def supported_likelihoods(cls, options: Mapping[str, Any]) -> tuple[str, ...]:
        """The likelihoods (names in ``gpstudy.likelihoods.LIKELIHOODS``) the method trains with."""
        return ("gaussian",)

    @classmethod
    def check_options(cls, options: Mapping[str, Any], likelihood: str) -> None:
        """Raise ``ValueError`` where ``options``, each valid by ``options_schema``, do not fit together or
        with ``likelihood`` (a name in ``LIKELIHOODS``) for a reason worth naming; nothing by default."""

    @classmethod
    def kernel_problems(cls, options: Mapping[str, Any], kernel: str, kernel_options: Mapping[str, Any]) -> list[str]:
        """What the method with ``options`` needs of kernel ``kernel`` (a name in ``gpstudy.kernels.KERNELS``)
        built with ``kernel_options`` and does not get, each naming both sides; none by default."""
        return []

    def __init__(self, problem: Problem, config: MethodConfig):
        super().__init__()
        if config.n_train != problem.x_train.shape[-2]:
            raise ValueError(f"config.n_train = {config.n_train} but x_train has {problem.x_train.shape[-2]} rows")
        self.kernel = problem.kernel
        self.likelihood = problem.likelihood
        self.config = config

    @property
    def effective_M(self) -> int:
        """The points the method actually uses for ``config.M``: fewer where it cannot place more (inducing
        points or k-means centres of a smaller training set); ``config.M`` by default."""
        return self.config.M

    def loss(self, x_batch: Tensor, y_batch: Tensor, step: int, generators: draws.Generators) -> Tensor:
        """The objective ``[*batch]`` of iteration ``step`` (1-based) on a batch ``[*batch, n, D]``, ``[*batch, n]``.

        All randomness (measurement points, samples) comes from ``generators``.
        """
        raise NotImplementedError

    def learn_hyperparameters(self, online: bool) -> None:
        """Train the kernel and likelihood (``online``) with the method, or keep them where they start."""
        self.kernel.requires_grad_(online)
        self.likelihood.requires_grad_(online)

    def adam_parameters(self) -> list[nn.Parameter]:
        """The parameters one Adam trains: by default every parameter with ``requires_grad``."""
        return [p for p in self.parameters() if p.requires_grad]

    def natural_update(self) -> Callable[[], None] | None:
        """An update of parameters that Adam does not train, computed from the gradients the loss left before
        Adam steps (within the step's one host check, ``gpstudy.training.optim.optimizer_step``); the function
        returned applies it after Adam's step. None (the default): no such update."""
        return None

    def predict_f(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Mean ``[*batch, n]`` and variance ``[*batch, n]`` of the latent f at ``x`` ``[*batch, n, D]``; for a
        likelihood of C > 1 latents (softmax) ``[*batch, n, C]``, its layout."""
        raise NotImplementedError

    def predict(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Mean ``[*batch, n]`` and variance ``[*batch, n]`` of y at ``x`` ``[*batch, n, D]``, noise included."""
        return self.likelihood.predictive(*self.predict_f(x))


def gaussian_likelihood(likelihood: Likelihood, needed_by: str) -> GaussianLikelihood:
    """``likelihood``, checked to be the Gaussian one that ``needed_by`` (e.g. "method 'exact'") needs.

    Raises:
        ValueError: naming both, for any other likelihood.
    """
    if not isinstance(likelihood, GaussianLikelihood):
        raise ValueError(
            f"{needed_by} needs the gaussian likelihood (its noise variance), not {type(likelihood).__name__}"
        )
    return likelihood


def function_space_kl(mean_q: Tensor, cov_q: Tensor, mean_p: Tensor, cov_p: Tensor, latent_dim: int) -> Tensor:
    """KL[q(f_Z) || p(f_Z)] ``[*batch]``; for C = ``latent_dim`` > 1 independent latents (``[*batch, C, z]``
    means, ``[*batch, C, z, z]`` covariances, or ``[*batch, 1, z, z]`` for one shared by the classes) the
    sum of the C per-class KLs."""
    kl = kl_divergence_of_covariances(mean_q, cov_q, mean_p, cov_p)
    return kl.sum(-1) if latent_dim > 1 else kl


def function_space_elbo(
    likelihood: Likelihood,
    y_batch: Tensor,
    mean: Tensor,
    cov: Tensor,
    prior_mean: Tensor,
    prior_cov: Tensor,
    data_scale: float = 1.0,
    generators: draws.Generators | None = None,
) -> Tensor:
    """data_scale * sum_B E_q log p(y_b | f_b) - KL[q(f_Z) || N(prior_mean, prior_cov)].

    The batch's n points come first in Z. Serves FBNN's objective (Sun et al. 2019), GPNet's online
    hyperparameter bound (section 3.3) and, with the tempered prior, GPNet's L_t (section 3.2).
    With C = ``likelihood.latent_dim`` > 1 latents (a softmax), q and the prior carry the class in front
    of the points, independent classes: the KL is the sum of the per-class KLs and the likelihood
    gets the batch's marginals in its layout ``[*batch, n, C]``.

    Args:
        likelihood: p(y | f).
        y_batch: ``[*batch, n]``.
        mean: q's mean over Z ``[*batch, z]`` (C latents: ``[*batch, C, z]``).
        cov: q's covariance over Z ``[*batch, z, z]`` (``[*batch, C, z, z]``).
        prior_mean: ``[*batch, z]`` (``[*batch, C, z]``).
        prior_cov: ``[*batch, z, z]`` (``[*batch, C, z, z]``, or ``[*batch, 1, z, z]`` shared by the classes).
        data_scale: weight of the expected log-likelihood.
        generators: the draws of a Monte Carlo expected log-likelihood (ignored by closed forms).
    """
    n = y_batch.shape[-1]
    kl, variances = kl_divergence_and_variances(mean, cov, prior_mean, prior_cov)  # q's variances: cov's diagonal
    mean_batch, variance = mean[..., :n], variances[..., :n]
    if likelihood.latent_dim > 1:  # [*batch, C, n] -> the likelihood's [*batch, n, C]; the classes' KLs summed
        mean_batch, variance, kl = mean_batch.mT, variance.mT, kl.sum(-1)
    expected = likelihood.expected_log_prob(y_batch, mean_batch, variance, generators).sum(-1)
    return data_scale * expected - kl


class InferenceNetworkMethod(Method):
    """A method that trains an inference network q_gamma(f) at Z = [X_B; X_M] (GPNet, FBNN).

    The network (``options.network``, built by ``InferenceNetwork.build`` from ``hidden_units``,
    ``live_variance`` and its own ``network_options``) is initialized from the kernel (lengthscales,
    variance) and outputs the likelihood's ``latent_dim`` latent functions; the kernel and noise are
    trained only if ``config.online_hyperparameters`` (``requires_grad`` is set accordingly), by
    whatever gradient the subclass's loss gives them. With C > 1 latents the network's values over Z
    are ``[*batch, C, z]`` and the prior covariance K_ZZ ``[*batch, 1, z, z]`` is shared by the classes
    (``prior_covariance``); predictions are ``[*batch, n, C]``.
    """

    options_schema = {
        "network": {"enum": sorted(NETWORKS), "description": "the inference network"},
        "network_options": {
            "type": "object",
            "description": "the network's own options (its options_schema; ntk: image_shape, "
            "filters, strides, dense_units, output_tanh)",
        },
        "hidden_units": {
            "type": "integer",
            "minimum": 1,
            "description": "RFE: hidden units (frequencies) H; NTK: each head's hidden units K",
        },
        "live_variance": {
            "type": "boolean",
            "description": "RFE: s2 follows the kernel's variance (else fixed at the prior's)",
        },
        "measurement": {"enum": sorted(SAMPLERS), "description": "the measurement-point sampler c(x)"},
        "measurement_noise": {
            "type": "number",
            "exclusiveMinimum": 0,
            "description": "noisy c(x): noise std in lengthscales (appendix B.2: 1/sqrt 2)",
        },
        "box": {
            "description": "box c(x): [[low, ...], [high, ...]] in the data's units",
            "oneOf": [
                {"type": "null"},
                {
                    "type": "array",
                    "minItems": 2,
                    "maxItems": 2,
                    "items": {"type": "array", "items": {"type": "number"}, "minItems": 1},
                },
            ],
        },
        "online_hyperparameters": {"type": "boolean", "description": "learn kernel and noise during training"},
    }

    def __init__(self, problem: Problem, config: MethodConfig):
        super().__init__(problem, config)
        self.learn_hyperparameters(config.online_hyperparameters)
        self.latent_dim = self.likelihood.latent_dim
        self.network = NETWORKS[config.network].build(
            self.kernel,
            problem.generators,
            latent_dim=self.latent_dim,
            hidden_units=config.hidden_units,
            live_variance=config.live_variance,
            options=config.network_options,
            feature_dtype=config.feature_dtype,
        )
        self.measurement_sampler = build_measurement_sampler(
            config.measurement, problem.x_train, self.kernel.lengthscale.detach() * config.measurement_noise, config.box
        )

    @classmethod
    def network_likelihoods(cls, options: Mapping[str, Any]) -> tuple[str, ...]:
        """The likelihoods the chosen network can serve: those of one latent, and those of several (a
        softmax) where the network outputs several."""
        several = NETWORKS[options["network"]].several_latents
        return tuple(name for name, likelihood in LIKELIHOODS.items() if several or not likelihood.several_latents)

    @classmethod
    def check_options(cls, options: Mapping[str, Any], likelihood: str) -> None:
        """``network_options`` must fit the network's ``options_schema``; a likelihood of several latents
        needs a network that outputs several."""
        network = NETWORKS[options["network"]]
        network.check_options(options["network_options"])
        if LIKELIHOODS[likelihood].several_latents and not network.several_latents:
            several = ", ".join(name for name, net in NETWORKS.items() if net.several_latents)
            raise ValueError(
                f"network {network.name!r} outputs one latent function, but likelihood {likelihood!r} "
                f"has one per class; choose a network with several latents: {several}"
            )

    @classmethod
    def kernel_problems(cls, options: Mapping[str, Any], kernel: str, kernel_options: Mapping[str, Any]) -> list[str]:
        """What the chosen network needs of the kernel (``InferenceNetwork.kernel_problem``), with the
        networks that could start from this kernel instead."""
        network = NETWORKS[options["network"]]
        problem = network.kernel_problem(kernel, kernel_options, options["network_options"])
        if problem is None:
            return []
        others = [name for name, other in NETWORKS.items() if other.kernel_problem(kernel, kernel_options, {}) is None]
        instead = f" or network: {' | '.join(others)}" if others else ""
        return [f"method {cls.name!r} with network {network.name!r}: {problem}{instead}"]

    @property
    def predict_chunk(self) -> int:
        """Points predicted at a time: the network's bound (its memory per point)."""
        return self.network.predict_chunk

    @property
    def effective_M(self) -> int:
        """The measurement points drawn per iteration: fewer than ``config.M`` where c(x) draws distinct
        training inputs of a smaller training set."""
        return self.measurement_sampler.size(self.config.M)

    def measurement_set(self, x_batch: Tensor, generators: draws.Generators) -> Tensor:
        """Z = [X_B; X_M] ``[*batch, n + M, D]`` with X_M drawn from c(x)."""
        return torch.cat([x_batch, self.measurement_sampler(self.config.M, generators)], dim=-2)

    def prior_covariance(self, inputs: Tensor) -> Tensor:
        """K_ZZ + jitter ``[*batch, z, z]`` at ``inputs`` ``[*batch, z, D]``; with C > 1 latents
        ``[*batch, 1, z, z]``, one prior shared by (broadcast over) the classes."""
        cov = add_jitter_(self.kernel(inputs))
        return cov.unsqueeze(-3) if self.latent_dim > 1 else cov

    def predict_f(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The network's mean and marginal variance ``[*batch, n]``, C > 1 latents ``[*batch, n, C]``
        (chunk large ``x``: memory is ``[n, features]``)."""
        mean, var = self.network.marginals(x)
        return (mean.mT, var.mT) if self.latent_dim > 1 else (mean, var)
