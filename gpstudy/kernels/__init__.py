"""Covariance functions: a base class owning lengthscales and variance, one small class per kernel."""

from gpstudy.kernels.base import Kernel
from gpstudy.kernels.rbf import RBF

KERNELS: dict[str, type[Kernel]] = {"rbf": RBF}  # every kernel by name; tests enumerate it

__all__ = ["KERNELS", "RBF", "Kernel"]
