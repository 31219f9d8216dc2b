"""The inference-network interface: a q_gamma(f) whose values at any finite inputs are Gaussian."""

from collections.abc import Mapping
from typing import Any, ClassVar

import jsonschema
import torch
from torch import Tensor, nn

from gpstudy import generators as draws
from gpstudy.kernels import Kernel
from gpstudy.linalg import HALVES_FROM, add_jitter_, gram, stacked_gram
from gpstudy.numerics import JITTER, PREDICT_CHUNK


class InferenceNetwork(nn.Module):
    """q_gamma(f) of GPNet (section 3.2): at inputs X, f(X) ~ N(mean(X), F(X) F(X)^T + JITTER I).

    A subclass implements ``forward``, returning the mean and a covariance factor F of any width r
    (RFE: r = 2L features; an NTK network: the Jacobian times the weights' scale), and ``from_options``.

    Latent functions: a network built for one latent (``latent_dim`` 1) returns a mean ``[*batch, n]``
    and a factor ``[*batch, n, r]``; one built for C > 1 (only where ``several_latents``) puts the
    class in front of the points, mean ``[*batch, C, n]`` and factor ``[*batch, C, n, r]``, the
    classes independent. Every method below then works per class: ``covariance`` is
    ``[*batch, C, n, n]`` and ``marginals`` ``[*batch, C, n]``.

    Mixed precision (``training.dtype: mixed``): with a ``feature_dtype`` (float32) the network computes
    its feature products in it (the RFE: phi(x), Phi m and Phi L; the NTK: its trunk, heads and J sigma)
    and returns them cast back to the parameters' dtype (float64); the Gram F F^T (``covariance``) and
    every kernel matrix, factor, solve and KL stay float64. Autograd casts the gradients.
    """

    name: ClassVar[str]  # the network's key in ``gpstudy.nets.NETWORKS``
    options_schema: ClassVar[dict[str, Any]] = {  # JSON schema of its own options (a method's network_options)
        "type": "object",
        "additionalProperties": False,
        "properties": {},
    }
    several_latents: ClassVar[bool] = False  # whether it can output C > 1 latent functions (a softmax's)
    predict_chunk: ClassVar[int] = PREDICT_CHUNK  # points whose marginals it computes at a time in prediction
    feature_dtype: torch.dtype | None = None  # dtype of the feature products (``build`` sets it); None: the parameters'

    @classmethod
    def build(
        cls,
        kernel: Kernel,
        generators: draws.Generators,
        *,
        latent_dim: int,
        hidden_units: int,
        live_variance: bool,
        options: Mapping[str, Any],
        feature_dtype: torch.dtype | None = None,
    ) -> "InferenceNetwork":
        """The network from a method's options, every network alike (``InferenceNetworkMethod``).

        Args:
            kernel: the prior kernel the network starts from.
            generators: randomness of the initialization (``gpstudy.generators``).
            latent_dim: C, the latent functions it outputs (the likelihood's ``latent_dim``).
            hidden_units: the method's ``hidden_units`` (RFE: frequencies H; NTK: the head's units K).
            live_variance: the method's ``live_variance`` (RFE only).
            options: the network's own options (the method's ``network_options``), checked against
                ``options_schema``.
            feature_dtype: the dtype of its feature products (``MethodConfig.feature_dtype``); None: the
                parameters' dtype.

        Raises:
            ValueError: options outside ``options_schema``, or C > 1 for a network of one latent.
        """
        cls.check_options(options)
        if latent_dim > 1 and not cls.several_latents:
            raise ValueError(
                f"network {cls.name!r} outputs one latent function, but the likelihood has "
                f"{latent_dim} (one per class); choose a network with several latents"
            )
        network = cls.from_options(
            kernel,
            generators,
            latent_dim=latent_dim,
            hidden_units=hidden_units,
            live_variance=live_variance,
            options=options,
        )
        network.feature_dtype = feature_dtype
        return network

    @classmethod
    def kernel_problem(cls, kernel: str, kernel_options: Mapping[str, Any], options: Mapping[str, Any]) -> str | None:
        """Why the network with its own ``options`` cannot start from kernel ``kernel`` (a name in
        ``gpstudy.kernels.KERNELS``) built with ``kernel_options``, naming both; None where it can (by
        default: from any kernel)."""
        return None

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` naming the network and the key unless ``options`` fit ``options_schema``."""
        try:
            jsonschema.validate(dict(options), cls.options_schema)
        except jsonschema.ValidationError as error:
            raise ValueError(f"network_options of network {cls.name!r}, {error.json_path}: {error.message}") from None

    @classmethod
    def from_options(
        cls,
        kernel: Kernel,
        generators: draws.Generators,
        *,
        latent_dim: int,
        hidden_units: int,
        live_variance: bool,
        options: Mapping[str, Any],
    ) -> "InferenceNetwork":
        """The constructor call behind ``build``, its arguments already checked; a subclass implements it."""
        raise NotImplementedError

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The mean ``[*batch, n]`` and covariance factor ``[*batch, n, r]`` at inputs ``x`` ``[*batch, n, D]``
        (C latents: ``[*batch, C, n]`` and ``[*batch, C, n, r]``)."""
        raise NotImplementedError

    def forward_and_held(self, x: Tensor, held: Tensor) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
        """``forward`` at ``x``, and its values at ``held`` without gradient (GPNet's q_gamma at the points its loss
        differentiates, and q_t's head there); a network may share what both calls build (``RFE``'s)."""
        outputs = self(x)
        with torch.no_grad():
            return outputs, self(held)

    def in_feature_dtype(self, tensor: Tensor) -> Tensor:
        """``tensor`` in the dtype of the feature products (itself unless ``feature_dtype`` differs)."""
        return tensor if self.feature_dtype is None else tensor.to(self.feature_dtype)

    def covariance(self, factor: Tensor) -> Tensor:
        """F F^T + JITTER I ``[..., n, n]`` from a covariance factor F ``[..., n, r]`` returned by ``forward``,
        in F's dtype (the parameters'), never in ``feature_dtype``.

        Under ``mixed`` the Gram is not formed in float32: its rounding, about eps_32 |f_i| |f_j| per entry
        (eps_32 = 1.2e-7) and of no Gram form, moves eigenvalues by order eps_32 times the diagonal's
        scale, beyond JITTER wherever F F^T is nearly singular (at Snelson's sizes: indefinite in up to
        20 of 20 batches, the KL up to 1.3x off). The float64 Gram of the float32-rounded F is the exact
        Gram of a nearby factor F + E: positive semi-definite, a small eigenvalue s^2 moving by about
        2 s |E| only (loss and KL within 1e-5 of float64's; docs/reproducibility.md).
        """
        return add_jitter_(gram(factor))

    def stacked_covariance(self, head: Tensor, tail: Tensor, tail_covariance: Tensor) -> Tensor:
        """``covariance`` of the factor [head; tail] (rows stacked) ``[..., h + t, h + t]``, given
        ``tail_covariance`` = ``covariance(tail)``, whose block is reused, not computed again (GPNet's q_t over
        [X_B; X_M] beside its loss's q over X_M: ``linalg.stacked_gram``). A value, no gradient. Below
        ``HALVES_FROM`` rows in all the stacked factor's one product, as ``covariance`` makes it."""
        if head.shape[-2] == 0:
            return tail_covariance
        if head.shape[-2] + tail.shape[-2] < HALVES_FROM:
            return self.covariance(torch.cat([head, tail], dim=-2))
        joint = stacked_gram(head, tail, tail_covariance)
        joint[..., : head.shape[-2], : head.shape[-2]].diagonal(dim1=-2, dim2=-1).add_(JITTER)  # the tail's has it
        return joint

    def mean_and_covariance(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The mean ``[..., n]`` and full covariance ``[..., n, n]`` (jitter included) at ``x`` ``[*batch, n, D]``."""
        mean, factor = self(x)
        return mean, self.covariance(factor)

    def marginals(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The mean ``[..., n]`` and marginal variances ``[..., n]`` at ``x``, without forming an n x n matrix."""
        mean, factor = self(x)
        return mean, factor.square().sum(-1) + JITTER

    def marginal_variance(self, x: Tensor) -> Tensor:
        """The marginal variances ``[..., n]`` at ``x`` ``[*batch, n, D]``."""
        return self.marginals(x)[1]
