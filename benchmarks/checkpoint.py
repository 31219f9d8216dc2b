"""Seconds the training loop is blocked per checkpoint: a synchronous write against the background writer.

Builds a method on S synthetic splits (default: GPNet, M = 100, 20 splits of 1000 points, RFE with 1000
hidden units, float64: a 1.2 GB checkpoint with Adam's moments), takes one Adam step so the optimizer has
its state, and on the training device times, ``--repeats`` times each:

- ``synchronous``: ``torch.save`` of the live state to a file (what the loop did before it had a writer);
- ``blocked``: :meth:`Checkpointer.write`, the time the loop waits for the host copy (the first copy
  goes into fresh memory, later ones reuse it);
- ``background``: the writer thread's write after that, which training overlaps.

    python benchmarks/checkpoint.py [--method gpnet] [--M 100] [--splits 20] [--n 1000] [--repeats 3]
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(__file__))
from gpstudy import generators as draws  # noqa: E402
from gpstudy.training.checkpoint import Checkpointer, save  # noqa: E402

from speed import build  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", default="gpnet")
    parser.add_argument("--M", type=int, default=100)
    parser.add_argument("--splits", type=int, default=20)
    parser.add_argument("--n", type=int, default=1000, help="training points per split")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(1)
    device = torch.device(args.device)
    method, x, y, generators = build(args.method, args.M, args.n, args.splits, device)
    optimizer = torch.optim.Adam(method.adam_parameters(), lr=1e-3)
    method.loss(x[..., :500, :], y[..., :500], 1, generators).sum().backward()
    optimizer.step()
    state = {
        "method": method.state_dict(),
        "optimizer": optimizer.state_dict(),
        "generators": draws.get_state(generators),
        "step": 1,
        "curve": [],
        "seconds": 0.0,
        "fingerprint": "",
    }
    with tempfile.TemporaryDirectory(dir=Path(__file__).resolve().parents[1]) as folder:
        path = Path(folder) / "checkpoint.pt"
        with Checkpointer(path, device, every=1, minutes=None) as checkpoints:
            for repeat in range(args.repeats):
                tic = time.perf_counter()
                save(path, state)
                synchronous = time.perf_counter() - tic
                tic = time.perf_counter()
                checkpoints.write(state)
                blocked = time.perf_counter() - tic
                checkpoints.wait()
                background = time.perf_counter() - tic - blocked
                print(
                    f"{path.stat().st_size / 1e9:.2f} GB: synchronous {synchronous:.2f} s, blocked {blocked:.2f} s "
                    f"(background write {background:.2f} s)",
                    flush=True,
                )


if __name__ == "__main__":
    main()
