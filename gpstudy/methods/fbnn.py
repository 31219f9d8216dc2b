"""Functional variational BNN (FBNN, Sun et al. 2019) with GPNet's inference networks."""

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from gpstudy import generators as draws
from gpstudy.methods.base import InferenceNetworkMethod, function_space_elbo, function_space_kl

HYPERPARAMETER_OBJECTIVES = ("measurement_set", "batch")  # what the kernel's KL covers when learned online


class FBNN(InferenceNetworkMethod):
    """FBNN: loss = -[sum_B E_q log p(y_b | f_b) - KL[q(f_Z) || p(f_Z)]] over Z = [X_B; X_M].

    No N/n factor: the heuristic minibatching that the GPNet paper criticizes (section 5). The KL is
    exact here because the RFE network's marginals are Gaussian. With ``online_hyperparameters`` the
    kernel and noise are trained too: on this same objective (``hyperparameter_objective:
    measurement_set``), or, as in the authors' code, on the minibatch bound
    sum_B E_q log p(y_b | f_b) - KL[q(f_B) || p(f_B)] (``batch``: the kernel sees X_B only, while the
    network still trains on all of Z). Prediction as GPNet's. With a network of several latents
    (NTK) and a softmax, the C classes are independent: the KLs are summed over classes and K_ZZ is
    shared (as GPNet's L_t).
    """

    name = "fbnn"
    display_name = "FBNN"
    options_schema = {
        **InferenceNetworkMethod.options_schema,
        "hyperparameter_objective": {
            "enum": list(HYPERPARAMETER_OBJECTIVES),
            "description": "online hyperparameters: KL over Z (measurement_set) or X_B (batch)",
        },
    }

    @classmethod
    def supported_likelihoods(cls, options: Mapping[str, Any]) -> tuple[str, ...]:
        """Any likelihood the network serves: its expected log density is all the objective needs."""
        return cls.network_likelihoods(options)

    def loss(self, x_batch: Tensor, y_batch: Tensor, step: int, generators: draws.Generators) -> Tensor:
        inputs = self.measurement_set(x_batch, generators)  # Z = [X_B; X_M]
        mean, cov = self.network.mean_and_covariance(inputs)  # q(f_Z)
        prior_cov = self.prior_covariance(inputs)  # p(f_Z) = N(0, K_ZZ)
        zeros = torch.zeros_like(mean)
        if not (self.config.online_hyperparameters and self.config.hyperparameter_objective == "batch"):
            return -function_space_elbo(self.likelihood, y_batch, mean, cov, zeros, prior_cov, generators=generators)
        n = y_batch.shape[-1]  # the network on Z, the kernel on the batch's KL (q held fixed there)
        network_loss = -function_space_elbo(
            self.likelihood, y_batch, mean, cov, zeros, prior_cov.detach(), generators=generators
        )
        batch_kl = function_space_kl(
            mean[..., :n].detach(), cov[..., :n, :n].detach(), zeros[..., :n], prior_cov[..., :n, :n], self.latent_dim
        )
        return network_loss + batch_kl
