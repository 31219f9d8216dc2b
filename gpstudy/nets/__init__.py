"""Inference networks q_gamma(f) for GPNet and FBNN (section 4)."""

from gpstudy.nets.base import InferenceNetwork
from gpstudy.nets.rfe import RFE

NETWORKS: dict[str, type[InferenceNetwork]] = {"rfe": RFE}  # every network by name

__all__ = ["NETWORKS", "RFE", "InferenceNetwork"]
