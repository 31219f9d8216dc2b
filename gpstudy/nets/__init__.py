"""Inference networks q_gamma(f) for GPNet and FBNN (section 4)."""

from gpstudy.nets.base import InferenceNetwork
from gpstudy.nets.rfe import RFE

__all__ = ["RFE", "InferenceNetwork"]
