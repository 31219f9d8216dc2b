"""Inference networks q_gamma(f) for GPNet and FBNN (section 4), found by name in ``NETWORKS``."""

from gpstudy.nets.base import InferenceNetwork
from gpstudy.nets.ntk import NTK
from gpstudy.nets.rfe import RFE

NETWORKS: dict[str, type[InferenceNetwork]] = {network.name: network for network in (RFE, NTK)}  # every network by name

__all__ = ["NETWORKS", "NTK", "RFE", "InferenceNetwork"]
