"""Stochastic variational GP (SVGP) with whitened inducing variables (Hensman et al. 2013)."""

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from sklearn.cluster import KMeans
from torch import Tensor, nn

from gpstudy import generators as draws
from gpstudy.gaussian import add_jitter, cholesky, kl_to_standard_normal, raw_scale_tril, scale_tril
from gpstudy.kernels import Kernel
from gpstudy.likelihoods import ONE_LATENT, GaussianLikelihood
from gpstudy.methods.base import Method, MethodConfig

logger = logging.getLogger(__name__)


def kmeans_centres(x: Tensor, num_centres: int, generators: draws.Generators) -> Tensor:
    """scikit-learn k-means centres ``[*batch, min(num_centres, N), D]`` of ``x`` ``[*batch, N, D]``.

    Each split's k-means is seeded by its own generator. k-means cannot place more centres than
    points: with num_centres > N it returns N centres (the training inputs themselves) and logs a
    warning.
    """
    num_points = x.shape[-2]
    if num_centres > num_points:
        logger.warning("%d inducing points requested but only %d training points", num_centres, num_points)
    points = x.detach().cpu().numpy().reshape(-1, *x.shape[-2:])  # [batch, N, D]
    centres = [KMeans(n_clusters=min(num_centres, num_points), random_state=seed).fit(split).cluster_centers_
               for split, seed in zip(points, draws.seeds(generators))]
    return torch.as_tensor(np.stack(centres), dtype=x.dtype, device=x.device).reshape(
        *x.shape[:-2], len(centres[0]), x.shape[-1])


class SVGP(Method):
    """SVGP: u = f(Z) = L_Z v with q(v) = N(m, S S^T), m = 0 and S = I at start (whitened).

    Loss = -[(N/n) sum_B E_q log p(y_b | f_b) - KL[q(v) || N(0, I)]] (Hensman et al. 2013, eq. 4);
    Z starts at k-means centres of the training inputs. Z, m and S are trained, and kernel and noise
    too with ``config.online_hyperparameters`` (else they stay where they start: Snelson's pretrained
    values, as the paper's section 5.1 keeps them).
    """

    name = "svgp"
    options_schema = {
        "online_hyperparameters": {"type": "boolean", "description": "learn kernel and noise by the ELBO"},
    }

    @classmethod
    def supported_likelihoods(cls, options: Mapping[str, Any]) -> tuple[str, ...]:
        return ONE_LATENT  # any likelihood of one latent: its expected log density

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
        self.learn_hyperparameters(config.online_hyperparameters)
        inducing_inputs = kmeans_centres(x_train, config.M, generators)
        batch_shape, num_inducing = inducing_inputs.shape[:-2], inducing_inputs.shape[-2]
        self.inducing_inputs = nn.Parameter(inducing_inputs)  # Z, [*batch, M, D]
        self.q_mean = nn.Parameter(inducing_inputs.new_zeros((*batch_shape, num_inducing)))  # m, [*batch, M]
        self.raw_q_scale = nn.Parameter(raw_scale_tril(1.0, num_inducing, inducing_inputs, batch_shape))

    @property
    def q_scale_tril(self) -> Tensor:
        """S, the lower Cholesky factor of q(v)'s covariance ``[*batch, M, M]``."""
        return scale_tril(self.raw_q_scale)

    def predict_f(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """q(f(x)) = int p(f(x) | u) q(u) du (Hensman et al. 2013), marginal variances.

        With A = L_Z^-1 K_Zx: mean A^T m, variance k_xx - |A|^2 + |S^T A|^2 (column norms).
        """
        chol_zz = cholesky(add_jitter(self.kernel(self.inducing_inputs)))
        projection = torch.linalg.solve_triangular(chol_zz, self.kernel(self.inducing_inputs, x), upper=False)
        mean = (projection.mT @ self.q_mean.unsqueeze(-1)).squeeze(-1)
        variance = (
            self.kernel(x, diag=True)
            - projection.square().sum(-2)
            + (self.q_scale_tril.mT @ projection).square().sum(-2)
        )
        return mean, variance

    def loss(self, x_batch: Tensor, y_batch: Tensor, step: int, generators: draws.Generators) -> Tensor:
        mean, variance = self.predict_f(x_batch)
        expected = self.likelihood.expected_log_prob(y_batch, mean, variance).sum(-1)
        kl = kl_to_standard_normal(self.q_mean, self.q_scale_tril)  # KL[q(v) || N(0, I)]
        return -(self.config.n_train / y_batch.shape[-1] * expected - kl)
