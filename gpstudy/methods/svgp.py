"""Stochastic variational GP (SVGP) with whitened inducing variables (Hensman et al. 2013)."""

import logging

import torch
from sklearn.cluster import KMeans
from torch import Tensor, nn

from gpstudy.gaussian import add_jitter, cholesky, kl_divergence, raw_scale_tril, scale_tril
from gpstudy.kernels import Kernel
from gpstudy.likelihoods import GaussianLikelihood
from gpstudy.methods.base import Method, MethodConfig

logger = logging.getLogger(__name__)


def kmeans_centres(x: Tensor, num_centres: int, generator: torch.Generator) -> Tensor:
    """scikit-learn k-means centres ``[min(num_centres, N), D]`` of ``x`` ``[N, D]``, seeded by ``generator``.

    k-means cannot place more centres than points: with num_centres > N it returns N centres (the
    training inputs themselves) and logs a warning.
    """
    num_points = x.shape[0]
    if num_centres > num_points:
        logger.warning("%d inducing points requested but only %d training points", num_centres, num_points)
    seed = int(torch.randint(2**31 - 1, (), generator=generator, device=generator.device))
    kmeans = KMeans(n_clusters=min(num_centres, num_points), random_state=seed).fit(x.detach().cpu().numpy())
    return torch.as_tensor(kmeans.cluster_centers_, dtype=x.dtype, device=x.device)


class SVGP(Method):
    """SVGP: u = f(Z) = L_Z v with q(v) = N(m, S S^T), m = 0 and S = I at start (whitened).

    Loss = -[(N/n) sum_B E_q log p(y_b | f_b) - KL[q(v) || N(0, I)]] (Hensman et al. 2013, eq. 4);
    Z starts at k-means centres of the training inputs. Kernel, noise, Z, m and S are all trained.
    """

    name = "svgp"

    def __init__(
        self,
        x_train: Tensor,
        y_train: Tensor,
        kernel: Kernel,
        likelihood: GaussianLikelihood,
        config: MethodConfig,
        generator: torch.Generator,
    ):
        super().__init__(x_train, y_train, kernel, likelihood, config, generator)
        inducing_inputs = kmeans_centres(x_train, config.M, generator)
        num_inducing = inducing_inputs.shape[0]
        self.inducing_inputs = nn.Parameter(inducing_inputs)  # Z, [M, D]
        self.q_mean = nn.Parameter(torch.zeros(num_inducing, dtype=x_train.dtype, device=x_train.device))
        self.raw_q_scale = nn.Parameter(raw_scale_tril(1.0, num_inducing, like=inducing_inputs))

    @property
    def q_scale_tril(self) -> Tensor:
        """S, the lower Cholesky factor of q(v)'s covariance ``[M, M]``."""
        return scale_tril(self.raw_q_scale)

    def predict_f(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """q(f(x)) = int p(f(x) | u) q(u) du (Hensman et al. 2013), marginal variances.

        With A = L_Z^-1 K_Zx: mean A^T m, variance k_xx - |A|^2 + |S^T A|^2 (column norms).
        """
        chol_zz = cholesky(add_jitter(self.kernel(self.inducing_inputs)))
        projection = torch.linalg.solve_triangular(chol_zz, self.kernel(self.inducing_inputs, x), upper=False)
        mean = projection.mT @ self.q_mean
        variance = (
            self.kernel(x, diag=True)
            - projection.square().sum(-2)
            + (self.q_scale_tril.mT @ projection).square().sum(-2)
        )
        return mean, variance

    def loss(self, x_batch: Tensor, y_batch: Tensor, step: int, generator: torch.Generator) -> Tensor:
        mean, variance = self.predict_f(x_batch)
        expected = self.likelihood.expected_log_prob(y_batch, mean, variance).sum(-1)
        identity = torch.eye(self.q_mean.shape[-1], dtype=self.q_mean.dtype, device=self.q_mean.device)
        kl = kl_divergence(self.q_mean, self.q_scale_tril, torch.zeros_like(self.q_mean), identity)
        return -(self.config.n_train / y_batch.shape[-1] * expected - kl)
