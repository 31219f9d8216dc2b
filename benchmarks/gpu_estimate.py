"""An estimate of the UCI study's training time on one GPU, from FLOPs and operators counted without one.

Each (method, M) of ``experiments.uci`` is built at the study's sizes (20 splits as one batch, batch 500,
RFE with 1000 hidden units, float64) on synthetic data, moved to the ``meta`` device, and one training
iteration is run there under ``torch.utils.flop_counter`` (matrix products apart from factorizations and
triangular solves, with ``benchmarks/speed.py``'s formulas) and an operator count; host
synchronisations are counted on the CPU (``gpstudy.host_sync``). The model, whose rates are arguments:

    GPU time  = product FLOPs / product rate + factorization FLOPs / factorization rate
    host time = operators x seconds per operator (eager PyTorch's dispatch and launch)
    iteration = max(GPU, host) + syncs x sync latency   with at most one sync: the host runs ahead
              = GPU + host + syncs x sync latency        with more: each sync exposes the host's launches

    python benchmarks/gpu_estimate.py [--product-tflops 40] [--factorization-tflops 8] [--operator-us 6]

The defaults are assumptions for an H100 SXM (FP64 tensor cores 67 TFLOP/s peak; batched Cholesky
and triangular solves of 500-1500 reach a fraction of it), not measurements: nothing here has run on
a GPU. ``benchmarks/gpu_check.py`` measures the real numbers on one.
"""

import argparse
import sys
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
import speed  # noqa: E402  (its FLOP formulas register on import)

from gpstudy.host_sync import HostSyncCounter  # noqa: E402
from gpstudy.optim import adam  # noqa: E402
from gpstudy.training.fit import BatchSampler, train_iteration  # noqa: E402

FACTORIZATIONS = {"linalg_cholesky_ex", "linalg_solve_triangular", "cholesky_inverse", "cholesky_solve"}
SPLITS, N = 20, 1000  # the batch of one job; N only has to exceed the minibatch (the step does not grow with N)


def counts(method_name: str, M: int, device: torch.device) -> dict:
    """Product FLOPs, factorization FLOPs and operators of one iteration on ``device`` (after a warm-up)."""
    method, x, y, generators = speed.build(method_name, M, N, SPLITS, torch.device("cpu"))
    method, x, y = method.to(device), x.to(device), y.to(device)
    optimizer = adam(method.adam_parameters(), 0.003, device)
    sampler = BatchSampler(N, speed.BATCH, generators, device)
    train_iteration(method, optimizer, sampler, x, y, 1, generators)
    flops, operators = FlopCounterMode(display=False), speed.OperatorCount()
    with flops, operators:
        train_iteration(method, optimizer, sampler, x, y, 2, generators)
    by_operator = {str(op).split(".")[-1]: count for op, count in flops.get_flop_counts()["Global"].items()}
    factorization = sum(count for name, count in by_operator.items() if name in FACTORIZATIONS)
    return {"products": sum(by_operator.values()) - factorization, "factorizations": factorization,
            "operators": sum(operators.counts.values())}


def syncs(method_name: str, M: int) -> float:
    """Host synchronisations per iteration, counted on the CPU at a small size (they do not depend on it)."""
    method, x, y, generators = speed.build(method_name, min(M, 20), 64, 2, torch.device("cpu"))
    optimizer = adam(method.adam_parameters(), 0.003, x.device)
    sampler = BatchSampler(64, 16, generators, x.device)
    train_iteration(method, optimizer, sampler, x, y, 1, generators)
    with HostSyncCounter() as counter:
        for step in range(2, 5):
            train_iteration(method, optimizer, sampler, x, y, step, generators)
    return len(counter.events) / 3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--product-tflops", type=float, default=40.0, help="FP64 matrix products (H100: 67 peak)")
    parser.add_argument("--factorization-tflops", type=float, default=8.0, help="batched Cholesky and solves")
    parser.add_argument("--operator-us", type=float, default=6.0, help="host seconds per operator, in us")
    parser.add_argument("--sync-us", type=float, default=20.0, help="latency of one host synchronisation, in us")
    parser.add_argument("--iterations", type=int, default=speed.STUDY["training"]["iterations"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    uci = speed.STUDY["experiments"]["uci"]
    jobs_per_row = len(uci["datasets"])
    print(f"{SPLITS} splits per job, batch {speed.BATCH}, RFE {speed.HIDDEN}, float64, {args.iterations} iterations, "
          f"{jobs_per_row} data sets; products {args.product_tflops} TFLOP/s, factorizations "
          f"{args.factorization_tflops} TFLOP/s, {args.operator_us} us per operator, {args.sync_us} us per sync")
    print(f"{'method':7s} {'M':>4s} {'GFLOP prod':>10s} {'GFLOP fact':>10s} {'ops':>6s} {'syncs':>5s} "
          f"{'GPU ms':>7s} {'host ms':>7s} {'ms/it':>7s} {'min/job':>7s}")
    total = 0.0
    for method, sizes in uci["methods"].items():
        for M in sizes:
            row, per_iteration_syncs = counts(method, M, torch.device("meta")), syncs(method, M)
            gpu = row["products"] / (args.product_tflops * 1e12) + row["factorizations"] / (args.factorization_tflops * 1e12)
            host = row["operators"] * args.operator_us * 1e-6
            busy = max(gpu, host) if per_iteration_syncs <= 1 else gpu + host
            seconds = busy + per_iteration_syncs * args.sync_us * 1e-6
            minutes = seconds * args.iterations / 60
            total += minutes * jobs_per_row
            print(f"{method:7s} {M:4d} {row['products'] / 1e9:10.1f} {row['factorizations'] / 1e9:10.1f} "
                  f"{row['operators']:6d} {per_iteration_syncs:5.1f} {gpu * 1e3:7.2f} {host * 1e3:7.2f} "
                  f"{seconds * 1e3:7.2f} {minutes:7.1f}", flush=True)
    print(f"UCI study (experiment uci, one job at a time on one GPU): {total:.0f} minutes of training")


if __name__ == "__main__":
    main()
