"""Numerical settings shared by every module: default dtype, jitter and positivity floor."""

import torch

DEFAULT_DTYPE = torch.float64  # float64 everywhere unless a run asks otherwise
JITTER = 1e-6  # added to the diagonal of every kernel and network covariance
POSITIVE_FLOOR = 1e-6  # lower bound of every softplus-constrained parameter
CHOLESKY_MAX_TRIES = 5  # extra jitter tries of gaussian.cholesky: JITTER, 10 JITTER, ... (x10 each)
