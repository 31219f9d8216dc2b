"""Numerical settings shared by every module: default dtype, the run's dtypes, jitter, positivity floor, prediction
and k-means chunks."""

import torch

DEFAULT_DTYPE = torch.float64  # float64 everywhere unless a run asks otherwise
DTYPES = {  # training.dtype -> (data, parameters, kernel matrices, factors, solves, KL; network feature products)
    "float64": (torch.float64, torch.float64),
    "float32": (torch.float32, torch.float32),
    "mixed": (torch.float64, torch.float32),  # RFE: phi(x), Phi m, Phi L; NTK: trunk, heads, J sigma (Grams float64)
}
JITTER = 1e-6  # added to the diagonal of every kernel and network covariance
POSITIVE_FLOOR = 1e-6  # lower bound of every softplus-constrained parameter
PREDICT_CHUNK = 4096  # points predicted at a time unless a method or network needs fewer (memory per point)
CHOLESKY_MAX_TRIES = 5  # extra jitter tries of linalg.cholesky: JITTER, 10 JITTER, ... (x10 each)
FACTOR_BLOCK = 512  # rows of the leaves of gpstudy.linalg.blocked's Cholesky factors and triangular solves (off a CPU),
# and the fewest right-hand sides a solve is blocked for: a UCI matrix of n <= 512 is one library call, n = 600-1000 is
# split once (two potrf leaves and one trsm); chosen by benchmarks/gpu_estimate.py, where a small factorization call is
# latency-bound (~0.2 ms, issue 47's review) and 128-row leaves made 16-28 potrf and 40-78 trsm calls a step. An
# estimate, not measured: the GPU run (gpu_check.py's blocked-against-library section) is to confirm or move it
KMEANS_TOL = 1e-4  # k-means stops when the centres' squared shift is at most this times the mean feature variance
KMEANS_MAX_ITER = 300  # at most this many Lloyd's iterations of k-means (scikit-learn's default)
KMEANS_CHECK_EVERY = 10  # k-means reads its convergence on the host (a GPU sync) every this many iterations
KMEANS_CHUNK = {"cpu": 2**18, "cuda": 2**25}  # distances k-means holds at once, over all splits, by device type
# (another device, meta among them, takes cuda's): 2 MB in float64 on a CPU, where 2**22 was slower; 256 MB on a
# GPU, where each chunk costs launches: at protein's size (20 splits, 41157 points, M = 500) a Lloyd iteration is
# 13 chunks, not 1583
