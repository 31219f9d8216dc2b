"""Inference methods behind one interface, found by name in ``METHODS``."""

from torch import Tensor

from gpstudy import generators as draws

from gpstudy.kernels import Kernel
from gpstudy.likelihoods import GaussianLikelihood
from gpstudy.methods.autogp import AutoGP
from gpstudy.methods.base import Method, MethodConfig
from gpstudy.methods.exact_gp import ExactGP
from gpstudy.methods.fbnn import FBNN
from gpstudy.methods.gpnet import GPNet
from gpstudy.methods.odvgp import ODVGP
from gpstudy.methods.svgp import SVGP

METHODS: dict[str, type[Method]] = {method.name: method for method in (ExactGP, SVGP, GPNet, FBNN, ODVGP, AutoGP)}


def build_method(
    name: str,
    x_train: Tensor,
    y_train: Tensor,
    kernel: Kernel,
    likelihood: GaussianLikelihood,
    config: MethodConfig,
    generators: draws.Generators,
) -> Method:
    """The method registered as ``name``, built on the training data.

    Args:
        name: a key of ``METHODS``: "exact", "svgp", "gpnet", "fbnn", "odvgp" or "autogp".
        x_train: ``[N, D]``.
        y_train: ``[N]``.
        kernel: the prior kernel, already initialized.
        likelihood: the likelihood, already initialized.
        config: the method's settings.
        generators: randomness of the initialization (k-means seed, RFE frequencies and mean): one
            ``torch.Generator``, or one per split for a batch of splits (``gpstudy.generators``).
    """
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; known methods: {', '.join(sorted(METHODS))}")
    return METHODS[name](x_train, y_train, kernel, likelihood, config, generators)


__all__ = ["FBNN", "GPNet", "METHODS", "ODVGP", "SVGP", "AutoGP", "ExactGP", "Method", "MethodConfig", "build_method"]
