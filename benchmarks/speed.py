"""Seconds per training iteration of each method, through the real training loop (issue: speed).

Prints one row per (method, M, N): svgp, gpnet, fbnn at M in {100, 500}, batch 500, D = 8, float64,
RFE with 1000 hidden units, on the current device, plus one exact-GP pretraining step (1000 points).
Per-iteration cost must not grow with N: compare the rows for N = 8192 and N = 45730.

    python benchmarks/speed.py [--device cpu|cuda] [--iterations 10] [--threads K]
"""

import argparse
import time

import torch

from gpstudy.kernels import RBF
from gpstudy.likelihoods import GaussianLikelihood
from gpstudy.methods import MethodConfig, build_method
from gpstudy.pretrain import pretrain_hyperparameters
from gpstudy.training import fit

D, BATCH, HIDDEN = 8, 500, 1000  # STUDY.md's UCI settings


def seconds_per_iteration(method_name: str, M: int, n: int, iterations: int, device: torch.device) -> float:
    """Mean wall seconds of one iteration of ``fit`` (after one warm-up iteration)."""
    generator = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(n, D, dtype=torch.float64, device=device, generator=generator)
    y = torch.sin(x.sum(-1))
    kernel, likelihood = RBF(D).to(device), GaussianLikelihood().to(device)
    config = MethodConfig(M=M, n_train=n, hidden_units=HIDDEN, measurement="train")
    method = build_method(method_name, x, y, kernel, likelihood, config, generator).to(device)
    run = dict(batch_size=BATCH, lr=0.003, generator=generator, evaluate=dict, eval_every=10**9)
    fit(method, x, y, iterations=1, **run)  # warm-up: allocations, kernels
    _, seconds = fit(method, x, y, iterations=iterations, **run)
    return seconds / iterations


def pretraining_step_seconds(device: torch.device, steps: int = 5) -> float:
    """Seconds of one exact-GP marginal-likelihood Adam step on 1000 points."""
    generator = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(1000, D, dtype=torch.float64, device=device, generator=generator)
    kernel, likelihood = RBF(D).to(device), GaussianLikelihood().to(device)
    tic = time.perf_counter()
    pretrain_hyperparameters(x, torch.sin(x.sum(-1)), kernel, likelihood, iterations=steps, generator=generator)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - tic) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[8192, 45730], help="training-set sizes N")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    print(f"device: {name}; batch {BATCH}, D {D}, RFE {HIDDEN} hidden units, float64, torch {torch.__version__}")
    print(f"{'method':8s} {'M':>5s} {'N':>7s} {'s/iteration':>12s}")
    for method in ("svgp", "gpnet", "fbnn"):
        for M in (100, 500):
            for n in args.sizes:
                print(f"{method:8s} {M:5d} {n:7d} {seconds_per_iteration(method, M, n, args.iterations, device):12.4f}",
                      flush=True)
    print(f"exact-GP pretraining step (1000 points): {pretraining_step_seconds(device):.4f} s")


if __name__ == "__main__":
    main()
