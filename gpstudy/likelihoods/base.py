"""The likelihood interface p(y | f): densities, their Gaussian expectations and the predictive."""

from typing import Any, ClassVar

from torch import Tensor, nn

from gpstudy import generators as draws


class Likelihood(nn.Module):
    """An observation model p(y | f) with f ~ N(mean, var) elementwise (independent latent marginals).

    Shapes: labels or targets ``y`` are ``[*batch, n]``; latents ``f``, ``mean`` and ``var`` are
    ``[*batch, n]`` when ``latent_dim`` is 1 and ``[*batch, n, latent_dim]`` otherwise. Methods that
    integrate by Monte Carlo draw through ``gpstudy.generators``: ``generators`` is one
    ``torch.Generator``, or one per split of a batch; closed-form and quadrature likelihoods ignore it.

    A subclass sets ``task``, ``options_schema`` and implements the four maths methods. Its constructor
    takes its options (keyword arguments matching ``options_schema``) plus ``dtype`` and ``batch_shape``,
    the way ``build_likelihood`` calls it.
    """

    task: ClassVar[str]  # "regression" or "classification"
    options_schema: ClassVar[dict[str, Any]]  # JSON schema of the constructor's options

    @property
    def latent_dim(self) -> int:
        """The number of latent functions per point (1; a softmax has one per class)."""
        return 1

    def log_prob(self, y: Tensor, f: Tensor) -> Tensor:
        """log p(y | f) elementwise ``[*batch, n]``."""
        raise NotImplementedError

    def expected_log_prob(self, y: Tensor, mean: Tensor, var: Tensor,
                          generators: draws.Generators | None = None) -> Tensor:
        """E_{N(f | mean, var)} log p(y | f) ``[*batch, n]``: the data term of a variational ELBO."""
        raise NotImplementedError

    def log_predictive_density(self, y: Tensor, mean: Tensor, var: Tensor,
                               generators: draws.Generators | None = None) -> Tensor:
        """log int p(y | f) N(f | mean, var) df ``[*batch, n]``: the test log-likelihood of a point."""
        raise NotImplementedError

    def predictive(self, mean: Tensor, var: Tensor,
                   generators: draws.Generators | None = None) -> Tensor | tuple[Tensor, Tensor]:
        """The predictive distribution of y: its moments (regression) or class probabilities
        (classification), see the subclass."""
        raise NotImplementedError
