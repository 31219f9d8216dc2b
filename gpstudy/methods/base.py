"""The interface every inference method implements, and what the network-based methods share."""

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor, nn

from gpstudy import generators as draws
from gpstudy.gaussian import kl_divergence_of_covariances
from gpstudy.kernels import Kernel
from gpstudy.likelihoods import GaussianLikelihood
from gpstudy.measurement import build_measurement_sampler
from gpstudy.nets import RFE


@dataclass(frozen=True)
class MethodConfig:
    """What a method needs beyond data, kernel and likelihood."""

    M: int  # inducing (SVGP) or measurement (GPNet, FBNN) points
    n_train: int  # N, the training-set size
    beta0: float = 1.0  # GPNet: beta_t = beta0 / (1 + xi sqrt(t-1))
    xi: float = 1.0  # GPNet: decay of beta_t
    hidden_units: int = 1000  # RFE frequencies H, 2H features (20 for Snelson)
    measurement: str = "noisy"  # c(x): "noisy" | "train" | "box"
    box: tuple | None = None  # (low, high) for "box", each [*batch, D] in standardized units
    online_hyperparameters: bool = False  # GPNet, FBNN: learn kernel and noise during training
    objective: str = "conjugate"  # GPNet: "conjugate" (eq. 8-11) or "elbo" (section 3.2, L_t)


class Method(nn.Module):
    """An inference method: a loss to minimize per iteration and a predictive distribution.

    ``parameters()`` holds exactly what one Adam should train; frozen tensors have
    ``requires_grad=False``. A subclass implements ``loss`` and ``predict_f``.

    Splits in a batch: with S generators (one per split) every tensor has a leading split dimension
    (data ``[S, N, D]``, kernel and likelihood built with ``batch_shape=(S,)``), the loss is ``[S]``
    and split s's numbers depend on split s alone. With one generator nothing is batched.

    Args:
        x_train: training inputs ``[*batch, N, D]``.
        y_train: training targets ``[*batch, N]``.
        kernel: the prior kernel, already initialized (pretrained or defaults).
        likelihood: the Gaussian likelihood, already initialized.
        config: the method's settings.
        generators: randomness of the initialization only (``gpstudy.generators``).
    """

    name: ClassVar[str]

    def __init__(
        self,
        x_train: Tensor,
        y_train: Tensor,
        kernel: Kernel,
        likelihood: GaussianLikelihood,
        config: MethodConfig,
        generators: draws.Generators,
    ):
        super().__init__()
        if config.n_train != x_train.shape[-2]:
            raise ValueError(f"config.n_train = {config.n_train} but x_train has {x_train.shape[-2]} rows")
        self.kernel = kernel
        self.likelihood = likelihood
        self.config = config

    def loss(self, x_batch: Tensor, y_batch: Tensor, step: int, generators: draws.Generators) -> Tensor:
        """The objective ``[*batch]`` of iteration ``step`` (1-based) on a batch ``[*batch, n, D]``, ``[*batch, n]``.

        All randomness (measurement points, samples) comes from ``generators``.
        """
        raise NotImplementedError

    def after_step(self, step: int) -> None:
        """Called after each optimizer step; nothing to do by default."""

    def predict_f(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Mean ``[*batch, n]`` and variance ``[*batch, n]`` of the latent f at ``x`` ``[*batch, n, D]``."""
        raise NotImplementedError

    def predict(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Mean ``[*batch, n]`` and variance ``[*batch, n]`` of y at ``x`` ``[*batch, n, D]``, noise included."""
        return self.likelihood.predictive(*self.predict_f(x))


def function_space_elbo(
    likelihood: GaussianLikelihood,
    y_batch: Tensor,
    mean: Tensor,
    cov: Tensor,
    prior_mean: Tensor,
    prior_cov: Tensor,
    data_scale: float = 1.0,
) -> Tensor:
    """data_scale * sum_B E_q log p(y_b | f_b) - KL[q(f_Z) || N(prior_mean, prior_cov)].

    The batch's n points come first in Z. Serves FBNN's objective (Sun et al. 2019), GPNet's online
    hyperparameter bound (section 3.3) and, with the tempered prior, GPNet's L_t (section 3.2).

    Args:
        likelihood: p(y | f).
        y_batch: ``[*batch, n]``.
        mean: q's mean over Z ``[*batch, z]``.
        cov: q's covariance over Z ``[*batch, z, z]``.
        prior_mean: ``[*batch, z]``.
        prior_cov: ``[*batch, z, z]``.
        data_scale: weight of the expected log-likelihood.
    """
    n = y_batch.shape[-1]
    variance = cov.diagonal(dim1=-2, dim2=-1)[..., :n]
    expected = likelihood.expected_log_prob(y_batch, mean[..., :n], variance).sum(-1)
    return data_scale * expected - kl_divergence_of_covariances(mean, cov, prior_mean, prior_cov)


class InferenceNetworkMethod(Method):
    """A method that trains an RFE network q_gamma(f) at Z = [X_B; X_M] (GPNet, FBNN).

    The network is initialized from the kernel (lengthscales, variance); the kernel and noise are
    trained only if ``config.online_hyperparameters`` (``requires_grad`` is set accordingly), by
    whatever gradient the subclass's loss gives them.
    """

    def __init__(
        self,
        x_train: Tensor,
        y_train: Tensor,
        kernel: Kernel,
        likelihood: GaussianLikelihood,
        config: MethodConfig,
        generators: draws.Generators,
    ):
        super().__init__(x_train, y_train, kernel, likelihood, config, generators)
        kernel.requires_grad_(config.online_hyperparameters)
        likelihood.requires_grad_(config.online_hyperparameters)
        lengthscale, variance = kernel.lengthscale.detach(), kernel.variance.detach()
        self.network = RFE(x_train.shape[-1], config.hidden_units, lengthscale, variance, generators)
        self.measurement_sampler = build_measurement_sampler(
            config.measurement, x_train, lengthscale, config.box
        )

    def measurement_set(self, x_batch: Tensor, generators: draws.Generators) -> Tensor:
        """Z = [X_B; X_M] ``[*batch, n + M, D]`` with X_M drawn from c(x)."""
        return torch.cat([x_batch, self.measurement_sampler(self.config.M, generators)], dim=-2)

    def predict_f(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The network's mean and marginal variance (chunk large ``x``: memory is ``[n, 2H]``)."""
        return self.network.marginals(x)
