"""Does the same short training give the same bits, run after run, on a loaded machine?

Trains SVGP (M = 100, N = 2000, batch 500, 50 steps) ``--runs`` times per torch thread count in fresh
processes while ``--busy`` busy loops load the cores, alternating the thread counts, and prints how many
distinct parameter hashes each count gave (1 means reproducible in that test). Thread counts give different
numbers from each other (k-means shares torch's OpenMP threads), so each is compared with itself.

    python benchmarks/determinism.py [--runs 12] [--busy 2] [--threads 1 2]
"""

import argparse
import hashlib
import os
import subprocess
import sys
from collections import Counter


def train_and_hash(threads: int) -> str:
    """The sha1 of every parameter after the short training (run in a child process)."""
    import torch

    sys.path.insert(0, os.path.dirname(__file__))
    from gpstudy.training import fit

    from speed import build

    torch.set_num_threads(threads)
    method, x, y, generators = build("svgp", 100, 2000, 1, torch.device("cpu"))
    fit(method, x, y, iterations=50, batch_size=500, lr=0.003, generators=generators, evaluate=dict, eval_every=10**9)
    digest = hashlib.sha1()
    for parameter in method.parameters():
        digest.update(parameter.detach().numpy().tobytes())
    return digest.hexdigest()[:12]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=12, help="trainings per setting")
    parser.add_argument("--busy", type=int, default=2, help="busy loops loading the machine meanwhile")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch thread counts compared")
    args = parser.parse_args()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    hashes = {threads: Counter() for threads in args.threads}
    try:
        for _ in range(args.runs):
            for threads in args.threads:
                child = subprocess.run(
                    [sys.executable, __file__, "--child", str(threads)], capture_output=True, text=True, check=True
                )
                hashes[threads][child.stdout.strip()] += 1
    finally:
        for process in busy:
            process.kill()
    print(f"{args.runs} runs per setting, {args.busy} busy loops beside them")
    for threads, counts in hashes.items():
        print(f"{threads} thread(s): {len(counts)} distinct result(s): {dict(counts)}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        print(train_and_hash(int(sys.argv[2])))
    else:
        main()
