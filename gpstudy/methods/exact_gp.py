"""Exact GP regression: the log marginal likelihood and the exact posterior."""

import torch
from torch import Tensor

from gpstudy import generators as draws
from gpstudy.gaussian import condition, log_density
from gpstudy.kernels import Kernel
from gpstudy.likelihoods import GaussianLikelihood
from gpstudy.linalg import add_diagonal, add_jitter, cholesky
from gpstudy.methods.base import Method, MethodConfig, gaussian_likelihood
from gpstudy.methods.problem import Problem


def marginal_covariance(x: Tensor, kernel: Kernel, likelihood: GaussianLikelihood) -> Tensor:
    """Cov[y] = K + sigma^2 I ``[*batch, n, n]`` at ``x`` ``[*batch, n, D]``, K with jitter."""
    return add_diagonal(add_jitter(kernel(x)), likelihood.noise_variance)


def log_marginal_likelihood(x: Tensor, y: Tensor, kernel: Kernel, likelihood: GaussianLikelihood) -> Tensor:
    """log N(y | 0, K + sigma^2 I) (Rasmussen & Williams, eq. 2.30).

    Args:
        x: ``[*batch, n, D]``.
        y: ``[*batch, n]``.
    """
    return log_density(y, torch.zeros_like(y), cholesky(marginal_covariance(x, kernel, likelihood)))


class ExactGP(Method):
    """The exact GP: kernel and noise trained on the batch's marginal likelihood, loss -LML / n.

    Prediction conditions on ALL training data, O(N^3): for small N only (tests, pretraining
    subsets, Snelson's reference curve).
    """

    name = "exact"
    display_name = "Exact GP"

    def __init__(self, problem: Problem, config: MethodConfig):
        gaussian_likelihood(problem.likelihood, f"method {self.name!r}")  # K + sigma^2 I needs its noise
        super().__init__(problem, config)
        self.register_buffer("x_train", problem.x_train, persistent=False)
        self.register_buffer("y_train", problem.y_train, persistent=False)

    def loss(self, x_batch: Tensor, y_batch: Tensor, step: int, generators: draws.Generators) -> Tensor:
        return -log_marginal_likelihood(x_batch, y_batch, self.kernel, self.likelihood) / y_batch.shape[-1]

    def predict_f(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """p(f(x) | y) (Rasmussen & Williams, eq. 2.25-2.26), marginal variances."""
        return condition(
            torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device),
            torch.zeros_like(self.y_train),
            self.kernel(x, diag=True),
            self.kernel(x, self.x_train),
            marginal_covariance(self.x_train, self.kernel, self.likelihood),
            self.y_train,
            diag=True,
        )
