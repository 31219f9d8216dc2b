"""The inference-network interface: a q_gamma(f) whose values at any finite inputs are Gaussian."""

from torch import Tensor, nn

from gpstudy.gaussian import add_jitter, gram
from gpstudy.settings import JITTER


class InferenceNetwork(nn.Module):
    """q_gamma(f) of GPNet (section 3.2): at inputs X, f(X) ~ N(mean(X), F(X) F(X)^T + JITTER I).

    A subclass implements ``forward``, returning the mean and a covariance factor F of any width r
    (RFE: r = 2L features; an NTK network: the Jacobian times the weights' scale).
    """

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The mean ``[*batch, n]`` and covariance factor ``[*batch, n, r]`` at inputs ``x`` ``[*batch, n, D]``."""
        raise NotImplementedError

    @staticmethod
    def covariance(factor: Tensor) -> Tensor:
        """F F^T + JITTER I ``[n, n]`` from a covariance factor F ``[n, r]`` returned by ``forward``."""
        return add_jitter(gram(factor))

    def mean_and_covariance(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The mean ``[n]`` and full covariance ``[n, n]`` (jitter included) at ``x`` ``[n, D]``."""
        mean, factor = self(x)
        return mean, self.covariance(factor)

    def marginals(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The mean ``[n]`` and marginal variances ``[n]`` at ``x``, without forming an n x n matrix."""
        mean, factor = self(x)
        return mean, factor.square().sum(-1) + JITTER

    def marginal_variance(self, x: Tensor) -> Tensor:
        """The marginal variances ``[n]`` at ``x`` ``[n, D]``."""
        return self.marginals(x)[1]
