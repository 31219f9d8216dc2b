"""Seconds of the CNN-GP Gram block and of one NTK-network step at experiment 4's sizes (issue 16).

    python benchmarks/cnngp.py [--device cpu|cuda] [--threads K] [--repeats 3] [--dtype float64]

Rows: the CNN-GP Gram K(x) of 128 random MNIST-sized images (1x28x28, pixels in [-1, 1]; the
symmetric block GPNet needs over Z = [X_B; X_M]: 8128 pairs and the diagonal), the block K(x1, x2)
of 128 x 128 distinct images (16384 pairs), both without autograd (experiment 4 keeps the prior
fixed); then one forward and backward of the NTK network at the paper's sizes (10 classes) on
64 + 64 points: mean, factor ``[10, 128, 51401]``, covariance, a KL to N(0, I) standing in for
GPNet's objective, backward. Prints the median of ``--repeats`` runs after one warm-up and, on a
GPU, the peak memory.
"""

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from gpstudy.gaussian import kl_divergence_of_covariances
from gpstudy.kernels.cnngp import CNNGP
from gpstudy.nets.ntk import HIDDEN_UNITS, NTK

IMAGE = (1, 28, 28)  # MNIST
POINTS, CLASSES = 64 + 64, 10  # batch + measurement points (experiment 4)


def seconds(step: Callable[[], object], device: torch.device, repeats: int) -> float:
    """The median wall time of ``step`` over ``repeats`` runs, after one warm-up."""
    times = []
    for run in range(repeats + 1):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if run:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def report(name: str, value: float, device: torch.device) -> None:
    memory = ""
    if device.type == "cuda":
        memory = f"  peak {torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB"
        torch.cuda.reset_peak_memory_stats(device)
    print(f"{name:<48} {value:8.3f} s{memory}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    generator = torch.Generator().manual_seed(0)
    dim = IMAGE[0] * IMAGE[1] * IMAGE[2]
    x = (2 * torch.rand(2, POINTS, dim, generator=generator, dtype=dtype) - 1).to(device)
    print(f"device {device}, {torch.get_num_threads()} CPU threads, {args.dtype}, torch {torch.__version__}")

    kernel = CNNGP(dim, image_shape=IMAGE, dtype=dtype).to(device)
    with torch.no_grad():
        report(f"CNN-GP K(x), {POINTS} images (symmetric)", seconds(lambda: kernel(x[0]), device, args.repeats), device)
        report(
            f"CNN-GP K(x1, x2), {POINTS} x {POINTS} images",
            seconds(lambda: kernel(x[0], x[1]), device, args.repeats),
            device,
        )

    network = NTK(kernel, HIDDEN_UNITS, generator, classes=CLASSES).to(device)
    zeros = torch.zeros(CLASSES, POINTS, dtype=dtype, device=device)
    eye = torch.eye(POINTS, dtype=dtype, device=device).expand(CLASSES, POINTS, POINTS)

    def step() -> None:
        network.zero_grad(set_to_none=True)
        mean, factor = network(x[0])
        kl_divergence_of_covariances(mean, network.covariance(factor), zeros, eye).sum().backward()

    report(f"NTK forward + backward, {POINTS} points, {CLASSES} classes", seconds(step, device, args.repeats), device)


if __name__ == "__main__":
    main()
