"""Seconds, FLOPs and kernel launches per training iteration of each method (issue: speed).

For svgp, gpnet and fbnn at the sizes of ``--preset`` (``uci``, the default: M in {100, 500}, batch
500, D = 8, RFE with 1000 hidden units, config.yaml's training defaults; ``snelson``: N = 100, D = 1,
batch 20, M in {2, 5, 20}, RFE with 20 hidden units and every other setting of
``dataset_options.snelson``; each read from config.yaml; ``--methods`` takes any registered method or
config variant, e.g. orth orthnat autogp) it runs the real training loop (``gpstudy.training.fit``) on
S splits at once and prints, per row: milliseconds per iteration (the fastest and the median of
``--repeats`` timings), GFLOP per iteration (matrix products, Cholesky factors and triangular solves,
forward and backward, counted by ``torch.utils.flop_counter``), the achieved GFLOP/s and its share of
a ``torch.mm`` rate measured in the same run, the operators dispatched per iteration (about one kernel
launch each on a GPU; counted over 10 iterations after the first, whose fresh Adam sets up its state; on a CPU the
count does not depend on the machine's load, the times do) and the
microseconds per operator (fastest time / operators). Per-iteration cost must not grow with N.

    python benchmarks/speed.py [--preset uci|snelson] [--device cpu|cuda] [--threads K] [--splits 1 20]
                               [--iterations 10] [--repeats 3] [--dtype float64 mixed] [--compile]

``--dtype`` takes ``training.dtype`` values (float64, float32, mixed: the RFE network's feature
products in float32, the rest float64); every row is timed in each.

With ``--compile`` every row is timed again with ``training.torch_compile: true`` (a line ``compiled``
below it: its times, the first iteration's seconds, which compile, and its speed relative to eager's).

With ``--splits 1 20`` every row is timed for one split and for a batch of 20, and ``batch/one``
says what the batch costs per iteration relative to one split alone.

    python benchmarks/speed.py --against REF [--rows uci svgp] [--rounds 5] [--seconds 0.5]

compares this tree (its working copy) with commit REF in one run: every (method, M) of config.yaml's
experiments snelson, uci, odvgp and autogp at its preset's sizes, each side a process of its own with its
tree's gpstudy and its tree's copy of this script, one thread, float64, timings alternated, and prints a markdown
table of the median ms per iteration of each side and their ratio (docs/speed.md: the check a speed change runs
before it lands).
"""

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, addmm_flop, baddbmm_flop, register_flop_formula

import gpstudy
from gpstudy.data.registry import DATASETS
from gpstudy.diagnostics.device_check import matmul_rate
from gpstudy.likelihoods import LIKELIHOODS
from gpstudy.methods import Problem, build_method
from gpstudy.numerics import DTYPES
from gpstudy.runtime.flags import keep_freed_memory
from gpstudy.study import load_config, run_settings
from gpstudy.training import fit
from gpstudy.training.run import initial_kernel, initial_likelihood, method_config

ROOT = Path(__file__).resolve().parents[1]  # the tree this script belongs to ("this" of --against)
# the methods' default options: the config.yaml beside the gpstudy imported, so that a tree's code runs with its own
# (gpstudy.study.DEFAULT_CONFIG names the same file, but the trees of commits before it, e.g. --against 8edbaa2,
# lack it)
STUDY = load_config(Path(gpstudy.__file__).resolve().parents[1] / "config.yaml")
aten = torch.ops.aten
COUNTED = 10  # iterations whose operators are counted after the first (a fresh Adam's state, the sampler's start)


@dataclass(frozen=True)
class Preset:
    """The sizes of a benchmark row: the data set whose config.yaml options the runs take (None: the
    ``training`` and ``methods`` defaults), synthetic inputs of dimension D, and the M to time."""

    dataset: str | None
    D: int
    M: tuple[int, ...]
    n: int | None  # N; None: ``--sizes``

    @property
    def batch(self) -> int:
        """The minibatch size its runs train with."""
        return run_settings(STUDY, self.dataset, method="svgp", M=1).batch_size

    @property
    def hidden(self) -> int:
        """The RFE's hidden units its runs train with."""
        return run_settings(STUDY, self.dataset, method="gpnet", M=1).options["hidden_units"]


PRESETS = {
    "uci": Preset(None, 8, tuple(STUDY["experiments"]["uci"]["methods"]["svgp"]), None),  # STUDY.md's UCI settings
    "snelson": Preset(
        "snelson",
        DATASETS["snelson"].shape[1],
        tuple(STUDY["experiments"]["snelson"]["methods"]["svgp"]),
        STUDY["dataset_options"]["snelson"]["train_size"],
    ),
    # AutoGP's MNIST rows: D = 784, softmax over 10 classes; N = 1000, the largest M, so that k-means at M = N
    # is the points themselves (seconds, not minutes at D = 784; a step's cost does not depend on N)
    "mnist": Preset(
        "mnist",
        DATASETS["mnist"].shape[1],
        tuple(STUDY["experiments"]["autogp"]["methods"]["autogp"]),
        max(STUDY["experiments"]["autogp"]["methods"]["autogp"]),
    ),
}
EXPERIMENT_PRESETS = {"snelson": "snelson", "uci": "uci", "odvgp": "uci", "autogp": "mnist"}  # --against's rows
UCI_N = 8192  # N of the uci preset's rows (kin8nm's size)
UCI = PRESETS["uci"]
D, BATCH, HIDDEN = UCI.D, UCI.batch, UCI.hidden  # the UCI rows' sizes (gpu_check.py prints them)


register_flop_formula(aten.addmm_, get_raw=True)(addmm_flop)  # the in-place GEMMs (BlockTril's, the Gram's by halves):
register_flop_formula(aten.baddbmm_, get_raw=True)(baddbmm_flop)  # torch counts only the functional ones


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


def build(
    method_name: str, M: int, n: int, splits: int, device: torch.device, dtype: str = "float64", preset: Preset = UCI
):
    """A method on ``splits`` synthetic splits of ``n`` points of ``preset``'s dimension, with its data and
    generators, in ``dtype`` (a ``training.dtype``), with the settings of ``preset``'s data set."""
    generators = [torch.Generator(device=device).manual_seed(s) for s in range(splits)]
    settings = run_settings(STUDY, preset.dataset, method=method_name, M=M, dtype=dtype)  # a method or a variant
    x = torch.randn(splits, n, preset.D, dtype=DTYPES[settings.dtype][0], device=device, generator=generators[0])
    y = torch.sin(x.sum(-1))
    if LIKELIHOODS[settings.likelihood].task == "classification":  # labels 0, 1, ..., classes - 1 in turn
        y = torch.arange(n, device=device).remainder(settings.likelihood_options.get("classes", 2)).to(x.dtype)
        y = y.expand(splits, n)
    kernel = initial_kernel(settings, preset.D, (splits,)).to(device)
    likelihood = initial_likelihood(settings, (splits,)).to(device)
    config = method_config(settings, n, np.zeros((splits, preset.D)), np.ones((splits, preset.D)))  # x standardized
    method = build_method(settings.method, Problem(x, y, kernel, likelihood, generators), config).to(device)
    return method, x, y, generators


def measure(
    method_name: str,
    M: int,
    n: int,
    splits: int,
    iterations: int,
    device: torch.device,
    dtype: str = "float64",
    preset: Preset = UCI,
    repeats: int = 1,
    torch_compile: bool = False,
) -> dict:
    """Seconds (the fastest of ``repeats`` timings of ``iterations``, and their median), FLOPs and
    operators of one iteration of ``fit`` (after one warm-up iteration, whose seconds are ``first``) in
    ``dtype``; with ``torch_compile`` (``training.torch_compile``) the seconds only: the warm-up compiles,
    and the counters' dispatch modes would run the loss eagerly."""
    method, x, y, generators = build(method_name, M, n, splits, device, dtype, preset)
    settings = run_settings(STUDY, preset.dataset, method=method_name, M=M)
    run = dict(
        batch_size=settings.batch_size,
        lr=settings.lr,
        generators=generators,
        evaluate=dict,
        eval_every=10**9,
        torch_compile=torch_compile,
    )
    first_seconds = fit(method, x, y, iterations=1, **run)[1]  # warm-up: allocations, kernels, compilation
    timings = [fit(method, x, y, iterations=iterations, **run)[1] / iterations for _ in range(repeats)]
    if torch_compile:
        return {"seconds": min(timings), "median": statistics.median(timings), "first": first_seconds}
    flops, first, more = FlopCounterMode(display=False), OperatorCount(), OperatorCount()
    with flops, first:
        fit(method, x, y, iterations=1, **run)
    with more:
        fit(method, x, y, iterations=1 + COUNTED, **run)
    operators = (sum(more.counts.values()) - sum(first.counts.values())) / COUNTED  # without the Adam's set-up
    return {
        "seconds": min(timings),
        "median": statistics.median(timings),
        "flops": flops.get_total_flops(),
        "operators": operators,
        "first": first_seconds,
    }


@dataclass(frozen=True)
class Row:
    """A (method or variant, M) the study trains, at the sizes of its experiment's preset."""

    preset: str
    method: str
    M: int

    @property
    def name(self) -> str:
        return f"{self.preset} {self.method} M{self.M}"


def study_rows() -> list[Row]:
    """Every (method, M) of config.yaml's experiments in ``EXPERIMENT_PRESETS``, each once, in the config's order."""
    rows = []
    for experiment, preset in EXPERIMENT_PRESETS.items():
        for method, Ms in STUDY["experiments"][experiment]["methods"].items():
            rows += [row for row in (Row(preset, method, M) for M in Ms) if row not in rows]
    return rows


def serve(seconds: float) -> None:
    """``--serve``, a side of ``--against``: on one thread, for each row read from stdin (one JSON object a line),
    one timing of the training loop, answered as a JSON line {"ms": per iteration, "iterations": timed}. A row
    is built and warmed up (one iteration, then one more to choose iterations lasting about ``seconds``) on
    its first request; its later timings continue training it. The first line says which gpstudy is timed."""
    torch.set_num_threads(1)
    keep_freed_memory()
    print(json.dumps({"gpstudy": str(Path(gpstudy.__file__).resolve().parent)}), flush=True)
    runs = {}
    for line in sys.stdin:
        row = Row(**json.loads(line))
        if row not in runs:
            preset = PRESETS[row.preset]
            method, x, y, generators = build(
                row.method, row.M, preset.n or UCI_N, 1, torch.device("cpu"), preset=preset
            )
            settings = run_settings(STUDY, preset.dataset, method=row.method, M=row.M)
            run = dict(
                batch_size=settings.batch_size, lr=settings.lr, generators=generators, evaluate=dict, eval_every=10**9
            )
            fit(method, x, y, iterations=1, **run)  # warm-up: a fresh Adam, allocations
            iterations = max(1, round(seconds / fit(method, x, y, iterations=1, **run)[1]))
            runs[row] = (method, x, y, run, iterations)
        method, x, y, run, iterations = runs[row]
        elapsed = fit(method, x, y, iterations=iterations, **run)[1]
        print(json.dumps({"ms": elapsed / iterations * 1e3, "iterations": iterations}), flush=True)


class Side:
    """A ``--serve`` subprocess timing rows with the gpstudy (and config.yaml) of the tree ``root``, by that tree's
    own copy of this script: it builds the rows with its tree's functions, so that a commit that moved or renamed
    them (issue 46's wings) is timed as it was."""

    def __init__(self, root: Path, seconds: float):
        env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        self.process = subprocess.Popen(
            [sys.executable, str(root / "benchmarks" / "speed.py"), "--serve", "--seconds", str(seconds)],
            cwd=root,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        timed = Path(self._answer()["gpstudy"])
        if timed != root.resolve() / "gpstudy":
            self.close()
            raise RuntimeError(f"the side for {root} imported gpstudy from {timed}")

    def _answer(self) -> dict:
        """The next JSON line of the subprocess (other lines, if a library prints any, skipped)."""
        for line in self.process.stdout:
            if line.startswith("{"):
                return json.loads(line)
        raise RuntimeError(f"the timing subprocess ended (exit code {self.process.wait()}); its error is above")

    def time(self, row: Row) -> float:
        """Milliseconds per iteration of one timing of ``row``."""
        self.process.stdin.write(json.dumps(row.__dict__) + "\n")
        self.process.stdin.flush()
        return self._answer()["ms"]

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def export_commit(ref: str, folder: Path) -> str:
    """The tree of commit ``ref`` of this repository written into ``folder`` (``git archive``); its hash."""
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", f"{ref}^{{commit}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    return commit


def compare(ref: str, rows: list[Row], rounds: int, seconds: float) -> tuple[str, dict[Row, dict[str, list[float]]]]:
    """This tree (its working copy, uncommitted changes included) against commit ``ref``, each row timed
    ``rounds`` times on each side, alternating (this, REF in even rounds, REF, this in odd ones: a drift of
    the machine's speed falls on both); the commit's hash and the milliseconds per iteration of each timing."""
    times = {row: {"this": [], "ref": []} for row in rows}
    with tempfile.TemporaryDirectory(prefix="speed-ref-") as folder:
        commit = export_commit(ref, Path(folder))
        sides = {"this": Side(ROOT, seconds), "ref": Side(Path(folder), seconds)}
        try:
            for round_ in range(rounds):
                for row in rows:
                    for side in ("this", "ref") if round_ % 2 == 0 else ("ref", "this"):
                        times[row][side].append(sides[side].time(row))
        finally:
            for side in sides.values():
                side.close()
    return commit, times


SLOWER = 0.05  # a row slower than REF by more than this is marked; its commit says so, with the reason (docs/speed.md)


def comparison_table(times: dict[Row, dict[str, list[float]]]) -> str:
    """A markdown table: row, the median ms per iteration of this tree and of REF, their ratio (this / REF)
    and the range of the rounds' own ratios; ``slower`` where the ratio exceeds 1 + ``SLOWER``."""
    lines = ["| row | ms (this) | ms (REF) | ratio | rounds' ratios |", "| --- | ---: | ---: | ---: | --- |"]
    for row, sides in times.items():
        this, ref = statistics.median(sides["this"]), statistics.median(sides["ref"])
        each = [a / b for a, b in zip(sides["this"], sides["ref"])]
        mark = " slower" if this / ref > 1 + SLOWER else ""
        lines.append(
            f"| {row.name} | {this:.3f} | {ref:.3f} | {this / ref:.3f}{mark} | {min(each):.3f}-{max(each):.3f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--against",
        metavar="REF",
        help="compare this tree with commit REF: every row of the study, one thread, alternating",
    )
    parser.add_argument(
        "--rows",
        nargs="+",
        help="--against: only the rows whose name has every word of one of these ('uci svgp', 'M500')",
    )
    parser.add_argument("--rounds", type=int, default=5, help="--against: timings per row and side")
    parser.add_argument("--seconds", type=float, default=0.5, help="--against: about how long each timing lasts")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # a side of --against
    parser.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default="uci",
        help="sizes and settings from config.yaml: uci (training defaults) or snelson",
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--iterations", type=int, default=10, help="iterations per timing")
    parser.add_argument("--repeats", type=int, default=1, help="timings per row (the fastest and the median shown)")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    parser.add_argument("--sizes", type=int, nargs="+", help="training-set sizes N (default: the preset's, uci 8192)")
    parser.add_argument("--splits", type=int, nargs="+", default=[1], help="splits trained as one batch")
    parser.add_argument("--methods", nargs="+", default=["svgp", "gpnet", "fbnn"])
    parser.add_argument("--M", type=int, nargs="+", help="M values (default: the preset's)")
    parser.add_argument(
        "--dtype",
        nargs="+",
        default=["float64"],
        choices=sorted(DTYPES),
        help="training.dtype values to time each row in",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="also time each row with training.torch_compile: true (its first iteration compiles)",
    )
    parser.add_argument(
        "--malloc",
        choices=["keep", "default"],
        default="keep",
        help="keep freed memory for reuse, as training jobs do (gpstudy.runtime.flags), or glibc's default",
    )
    args = parser.parse_args()
    if args.serve:
        serve(args.seconds)
        return
    if args.against:
        rows = [
            row
            for row in study_rows()
            if not args.rows or any(set(words.split()) <= set(row.name.split()) for words in args.rows)
        ]
        print(
            f"this: {ROOT} (working tree); REF: {args.against}; {args.rounds} rounds, one thread, "
            f"~{args.seconds} s a timing, float64, one split",
            flush=True,
        )
        commit, times = compare(args.against, rows, args.rounds, args.seconds)
        print(f"REF = {commit}\n{comparison_table(times)}")
        return
    preset = PRESETS[args.preset]
    sizes = args.sizes or [preset.n or UCI_N]
    if args.malloc == "keep":
        keep_freed_memory()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    rate = matmul_rate(device, torch.float64)  # float64's: "of mm" says how much of the float64 rate a row reaches
    print(
        f"device: {name}; preset {args.preset}: batch {preset.batch}, D {preset.D}, RFE {preset.hidden} hidden "
        f"units, torch {torch.__version__}, malloc {args.malloc}; {args.repeats} x {args.iterations} iterations"
    )
    print(
        f"torch.mm [1000, 2000] x [2000, 2000]: float64 {rate:.1f} GFLOP/s, "
        f"float32 {matmul_rate(device, torch.float32):.1f} GFLOP/s"
    )
    print(
        f"{'method':7s} {'M':>4s} {'N':>6s} {'splits':>6s} {'dtype':>7s} {'ms/it':>8s} {'median':>8s} "
        f"{'GFLOP/it':>9s} {'GFLOP/s':>8s} {'of mm':>6s} {'ops/it':>7s} {'us/op':>6s} {'batch/one':>9s}"
    )
    for method in args.methods:
        for M in args.M or preset.M:
            for n in sizes:
                for dtype in args.dtype:
                    one = None
                    for splits in args.splits:
                        row = eager = measure(
                            method, M, n, splits, args.iterations, device, dtype, preset, args.repeats
                        )
                        if splits == 1:
                            one = row["seconds"]
                        achieved = row["flops"] / row["seconds"] / 1e9
                        ratio = f"{row['seconds'] / one:9.2f}" if one and splits > 1 else f"{'':9s}"
                        print(
                            f"{method:7s} {M:4d} {n:6d} {splits:6d} {dtype:>7s} {row['seconds'] * 1e3:8.3f} "
                            f"{row['median'] * 1e3:8.3f} {row['flops'] / 1e9:9.4f} {achieved:8.2f} "
                            f"{achieved / rate:6.1%} {row['operators']:7.1f} "
                            f"{row['seconds'] * 1e6 / row['operators']:6.2f} {ratio}",
                            flush=True,
                        )
                        if args.compile:
                            row = measure(
                                method,
                                M,
                                n,
                                splits,
                                args.iterations,
                                device,
                                dtype,
                                preset,
                                args.repeats,
                                torch_compile=True,
                            )
                            print(
                                f"{'':7s} {'':4s} {'':6s} {'':6s} {'compiled':>7s} {row['seconds'] * 1e3:8.3f} "
                                f"{row['median'] * 1e3:8.3f}  first iteration (compilation) {row['first']:.1f} s, "
                                f"{eager['seconds'] / row['seconds']:.2f}x eager's speed",
                                flush=True,
                            )


if __name__ == "__main__":
    main()
