"""Functional variational BNN (FBNN, Sun et al. 2019) with GPNet's RFE network."""

import torch
from torch import Tensor

from gpstudy import generators as draws
from gpstudy.gaussian import add_jitter
from gpstudy.methods.base import InferenceNetworkMethod, function_space_elbo


class FBNN(InferenceNetworkMethod):
    """FBNN: loss = -[sum_B E_q log p(y_b | f_b) - KL[q(f_Z) || p(f_Z)]] over Z = [X_B; X_M].

    No N/n factor: the heuristic minibatching that the GPNet paper criticizes (section 5). The KL is
    exact here because the RFE network's marginals are Gaussian. With ``online_hyperparameters`` the
    kernel and noise are trained on this same objective. Prediction as GPNet's.
    """

    name = "fbnn"

    def loss(self, x_batch: Tensor, y_batch: Tensor, step: int, generators: draws.Generators) -> Tensor:
        inputs = self.measurement_set(x_batch, generators)  # Z = [X_B; X_M]
        mean, cov = self.network.mean_and_covariance(inputs)  # q(f_Z)
        prior_cov = add_jitter(self.kernel(inputs))  # p(f_Z) = N(0, K_ZZ)
        return -function_space_elbo(self.likelihood, y_batch, mean, cov, torch.zeros_like(mean), prior_cov)
