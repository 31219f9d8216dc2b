"""The study's GPU path in one command, on a GPU machine without network: prepared on a CPU machine first.

    python benchmarks/gpu_run.py prepare [--carry gpu_carry] [--mirror DIR] [--no-wheels] [--no-pretrain]
    python benchmarks/gpu_run.py run --out DIR [--carry gpu_carry] [--total 510] [--budget STAGE=SECONDS ...]
                                     [--stages STAGE ...] [--engine auto|snakemake|direct] [--dry-run]

``prepare`` (a machine with network, or ``--mirror``) fills the carry folder (``gpu_carry/`` at the checkout's
top, git-ignored): the wheels a GPU image may lack (:data:`REQUIREMENTS` and their dependencies, for
:data:`GPU_PYTHON` on manylinux, by ``pip download``; ``--no-wheels`` skips it), Boston's splits made by the
workflow's own data stage (``gpstudy.cli.ensure_split`` under the packaged config and ``gpu_run.yaml``'s
overrides), their exact-GP pretraining as the workflow's rule does it (``gpstudy.training.run.pretrain_split``
on one split at a time, with ``exact_gp_settings``: ``methods.exact.device``, the CPU), and ``prepared.json``:
each row's costs counted on ``meta`` and estimated under each rate set (``gpu_check.prepared_estimates``, i.e.
``benchmarks/gpu_estimate.py``'s ``counts`` and ``estimate``), so that no CPU minute of the GPU machine goes to
counting. It prints the folder's size, what to carry and the command to run.

``run`` (the GPU machine) runs stages one after another, each a process of its own stopped at its budget
(:data:`BUDGETS`, ``--budget`` to change one; inside ``--total``), each writing its result as it finishes to
``gpu_run.md`` (a Markdown report rewritten whole after every addition) and ``summary.json`` in ``--out``:

- ``environment``: GPU, driver, torch, CUDA, float64 and float32 product rates, host-device copy rates;
- ``gpu_check``: ``benchmarks/gpu_check.py``'s probes, speed rows (its estimates read from ``prepared.json``),
  Cholesky and RFE sections, each appended as it completes;
- ``pretrain``: the prepared hyperparameters, and any split's prepare did not make, pretrained here on the CPU;
- one stage per row (:data:`ROWS`; :data:`OPTIONAL_ROWS` only where their whole budget is left): Boston's splits
  as one batch on the device through ``gpstudy.training.run_job`` (what the workflow's train rule calls): a
  warm-up and a timed calibration run, then as many iterations as fit the stage's budget, through Snakemake with
  its ``gpu`` resource where Snakemake is installed (``--engine``), else through ``run_job`` itself; then a short
  run whose training steps count host synchronisations (by dispatch, and on CUDA as CUDA reports them);
- a summary table, printed last: ms per iteration measured beside the estimate's optimistic / central /
  pessimistic, peak CUDA memory, synchronisations, status per split, RMSE and test log-likelihood.

A stage that fails (an exception, a CUDA error, a crash) or overruns its budget (killed) is recorded as such and
the next stage runs; the report says what did not run. ``--dry-run`` runs everything on the CPU with tiny sizes and
budgets (``tests/benchmarks/test_gpu_run.py``).
"""

import argparse
import importlib.metadata
import importlib.util
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from concurrent.futures import ProcessPoolExecutor
from contextlib import chdir
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent
ROOT = BENCHMARKS.parent
CARRY = ROOT / "gpu_carry"  # the folder `run` needs besides the checkout (git-ignored)
OVERRIDES = "gpu_run.yaml"  # in the carry folder: the config's overrides, merged over the packaged config.yaml
PREPARED = "prepared.json"  # in the carry folder: rows, splits, commit, estimates
WHEELS = "wheels"  # in the carry folder: the wheels of REQUIREMENTS
REPORT, SUMMARY = "gpu_run.md", "summary.json"  # in --out
DATASET, EXPERIMENT = "boston", "uci"  # the slice of the study that runs
ROWS = ("svgp-100", "svgp-500", "gpnet-100", "gpnet-500", "fbnn-500")  # method-M, in the order they run
OPTIONAL_ROWS = ("orth-300", "orthnat-300")  # run only where their whole budget is left
CHECK_METHODS = ("svgp", "gpnet", "fbnn")  # the methods of gpu_check's speed rows (at the rows' M, 1 and S splits)
REQUIREMENTS = ("jsonschema", "pooch")  # what a GPU image may lack; versions as pyproject.toml pins them
GPU_PYTHON, GPU_PLATFORM = "3.12", "manylinux2014_x86_64"  # what the wheels are downloaded for
BUDGETS = {  # seconds per stage (the total is --total's)
    "environment": 30,
    "gpu_check": 150,
    "pretrain": 60,
    "svgp-100": 40,
    "svgp-500": 45,
    "gpnet-100": 45,
    "gpnet-500": 45,
    "fbnn-500": 45,
    "orth-300": 30,
    "orthnat-300": 30,
}
TOTAL = 510  # seconds of the whole run (under 9 minutes: one 10-minute command with room)
DRY_TOTAL, DRY_BUDGET = 300, 60  # --dry-run: every stage's budget (a cap: each takes seconds)
MIN_START = 5  # a stage with fewer seconds left than this (or than its budget, if shorter) does not start
CALIBRATION_SHARE = 0.25  # of a row's time left after its warm-up, the most its calibration may plan to use


@dataclass(frozen=True)
class Sizes:
    """The iterations of a row's stage: warm-up, calibration (timed), the most of the slice, and the steps whose
    synchronisations are counted; and the share of the time left that the slice may plan to use."""

    warmup: int
    calibration: int
    max_iterations: int | None  # None: the config's training iterations
    sync_steps: int
    share: float


SIZES, DRY_SIZES = Sizes(5, 30, None, 3, 0.8), Sizes(0, 2, 4, 2, 0.8)
DRY_CHECK = "--quick --sections speed summary"  # gpu_check under --dry-run: its report plumbing, one speed row
DRY_OVERRIDES = {  # prepare --dry-run: a carry folder for run --dry-run, small enough for a test on a CPU
    "splits": 2,
    "training": {"pretrain_iterations": 3},
    "methods": {"gpnet": {"hidden_units": 50}, "fbnn": {"hidden_units": 50}},
}


def parse_row(row: str) -> tuple[str, int]:
    """``"gpnet-500"`` -> ("gpnet", 500)."""
    match = re.fullmatch(r"([a-z][a-z0-9_]*)-(\d+)", row)
    if match is None:
        raise argparse.ArgumentTypeError(f"a row is METHOD-M, e.g. gpnet-500, not {row!r}")
    return match[1], int(match[2])


def run_config(carry: Path) -> dict:
    """The packaged config with the carry folder's overrides (``OVERRIDES``) merged over it."""
    from gpstudy.study import DEFAULT_CONFIG, load_config

    return load_config(DEFAULT_CONFIG, carry / OVERRIDES)


def splits_of(config: dict) -> tuple[int, ...]:
    from gpstudy.study import data_plan

    return data_plan(config, DATASET).splits


def data_path(config: dict, pattern: str, split: int) -> str:
    """A split's path under ``gpstudy.paths``' ``pattern`` (SPLIT, PRETRAINED), relative to a study's folder."""
    from gpstudy.study import data_plan

    return pattern.format(dataset=DATASET, protocol=data_plan(config, DATASET).protocol, split=split)


def check_rows(rows: list[str], splits: int, dry_run: bool) -> tuple[list[str], list[int], list[int]]:
    """gpu_check's speed rows for the slice's ``rows``: its methods (``CHECK_METHODS``) among them, their M, at
    1 and ``splits`` splits (the cartesian product: gpu_check times every combination); under ``dry_run`` the
    first of them at 1 split."""
    pairs = [pair for pair in map(parse_row, rows) if pair[0] in CHECK_METHODS]
    if dry_run:
        return [pairs[0][0]], [pairs[0][1]], [1]
    return list(dict.fromkeys(m for m, _ in pairs)), sorted({M for _, M in pairs}), sorted({1, splits})


# ---------------------------------------------------------------------------------------------------- prepare


def requirements() -> list[str]:
    """pyproject.toml's requirement strings of ``REQUIREMENTS`` (the one place their versions are pinned)."""
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    named = [dep for dep in dependencies if re.match(r"[A-Za-z0-9_.-]+", dep)[0].lower() in REQUIREMENTS]
    if len(named) != len(REQUIREMENTS):
        raise SystemExit(f"pyproject.toml's dependencies lack one of {REQUIREMENTS}: {dependencies}")
    return named


def download_wheels(folder: Path) -> None:
    """``pip download`` the wheels of :func:`requirements` and their dependencies for the GPU's Python."""
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:"),
            *("--python-version", GPU_PYTHON, "--platform", GPU_PLATFORM, "--dest", str(folder)),
            *requirements(),
        ],
        check=True,
    )


def pretrain_split(carry: str, split: int, root: str) -> str:
    """Pretrain one split as the workflow's pretrain rule does (its job's function,
    ``gpstudy.training.run.pretrain_split``, on its threads and the exact GP's settings), its hyperparameters
    written under ``root`` at ``gpstudy.paths.PRETRAINED``; the file's path."""
    import torch

    from gpstudy import paths
    from gpstudy.study import exact_gp_settings
    from gpstudy.training.run import PRETRAIN_THREADS, pretraining_reads
    from gpstudy.training.run import pretrain_split as pretrain_job

    torch.set_num_threads(PRETRAIN_THREADS)
    config = run_config(Path(carry))
    target = Path(root) / data_path(config, paths.PRETRAINED, split)
    checkpoint = Path(root) / data_path(config, paths.PRETRAIN_CHECKPOINT, split)
    reads = pretraining_reads(exact_gp_settings(config, DATASET))
    pretrain_job(split, Path(carry) / data_path(config, paths.SPLIT, split), reads, target, checkpoint)
    return str(target)


def pretrain_missing(carry: Path, root: Path, splits: tuple[int, ...], workers: int) -> list[str]:
    """:func:`pretrain_split` of every split whose file under ``root`` is missing, ``workers`` at a time (as
    ``snakemake --cores`` runs the rule's one-thread jobs); the files made."""
    from gpstudy import paths

    config = run_config(carry)
    missing = [s for s in splits if not (root / data_path(config, paths.PRETRAINED, s)).exists()]
    if not missing:
        return []
    with ProcessPoolExecutor(min(workers, len(missing)), mp_context=get_context("spawn")) as pool:
        return list(pool.map(pretrain_split, [str(carry)] * len(missing), missing, [str(root)] * len(missing)))


def needs_pretraining(config: dict, rows: list[str]) -> bool:
    from gpstudy.study import run_settings

    return any(run_settings(config, DATASET, method=m, M=M).pretrain for m, M in map(parse_row, rows))


def commit() -> str:
    """The checkout's commit, "-dirty" when its tracked files changed (what ``run`` reports it ran)."""
    try:
        described = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=40"], cwd=ROOT, capture_output=True, text=True
        )
        return described.stdout.strip() or "unknown"
    except OSError:
        return "unknown (no git)"


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def prepare(args: argparse.Namespace) -> None:
    """Fill the carry folder (module docstring) and print what to carry and run."""
    import gpu_check  # beside this script
    import yaml

    from gpstudy.cli import ensure_split

    carry = args.carry.resolve()
    carry.mkdir(parents=True, exist_ok=True)
    if not args.no_wheels:
        download_wheels(carry / WHEELS)
    overrides = {"datasets": [DATASET], "splits": args.splits, "run_experiments": [EXPERIMENT]}
    overrides |= DRY_OVERRIDES if args.dry_run else {}
    if args.mirror:
        overrides["mirror"] = str(args.mirror.resolve())
    (carry / OVERRIDES).write_text(yaml.safe_dump(overrides, sort_keys=False))
    config = run_config(carry)
    with chdir(carry):  # the workflow's data stage, its files under the carry folder at gpstudy.paths' places
        for split in splits_of(config):
            ensure_split(config, DATASET, split)
    print(f"{len(splits_of(config))} splits of {DATASET} in {carry / 'data'}", flush=True)
    if not args.no_pretrain and needs_pretraining(config, args.rows):
        made = pretrain_missing(carry, carry, splits_of(config), os.cpu_count() or 1)
        print(f"pretrained {len(made)} splits", flush=True)
    methods, Ms, split_counts = check_rows(args.rows, len(splits_of(config)), args.dry_run)
    counted = [(m, M, s) for m in methods for M in Ms for s in split_counts]
    counted += [(*parse_row(row), len(splits_of(config))) for row in args.rows]
    estimates = gpu_check.prepared_estimates(counted)
    prepared = {"rows": args.rows, "splits": len(splits_of(config)), "commit": commit(), **estimates}
    (carry / PREPARED).write_text(json.dumps(prepared, indent=2) + "\n")
    wheels = folder_bytes(carry / WHEELS) if (carry / WHEELS).exists() else 0
    relative = carry.relative_to(ROOT) if carry.is_relative_to(ROOT) else carry
    print(
        f"{carry}: {folder_bytes(carry) / 2**20:.2f} MiB ({wheels / 2**20:.2f} MiB of wheels); "
        f"{len(estimates[gpu_check.ESTIMATES])} rows counted on meta\n"
        f"carry: [{json.dumps(str(relative))}]\n"
        f"on the GPU, from the checkout's top: python benchmarks/gpu_run.py run --carry {relative} --out $OUT"
    )


# ---------------------------------------------------------------------------------------------------- run


def install_wheels(carry: Path, site: Path) -> list[str]:
    """Unpack into ``site`` the carried wheels whose distribution this Python lacks (a wheel is a zip laid out
    as site-packages); the wheels unpacked."""
    unpacked = []
    for wheel in sorted((carry / WHEELS).glob("*.whl")):
        name = wheel.name.split("-")[0]
        try:
            importlib.metadata.version(name)
            continue
        except importlib.metadata.PackageNotFoundError:
            pass
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
        unpacked.append(wheel.name)
    return unpacked


@dataclass(frozen=True)
class Stage:
    """One stage of ``run``: its name, its budget in seconds, its command, and whether it runs only where its
    whole budget is left."""

    name: str
    budget: float
    command: list[str]
    optional: bool = False


def plan(args: argparse.Namespace, prepared: dict) -> list[Stage]:
    """The stages of ``run``, in order (``--stages`` picks among them)."""
    child = [sys.executable, str(Path(__file__).resolve()), "stage"]
    common = ["--carry", str(args.carry), "--out", str(args.out), "--device", args.device, "--engine", args.engine]
    common += ["--dry-run"] * args.dry_run
    rows = [row for row in prepared["rows"] if row in args.rows] if args.rows else prepared["rows"]
    methods, Ms, split_counts = check_rows(rows, prepared["splits"], args.dry_run)
    check = [sys.executable, str(BENCHMARKS / "gpu_check.py"), "--device", args.device, "--append"]
    check += ["--out", str(args.out / REPORT), "--estimates", str(args.carry / PREPARED)]
    check += ["--sections", "probes", "speed", "cholesky", "block_tril", "summary"]
    check += ["--speed-methods", *methods, "--M", *map(str, Ms), "--splits", *map(str, split_counts)]
    check += DRY_CHECK.split() * args.dry_run  # after the speed rows' options: argparse keeps the last
    stages = [
        Stage("environment", 0, [*child, "environment", *common]),
        Stage("gpu_check", 0, check),
        Stage("pretrain", 0, [*child, "pretrain", *common]),
        *(Stage(row, 0, [*child, row, *common], row in OPTIONAL_ROWS) for row in rows),
    ]
    stages = [
        Stage(s.name, args.budget.get(s.name, DRY_BUDGET if args.dry_run else BUDGETS[s.name]), s.command, s.optional)
        for s in stages
    ]
    return [stage for stage in stages if args.stages is None or stage.name in args.stages]


def run_stage(stage: Stage, seconds_left: float, env: dict, log: Path) -> dict:
    """Run ``stage`` in a process group of its own, killed at its budget (or the total's end); its record."""
    budget = min(stage.budget, seconds_left)
    if stage.optional and seconds_left < stage.budget:
        return {"stage": stage.name, "status": f"not run: {seconds_left:.0f} s left of the total, under its budget"}
    if budget < min(MIN_START, stage.budget):
        return {"stage": stage.name, "status": f"not run: {seconds_left:.0f} s left of the total"}
    env = {**env, "GPU_RUN_SECONDS": f"{budget:.1f}"}  # the stage's own budget, for planning its iterations
    tic = time.monotonic()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as output:
        process = subprocess.Popen(
            stage.command, stdout=output, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            code = process.wait(timeout=budget)
            status = "done" if code == 0 else f"failed: exit status {code} (its log: {log.name})"
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the stage and whatever it started
            process.wait()
            status = f"timed out: stopped at its budget of {budget:.1f} s"
    return {"stage": stage.name, "status": status, "seconds": round(time.monotonic() - tic, 1), "budget": budget}


def parse_budget(text: str) -> tuple[str, float]:
    name, _, seconds = text.partition("=")
    if name not in BUDGETS or not seconds:
        raise argparse.ArgumentTypeError(
            f"--budget takes STAGE=SECONDS, STAGE one of {', '.join(BUDGETS)}; not {text!r}"
        )
    return name, float(seconds)


def run(args: argparse.Namespace) -> None:
    """Every stage in turn, then the summary (module docstring)."""
    args.carry, args.out = args.carry.resolve(), args.out.resolve()
    if not (args.carry / PREPARED).is_file():
        raise SystemExit(f"{args.carry / PREPARED}: no such file; run `python benchmarks/gpu_run.py prepare` first")
    prepared = json.loads((args.carry / PREPARED).read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    site = Path(tempfile.mkdtemp(prefix="gpu_run_site."))  # not under --out: nothing of it need come back
    unpacked = install_wheels(args.carry, site)
    sys.path[:0] = [str(ROOT), str(site)]  # gpstudy from this checkout, then the carried wheels
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(site), os.environ.get("PYTHONPATH", "")])}
    import torch

    if args.dry_run:
        args.device = "cpu"
    elif args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("no CUDA device is visible to torch; --dry-run runs the whole thing on the CPU")
    if args.engine == "auto":
        args.engine = "snakemake" if shutil.which("snakemake") else "direct"
    import gpu_check

    total = args.total if args.total is not None else DRY_TOTAL if args.dry_run else TOTAL
    stages = plan(args, prepared)
    report = gpu_check.Report(args.out / REPORT)
    report.add(
        [
            f"# gpstudy GPU run ({'dry run on the CPU' if args.dry_run else args.device})",
            "",
            f"Command: `python benchmarks/{Path(__file__).name} {' '.join(sys.argv[1:])}`; prepared at commit "
            f"{prepared['commit']} ({prepared['splits']} splits of {DATASET}; rows {', '.join(prepared['rows'])}); "
            f"training through {args.engine}; wheels unpacked here: {', '.join(unpacked) or 'none'}.",
            "",
            f"Stages, each stopped at its budget, inside {total:.0f} s:",
            "",
            *gpu_check.table(["stage", "budget s"], [[stage.name, f"{stage.budget:.0f}"] for stage in stages]),
        ]
    )
    summary = {"command": sys.argv, "prepared_commit": prepared["commit"], "engine": args.engine, "stages": []}
    end = time.monotonic() + total
    for stage in stages:
        print(f"stage {stage.name} ...", flush=True)
        record = run_stage(stage, end - time.monotonic(), env, args.out / "logs" / f"{stage.name}.log")
        result = args.out / "stages" / f"{stage.name}.json"
        record["result"] = json.loads(result.read_text()) if result.is_file() else None
        summary["stages"].append(record)
        write_summary(args.out, summary)
        if record["status"] != "done":
            report = gpu_check.Report(args.out / REPORT, append=True)
            report.add([f"## {stage.name}: {record['status']}", "", "What it wrote before is above.", ""])
        print(f"stage {stage.name}: {record['status']}", flush=True)
    for checkpoint in (args.out / "work").rglob("*.checkpoint.pt"):  # a stopped stage's state: not worth carrying back
        checkpoint.unlink()
    lines = summary_lines(summary, prepared)
    gpu_check.Report(args.out / REPORT, append=True).add(lines)
    print("\n".join(lines))


def write_summary(out: Path, summary: dict) -> None:
    from gpstudy.io import write_json

    write_json(out / SUMMARY, summary)


def summary_lines(summary: dict, prepared: dict) -> list[str]:
    """The summary: each stage's status, then each row's measurements beside its estimate."""
    import gpu_check

    stages = [[r["stage"], r["status"], f"{r.get('seconds', 0):.1f}"] for r in summary["stages"]]
    rows = []
    for record in summary["stages"]:
        if record["stage"] not in (*ROWS, *OPTIONAL_ROWS):
            continue
        method, M = parse_row(record["stage"])
        result = record["result"] or {}
        counted = gpu_check.prepared_row(prepared, method, M, prepared["splits"])
        estimates = counted["estimates"].values() if counted else ()
        estimated = " / ".join(f"{e['iteration'] * 1e3:.2f}" for e in estimates) or "not prepared"
        syncs = result.get("syncs") or {}
        splits = result.get("splits") or {}
        ok = [s for s, split in splits.items() if split["status"] == "ok"]
        failed = sorted(set(splits) - set(ok), key=int)
        rows.append(
            [
                record["stage"],
                record["status"],
                result.get("engine", ""),
                result.get("iterations", ""),
                measured(result),
                estimated,
                _number(result.get("peak_mib"), ".0f", "not applicable on cpu"),
                " / ".join(_number(syncs.get(key), ".2f", "n/a") for key in ("deliberate", "other", "cuda"))
                if syncs
                else "",
                _number(counted and counted["costs"]["syncs"], ".2f"),
                f"{len(ok)} ok" + (f", failed: {', '.join(failed)}" if failed else "") if splits else "",
                _mean([splits[s]["rmse"] for s in ok]),
                _mean([splits[s]["test_ll"] for s in ok]),
            ]
        )
    header = [
        "row",
        "stage",
        "engine",
        "iterations",
        "ms/it measured",
        "ms/it estimated (optimistic / central / pessimistic)",
        "peak CUDA MiB",
        "syncs/it counted (deliberate / other / CUDA-reported)",
        "syncs/it prepared",
        "splits",
        "RMSE (mean of ok splits)",
        "test LL (mean of ok splits)",
    ]
    return [
        "## Summary",
        "",
        *gpu_check.table(["stage", "status", "seconds"], stages),
        *gpu_check.table(header, rows),
    ]


def measured(result: dict) -> str:
    """A row's ms per iteration: the slice's, else (a stage stopped in its slice) its calibration's, so marked."""
    if result.get("ms_per_iteration") is None and (calibration := result.get("calibration")):
        return f"{calibration['ms_per_iteration']:.2f} (calibration, {calibration['iterations']} it)"
    return _number(result.get("ms_per_iteration"), ".2f")


def _number(value, spec: str, missing: str = "") -> str:
    return missing if value is None else format(value, spec)


def _mean(values: list[float]) -> str:
    finite = [value for value in values if math.isfinite(value)]
    return f"{sum(finite) / len(finite):.4f}" if finite else ""


# ---------------------------------------------------------------------------------------------------- stages


def stage_environment(args: argparse.Namespace) -> dict:
    import gpu_check
    import torch

    facts = gpu_check.environment_facts(torch.device(args.device), 1 if args.dry_run else 5)
    gpu_check.Report(args.out / REPORT, append=True).add(
        ["## Environment", "", *gpu_check.table(["", ""], [list(fact) for fact in facts])]
    )
    return {"facts": dict(facts)}


def stage_pretrain(args: argparse.Namespace) -> dict:
    """Copy the prepared hyperparameters into the work folder; pretrain the splits still missing, on the CPU."""
    import gpu_check

    from gpstudy import paths

    config, work = run_config(args.carry), args.out / "work"
    rows = json.loads((args.carry / PREPARED).read_text())["rows"]
    if not needs_pretraining(config, rows):
        lines, result = ["No row pretrains."], {"copied": 0, "pretrained": 0}
    else:
        copied = 0
        for split in splits_of(config):
            source = args.carry / data_path(config, paths.PRETRAINED, split)
            if source.exists():
                target = work / data_path(config, paths.PRETRAINED, split)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(source, target)
                copied += 1
        made = pretrain_missing(args.carry, work, splits_of(config), os.cpu_count() or 1)
        result = {"copied": copied, "pretrained": len(made)}
        lines = [
            f"{copied} splits' hyperparameters prepared beforehand, {len(made)} pretrained here on the CPU "
            f"({os.cpu_count()} processes of one thread), as the workflow's pretrain rule does."
        ]
    gpu_check.Report(args.out / REPORT, append=True).add(["## Pretraining", "", *lines, ""])
    return result


class StepSyncs:
    """Counts host synchronisations inside each training step (``gpstudy.training.fit.train_iteration``, wrapped
    while it is active): by dispatch (``HostSyncCounter``: deliberate and other) and, on CUDA, as CUDA reports
    them (``torch.cuda.set_sync_debug_mode("warn")``, which the deliberate one turns off)."""

    def __init__(self, device):
        from gpstudy.runtime.host_sync import HostSyncCounter

        self.counter, self.device, self.steps, self.cuda = HostSyncCounter(), device, 0, 0

    def __enter__(self):
        import importlib
        import warnings

        import torch

        self.fit = importlib.import_module("gpstudy.training.fit")  # the module (gpstudy.training.fit is the function)
        self.original = self.fit.train_iteration

        def counted(*args, **kwargs):
            self.steps += 1
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                if self.device.type == "cuda":
                    torch.cuda.set_sync_debug_mode("warn")
                try:
                    with self.counter:
                        return self.original(*args, **kwargs)
                finally:
                    if self.device.type == "cuda":
                        torch.cuda.set_sync_debug_mode(0)
            self.cuda += sum("synchroniz" in str(warning.message) for warning in caught)

        self.fit.train_iteration = counted
        return self

    def __exit__(self, *exc):
        self.fit.train_iteration = self.original

    def per_step(self) -> dict:
        events = self.counter.events
        return {
            "deliberate": sum(e.deliberate for e in events) / self.steps,
            "other": sum(not e.deliberate for e in events) / self.steps,
            "cuda": self.cuda / self.steps if self.device.type == "cuda" else None,
            "places": sorted({f"{e.where} {e.reason}" for e in events if not e.deliberate}),
        }


def stage_row(args: argparse.Namespace, row: str) -> dict:
    """One row of the slice on Boston's splits (module docstring); its result, also written to the report."""
    from dataclasses import replace

    import gpu_check
    import torch

    from gpstudy import paths
    from gpstudy.diagnostics.device_check import peak_memory
    from gpstudy.io import write_json
    from gpstudy.study import run_settings
    from gpstudy.training import run_job

    deadline = time.monotonic() + float(os.environ.get("GPU_RUN_SECONDS", DRY_BUDGET)) - 1
    sizes = DRY_SIZES if args.dry_run else SIZES
    method, M = parse_row(row)
    config, work, device = run_config(args.carry), args.out / "work", torch.device(args.device)
    settings = run_settings(config, DATASET, method=method, M=M, device=args.device)
    splits = splits_of(config)
    label = f"{splits[0]}-{splits[-1]}"
    files = {s: args.carry / data_path(config, paths.SPLIT, s) for s in splits}
    hyperparameters = {s: work / data_path(config, paths.PRETRAINED, s) for s in splits} if settings.pretrain else None
    if hyperparameters and not all(path.exists() for path in hyperparameters.values()):
        raise SystemExit(f"{row} pretrains, but the pretrain stage did not write {work / paths.PRETRAINED}")
    batch = paths.BATCH.format(experiment=EXPERIMENT, dataset=DATASET, method=method, M=M, splits=label)
    labels = {"experiment": EXPERIMENT, "dataset": DATASET, "method": method, "M": M}

    def job(iterations: int, root: Path) -> dict[int, dict]:
        folder = root / batch
        return run_job(
            files,
            replace(settings, iterations=iterations),
            {s: folder / paths.SPLIT_FOLDER.format(split=s) for s in splits},
            root / paths.CHECKPOINT.format(**labels, splits=label),
            labels,
            hyperparameters,
            jobs_per_gpu=config["jobs_per_gpu"],
            gpu_lock_dir=config["gpu_lock_dir"],
        )

    out = args.out / "stages" / f"{row}.json"
    calibrating = sizes.calibration
    if sizes.warmup:
        warmup = job(sizes.warmup, work / "warmup")[splits[0]]
        per_warmup = max(warmup["seconds"], 1e-9) / sizes.warmup  # an upper bound: the first steps pay CUDA's start
        calibrating = max(1, min(calibrating, int((deadline - time.monotonic()) * CALIBRATION_SHARE / per_warmup)))
    tic = time.monotonic()
    calibration = job(calibrating, work / "calibration")[splits[0]]
    overhead = time.monotonic() - tic - calibration["seconds"]  # build and evaluation
    per_iteration = calibration["seconds"] / calibrating
    result = {
        "engine": args.engine,
        "calibration": {"iterations": calibrating, "ms_per_iteration": per_iteration * 1e3},
    }
    write_json(out, result)  # a kill in the slice below keeps the row's speed
    left = deadline - time.monotonic() - 2 * overhead  # the slice's own build and evaluation, and the sync run's
    share = sizes.share / (2 if args.engine == "snakemake" else 1)  # Snakemake's start and data jobs come first
    cap = sizes.max_iterations or settings.iterations
    iterations = max(1, min(cap, int(left * share / per_iteration)))
    result["iterations"] = iterations
    print(f"{row}: {per_iteration * 1e3:.2f} ms/it in calibration; the slice runs {iterations}", flush=True)
    if args.engine == "snakemake":
        results = snakemake_job(args, config, batch, iterations, deadline, splits)
    else:
        results = job(iterations, work)
    seconds = results[splits[0]]["seconds"]
    result |= {
        "ms_per_iteration": seconds / iterations * 1e3,
        "peak_mib": None if (peak := peak_memory(device)) is None else peak / 2**20,
        "splits": {s: {key: results[s][key] for key in ("status", "rmse", "test_ll")} for s in splits},
    }
    write_json(out, result)  # a kill in the sync run below keeps it
    report = gpu_check.Report(args.out / REPORT, append=True)
    report.add(
        [
            f"## {row} on {DATASET}'s {len(splits)} splits as one batch ({args.engine}, {args.device})",
            "",
            f"Calibration: {per_iteration * 1e3:.2f} ms/it over {calibrating} iterations after a "
            f"{sizes.warmup}-iteration warm-up; the slice: {iterations} iterations, {seconds:.1f} s of training, "
            f"{result['ms_per_iteration']:.2f} ms/it; peak CUDA memory of this stage's process: "
            f"{_number(result['peak_mib'], '.0f', 'not applicable on ' + device.type)} MiB.",
            "",
            *gpu_check.table(
                ["split", "status", "RMSE", "test LL"],
                [[s, r["status"], f"{r['rmse']:.4f}", f"{r['test_ll']:.4f}"] for s, r in result["splits"].items()],
            ),
        ]
    )
    with StepSyncs(device) as syncs:
        job(sizes.sync_steps, work / "syncs")
    result["syncs"] = syncs.per_step()
    write_json(out, result)
    counted = result["syncs"]
    report.add(
        [
            f"Host synchronisations per training step over {syncs.steps} steps: "
            f"{counted['deliberate']:.2f} deliberate, "
            f"{counted['other']:.2f} other by dispatch"
            + (f", {counted['cuda']:.2f} reported by CUDA" if counted["cuda"] is not None else "")
            + (f"; where: {'; '.join(counted['places'])}" if counted["places"] else "")
            + ".",
            "",
        ]
    )
    return result


def snakemake_job(
    args: argparse.Namespace, config: dict, batch: str, iterations: int, deadline: float, splits: tuple[int, ...]
) -> dict[int, dict]:
    """The row's job through Snakemake with its ``gpu`` resource, in a study folder of its own (it fetches from
    the carried raw files, splits and pretrains as the workflow does); each split's metrics."""
    from gpstudy import paths
    from gpstudy.io import read_json

    folder = args.out / "work" / "snakemake"
    command = [
        "snakemake",
        batch,
        "--snakefile",
        str(ROOT / "Snakefile"),
        "--directory",
        str(folder),
    ]  # target first: --config takes the rest
    command += [
        "--configfile",
        str(args.carry / OVERRIDES),
        "--cores",
        str(os.cpu_count() or 1),
        "--resources",
        "gpu=1",
    ]
    command += [
        "--config",
        f"iterations={iterations}",
        f"device={args.device}",
        f"mirror={args.carry / 'data' / 'raw'}",
    ]
    subprocess.run(command, check=True, timeout=max(1.0, deadline - time.monotonic()))
    return {s: read_json(folder / batch / paths.SPLIT_FOLDER.format(split=s) / "metrics.json") for s in splits}


def stage(args: argparse.Namespace) -> None:
    """One stage in this process: its result to ``--out``/stages/NAME.json (the report written as it goes)."""
    from gpstudy.io import write_json

    args.carry, args.out = args.carry.resolve(), args.out.resolve()
    if args.name == "environment":
        result = stage_environment(args)
    elif args.name == "pretrain":
        result = stage_pretrain(args)
    else:
        result = stage_row(args, args.name)
    write_json(args.out / "stages" / f"{args.name}.json", result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    prepared = commands.add_parser("prepare", help="fill the carry folder (a CPU machine, with network or --mirror)")
    prepared.add_argument("--carry", type=Path, default=CARRY, help=f"the carry folder (default {CARRY})")
    prepared.add_argument("--mirror", type=Path, help="a data mirror tried before the network (../shared/data)")
    prepared.add_argument("--no-wheels", action="store_true", help="skip the wheels (an image that has them)")
    prepared.add_argument("--no-pretrain", action="store_true", help="leave pretraining to the GPU machine's CPU")
    prepared.add_argument("--dry-run", action="store_true", help=f"for run --dry-run: {DRY_OVERRIDES}")
    prepared.add_argument("--splits", type=int, default=20, help="Boston's splits, one batch (default 20)")
    prepared.add_argument("--rows", nargs="+", choices=[*ROWS, *OPTIONAL_ROWS], default=[*ROWS, *OPTIONAL_ROWS])
    ran = commands.add_parser("run", help="the stages, each under its budget (the GPU machine)")
    ran.add_argument("--carry", type=Path, default=CARRY, help=f"the carry folder (default {CARRY})")
    ran.add_argument("--out", type=Path, required=True, help="report, summary, logs and the runs' files")
    ran.add_argument("--device", default="cuda", help="cuda (default) or cuda:K")
    ran.add_argument("--dry-run", action="store_true", help="everything on the CPU, tiny sizes and budgets")
    ran.add_argument("--total", type=float, help=f"seconds of the whole run (default {TOTAL}, dry run {DRY_TOTAL})")
    ran.add_argument("--budget", type=parse_budget, nargs="+", default=[], metavar="STAGE=SECONDS")
    ran.add_argument("--stages", nargs="+", choices=list(BUDGETS), help="run only these stages")
    ran.add_argument("--rows", nargs="+", choices=[*ROWS, *OPTIONAL_ROWS], help="only these of the prepared rows")
    ran.add_argument("--engine", choices=["auto", "snakemake", "direct"], default="auto")
    one = commands.add_parser("stage", help="one stage (run starts it)")
    one.add_argument("name", choices=list(BUDGETS))
    for option in ("--carry", "--out"):
        one.add_argument(option, type=Path, required=True)
    one.add_argument("--device", required=True)
    one.add_argument("--engine", required=True)
    one.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    if args.command == "prepare":
        prepare(args)
    elif args.command == "run":
        args.budget = dict(args.budget)
        run(args)
    else:
        stage(args)


if __name__ == "__main__":
    main()
