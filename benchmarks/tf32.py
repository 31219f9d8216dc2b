"""What TF32 would do to the UCI study's numbers, measured on a CPU: GPNet-100 and FBNN-500 (the UCI
experiment's network methods) trained under ``dtype: mixed`` at config.yaml's sizes, on the first splits
of Boston and Concrete, without and with ``gpstudy.diagnostics.tf32_emulation.EmulatedTF32`` (every float32
product's operands
rounded to TF32, as a GPU's tensor cores would); each cell's splits train as one batch, as a job does.
Prints per cell the mean and largest change of test RMSE and log-likelihood over the splits, in the
metric's units and in standard errors of the paper's cell (tests/diagnostics/test_tf32_emulation.py allows 5%).

    python benchmarks/tf32.py [--data ../shared/data] [--datasets boston concrete] [--splits 3]
                              [--iterations 500] [--pretrain-iterations 1000]
"""

import argparse
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch

from gpstudy.diagnostics.tf32_emulation import study_split, train_with_and_without_tf32
from gpstudy.paper import paper_table
from gpstudy.study import load_config, run_settings

REPO = Path(__file__).resolve().parents[1]
CELLS = (("gpnet", 100), ("fbnn", 500))  # the methods TF32 would touch (RFE networks under mixed), the M of each


def measure(
    config: dict, data: Path, dataset: str, method: str, M: int, splits: int, iterations: int, pretrain_iterations: int
) -> list[dict]:
    """One row per metric of (dataset, method, M): its change under TF32 over the splits."""
    settings = run_settings(
        config,
        dataset,
        method=method,
        M=M,
        dtype="mixed",
        iterations=iterations,
        eval_every=iterations,
        pretrain_iterations=pretrain_iterations,
    )
    batch = {s: study_split(config, dataset, s, data / dataset) for s in range(splits)}
    start = time.process_time()
    with tempfile.TemporaryDirectory() as folder:
        results, rounded = train_with_and_without_tf32(batch, settings, Path(folder))
    seconds = time.process_time() - start
    rows = []
    for metric in ("rmse", "test_ll"):
        se = paper_table(metric).set_index(["dataset", "method", "M"]).loc[(dataset, method, M), "se"]
        change = pd.Series([results["tf32"][s][metric] - results["float32"][s][metric] for s in batch])
        rows.append(
            {
                "dataset": dataset,
                "method": method,
                "M": M,
                "splits": splits,
                "iterations": iterations,
                "metric": metric,
                "float32": pd.Series([results["float32"][s][metric] for s in batch]).mean(),
                "mean |change|": change.abs().mean(),
                "max |change|": change.abs().max(),
                "paper se": se,
                "max |change| / se": change.abs().max() / se,
                "products rounded": rounded,
                "cpu seconds": round(seconds),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data", help="the data sets' raw files")
    parser.add_argument("--datasets", nargs="+", default=["boston", "concrete"])
    parser.add_argument("--splits", type=int, default=3, help="the first splits of each data set, one batch")
    parser.add_argument("--iterations", type=int, default=500, help="training steps (the study: 10000)")
    parser.add_argument("--pretrain-iterations", type=int, default=None, help="default: config.yaml's")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as a study job
    config = load_config(REPO / "config.yaml")
    pretrain = args.pretrain_iterations or config["training"]["pretrain_iterations"]
    print(
        f"mixed precision without and with TF32's rounding (pretraining: {pretrain} iterations), torch "
        f"{torch.__version__}; the table so far after each cell",
        flush=True,
    )
    rows = []
    for dataset in args.datasets:
        for method, M in CELLS:
            rows += measure(config, args.data, dataset, method, M, args.splits, args.iterations, pretrain)
            print(pd.DataFrame(rows).to_markdown(index=False, floatfmt=".3g"), flush=True)


if __name__ == "__main__":
    main()
