"""Numerical settings shared by every module: default dtype, jitter, positivity floor, prediction chunks."""

import torch

DEFAULT_DTYPE = torch.float64  # float64 everywhere unless a run asks otherwise
JITTER = 1e-6  # added to the diagonal of every kernel and network covariance
POSITIVE_FLOOR = 1e-6  # lower bound of every softplus-constrained parameter
PREDICT_CHUNK = 4096  # points predicted at a time unless a method or network needs fewer (memory per point)
CHOLESKY_MAX_TRIES = 5  # extra jitter tries of gaussian.cholesky: JITTER, 10 JITTER, ... (x10 each)
