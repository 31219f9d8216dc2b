"""Seconds, FLOPs and kernel launches per training iteration of each method (issue: speed).

For svgp, gpnet and fbnn at M in {100, 500} (batch 500, D = 8, RFE with 1000 hidden units,
the study's settings; ``--methods`` takes any registered method or config variant, e.g. orth orthnat autogp) it runs the real training loop (``gpstudy.training.fit``) on S splits at once
and prints, per row: seconds per iteration, GFLOP per iteration (matrix products, Cholesky factors and
triangular solves, forward and backward, counted by ``torch.utils.flop_counter``), the achieved
GFLOP/s and its share of a ``torch.mm`` rate measured in the same run, and the operators dispatched
per iteration (about one kernel launch each on a GPU). Per-iteration cost must not grow with N.

    python benchmarks/speed.py [--device cpu|cuda] [--threads K] [--splits 1 20] [--iterations 10]
                               [--dtype float64 mixed]

``--dtype`` takes ``training.dtype`` values (float64, float32, mixed: the RFE network's feature
products in float32, the rest float64); every row is timed in each.

With ``--splits 1 20`` every row is timed for one split and for a batch of 20, and ``batch/one``
says what the batch costs per iteration relative to one split alone.
"""

import argparse
from dataclasses import replace
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, register_flop_formula

from gpstudy.device_check import matmul_rate
from gpstudy.memory import keep_freed_memory
from gpstudy.methods import Problem, build_method
from gpstudy.study import load_config, run_settings
from gpstudy.study.settings import DTYPES
from gpstudy.training import fit

STUDY = load_config(Path(__file__).resolve().parents[1] / "config.yaml")  # the methods' default options

D, BATCH, HIDDEN = 8, 500, 1000  # STUDY.md's UCI settings
aten = torch.ops.aten


@register_flop_formula(aten.linalg_cholesky_ex)
def _cholesky_flops(a_shape, *args, out_shape=None, **kwargs) -> int:
    *batch, n, _ = a_shape
    return torch.Size(batch).numel() * n**3 // 3


@register_flop_formula(aten.linalg_solve_triangular)
def _solve_triangular_flops(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    *batch, n, k = out_shape
    return torch.Size(batch).numel() * n * n * k


@register_flop_formula(aten.cholesky_inverse)
def _cholesky_inverse_flops(a_shape, *args, out_shape=None, **kwargs) -> int:
    """2 n^3: CUDA's, two triangular solves of the identity (LAPACK's potri on a CPU does 2 n^3 / 3)."""
    *batch, n, _ = a_shape
    return torch.Size(batch).numel() * 2 * n**3


@register_flop_formula(aten.cholesky_solve)
def _cholesky_solve_flops(b_shape, a_shape, *args, out_shape=None, **kwargs) -> int:
    *batch, n, k = out_shape
    return torch.Size(batch).numel() * 2 * n * n * k


class OperatorCount(TorchDispatchMode):
    """Counts the aten operators dispatched (views included, as the launch overhead mostly is)."""

    def __init__(self):
        super().__init__()
        self.counts = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[func] += 1
        return func(*args, **(kwargs or {}))


def build(method_name: str, M: int, n: int, splits: int, device: torch.device, dtype: str = "float64"):
    """A method on ``splits`` synthetic splits of ``n`` points, with its data and generators, in
    ``dtype`` (a ``training.dtype``)."""
    generators = [torch.Generator(device=device).manual_seed(s) for s in range(splits)]
    settings = run_settings(STUDY, None, method=method_name, M=M, dtype=dtype)  # a registered method or a variant
    x = torch.randn(splits, n, D, dtype=settings.torch_dtype(), device=device, generator=generators[0])
    y = torch.sin(x.sum(-1))
    kernel = settings.build_kernel(D, (splits,)).to(device)
    likelihood = settings.build_likelihood((splits,)).to(device)
    network = {"hidden_units": HIDDEN, "measurement": "train"} if "hidden_units" in settings.options else {}
    config = replace(settings, options={**settings.options, **network}).method_config(n)
    method = build_method(settings.method, Problem(x, y, kernel, likelihood, generators), config).to(device)
    return method, x, y, generators


def measure(method_name: str, M: int, n: int, splits: int, iterations: int, device: torch.device,
            dtype: str = "float64") -> dict:
    """Seconds, FLOPs and operators of one iteration of ``fit`` (after one warm-up iteration) in ``dtype``."""
    method, x, y, generators = build(method_name, M, n, splits, device, dtype)
    run = dict(batch_size=BATCH, lr=0.003, generators=generators, evaluate=dict, eval_every=10**9)
    fit(method, x, y, iterations=1, **run)  # warm-up: allocations, kernels
    _, seconds = fit(method, x, y, iterations=iterations, **run)
    flops, operators = FlopCounterMode(display=False), OperatorCount()
    with flops, operators:
        fit(method, x, y, iterations=1, **run)
    return {"seconds": seconds / iterations, "flops": flops.get_total_flops(),
            "operators": sum(operators.counts.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[8192], help="training-set sizes N")
    parser.add_argument("--splits", type=int, nargs="+", default=[1], help="splits trained as one batch")
    parser.add_argument("--methods", nargs="+", default=["svgp", "gpnet", "fbnn"])
    parser.add_argument("--M", type=int, nargs="+", default=[100, 500])
    parser.add_argument("--dtype", nargs="+", default=["float64"], choices=sorted(DTYPES),
                        help="training.dtype values to time each row in")
    parser.add_argument("--malloc", choices=["keep", "default"], default="keep",
                        help="keep freed memory for reuse, as training jobs do (gpstudy.memory), or glibc's default")
    args = parser.parse_args()
    if args.malloc == "keep":
        keep_freed_memory()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    rate = matmul_rate(device, torch.float64)  # float64's: "of mm" says how much of the float64 rate a row reaches
    print(f"device: {name}; batch {BATCH}, D {D}, RFE {HIDDEN} hidden units, torch {torch.__version__}, "
          f"malloc {args.malloc}")
    print(f"torch.mm [1000, 2000] x [2000, 2000]: float64 {rate:.1f} GFLOP/s, "
          f"float32 {matmul_rate(device, torch.float32):.1f} GFLOP/s")
    print(f"{'method':7s} {'M':>4s} {'N':>6s} {'splits':>6s} {'dtype':>7s} {'s/it':>8s} {'GFLOP/it':>9s} "
          f"{'GFLOP/s':>8s} {'of mm':>6s} {'ops/it':>7s} {'batch/one':>9s}")
    for method in args.methods:
        for M in args.M:
            for n in args.sizes:
                for dtype in args.dtype:
                    one = None
                    for splits in args.splits:
                        row = measure(method, M, n, splits, args.iterations, device, dtype)
                        if splits == 1:
                            one = row["seconds"]
                        achieved = row["flops"] / row["seconds"] / 1e9
                        ratio = f"{row['seconds'] / one:9.2f}" if one and splits > 1 else f"{'':9s}"
                        print(f"{method:7s} {M:4d} {n:6d} {splits:6d} {dtype:>7s} {row['seconds']:8.4f} "
                              f"{row['flops'] / 1e9:9.2f} {achieved:8.1f} {achieved / rate:6.0%} "
                              f"{row['operators']:7d} {ratio}", flush=True)


if __name__ == "__main__":
    main()
