"""Run the GPU path once on a real GPU and write what happened as one Markdown report.

Nothing in this repository has run on a GPU yet: if you have one, please run

    python benchmarks/gpu_check.py            # --quick for a short pass

and open an issue with the ``gpu_report.md`` it writes attached. It reports (1) the environment
(torch, CUDA, driver, GPUs, float64 and float32 matrix-product rates); (2) every probe
(``gpstudy.diagnostics.probes``: each method and config variant on a small problem) trained for a few
warm-up iterations, then more under ``torch.cuda.set_sync_debug_mode("error")`` (any host
synchronisation but the step's deliberate one raises), with its peak CUDA memory; (3) ``speed.py``'s
rows for svgp, gpnet and fbnn at M 100 and 500 for 1 and 20 splits, with peak memory, each beside
``gpu_estimate.py``'s estimate of it under each rate set (so that the report calibrates the rates); (4) a batched
Cholesky factor of 20 x 500 x 500 and 20 x 1000 x 1000 float64 (the study's sizes) under cuSOLVER, under
MAGMA and by ``gpstudy.linalg.blocked`` (cuSOLVER's leaves and products), and whether they agree; (5) RFE's product
Phi L (and Phi m) forward and backward at 20 x 1000 x 2000 float64 (FBNN-500's network) with L stored in 1, 4
(the study's) and 8 column blocks, the same FLOPs on a GPU in products of other widths; (6) a summary.
A failure of one check is recorded in the report, never fatal. Each section is written as it completes: the file
on disk is always a whole report of the sections done so far (rewritten atomically), so a timeout or a CUDA abort
loses none of them. ``--sections`` picks sections; ``--append`` writes them after what the file already holds
(``benchmarks/gpu_run.py``'s report). ``--estimates FILE`` reads section 3's estimates from ``gpu_run.py
prepare``'s file, counted beforehand on a CPU, instead of counting them on ``meta`` here (CPU minutes on a GPU
machine's clock); without it they are counted here.

``--device cpu`` runs what makes sense without a GPU (synchronisations are still counted by
dispatch) and marks the CUDA-only parts "not applicable on cpu".
"""

import argparse
import sys
import time
from dataclasses import asdict
from pathlib import Path

import gpu_estimate  # benchmarks/gpu_estimate.py, beside this script
import torch

from gpstudy.diagnostics import device_check as check
from gpstudy.diagnostics.probes import PROBES
from gpstudy.io import atomic_path, read_json
from gpstudy.nets.block_tril import BLOCKS, DENSE_BELOW
from gpstudy.study import DEFAULT_CONFIG, load_config

import speed  # benchmarks/speed.py, beside this script

SECTIONS = ("environment", "probes", "speed", "cholesky", "block_tril", "summary")  # in the report's order
ESTIMATES = "estimates"  # the key of the prepared file's rows (:func:`prepared_estimates`)
COPY_MIB = 256  # size of section 1's host-device copies


class Report:
    """A Markdown file rewritten whole, atomically, each time lines are added: on disk it is always what was
    added so far, after the file's earlier content when ``append`` (another script's report)."""

    def __init__(self, path: Path, append: bool = False):
        self.path = path
        self.text = path.read_text() if append and path.exists() else ""

    def add(self, lines: list[str]) -> None:
        """Append ``lines`` (each a line) and rewrite the file."""
        self.text += "".join(f"{line}\n" for line in lines)
        with atomic_path(self.path) as tmp:
            tmp.write_text(self.text)


def megabytes(value: int | None, device: torch.device) -> str:
    return f"{value / 2**20:.1f}" if value is not None else f"not applicable on {device.type}"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """The lines of a Markdown table (``gpu_estimate.table``) and an empty one after it."""
    return [*gpu_estimate.table(header, rows, markdown=True).splitlines(), ""]


def probe_section(checks: list[check.ProbeCheck], device: torch.device, warmup: int, steps: int) -> list[str]:
    mode = (
        "raised on synchronising CUDA operations"
        if device.type == "cuda"
        else f"not applicable on {device.type}: synchronisations counted by dispatch only"
    )
    rows = []
    for result in checks:
        debug = (
            f"not applicable on {device.type}" if device.type != "cuda" else "pass" if result.error is None else "fail"
        )
        rows.append(
            [
                "pass" if result.passed else "FAIL",
                result.name,
                debug,
                f"{result.deliberate:.2f}",
                "; ".join(result.unexpected) or "none",
                megabytes(result.peak_bytes, device),
                f"{result.error} (at {result.where or 'no gpstudy frame'})" if result.error else "",
            ]
        )
    return [
        f"## 2. Probes: {warmup} warm-up iterations, then {steps} checked",
        "",
        f"Sync debug mode: {mode}. Deliberate syncs per iteration must be at most 1.",
        "",
        *table(
            ["result", "probe", "sync debug mode", "deliberate syncs/it", "other syncs counted", "peak MiB", "error"],
            rows,
        ),
    ]


def counted_row(method: str, M: int, splits: int) -> dict:
    """One row of the prepared estimates: ``gpu_estimate.counts`` of an iteration on ``meta`` (its ``Costs``,
    with launches and views) and ``gpu_estimate.estimate`` of it under each rate set (its ``Estimate``s)."""
    costs = gpu_estimate.counts(method, M, splits)[0]
    return {
        "method": method,
        "M": M,
        "splits": splits,
        "costs": {  # as JSON: each kernel-launching call (kind, FLOPs or bytes) -> count as [kind, size, count]
            **vars(costs),
            "calls": [[kind, size, count] for (kind, size), count in costs.calls.items()],
            "launches": costs.launches,
            "views": costs.views,
        },
        "estimates": {
            name: asdict(gpu_estimate.estimate(costs, rates)) for name, rates in gpu_estimate.RATE_SETS.items()
        },
    }


def prepared_estimates(rows: list[tuple[str, int, int]]) -> dict:
    """The file ``--estimates`` reads: :func:`counted_row` of each (method, M, splits), counted now."""
    return {ESTIMATES: [counted_row(*row) for row in dict.fromkeys(rows)], "torch": torch.__version__}


def prepared_row(prepared: dict, method: str, M: int, splits: int) -> dict | None:
    """The row (method, M, splits) of a prepared file (:func:`prepared_estimates`), None where it lacks it."""
    return next(
        (row for row in prepared[ESTIMATES] if (row["method"], row["M"], row["splits"]) == (method, M, splits)), None
    )


def row_estimates(prepared: dict | None, method: str, M: int, splits: int) -> dict[str, dict] | None:
    """A row's estimate under each rate set (``Estimate`` fields by name): from ``prepared``
    (:func:`prepared_row`), None where it lacks the row; counted on ``meta`` now when no file is given."""
    row = counted_row(method, M, splits) if prepared is None else prepared_row(prepared, method, M, splits)
    return None if row is None else row["estimates"]


def estimated(prepared: dict | None, method: str, M: int, splits: int) -> list[str]:
    """``gpu_estimate.py``'s seconds per iteration of a row under each rate set (an H100's), and its
    GPU-busy and host seconds under the central set (:func:`row_estimates`)."""
    times = row_estimates(prepared, method, M, splits)
    if times is None:
        return ["not in the estimates file", "", ""]
    return [
        " / ".join(f"{time['iteration']:.4f}" for time in times.values()),
        f"{times['central']['gpu']:.4f}",
        f"{times['central']['host']:.4f}",
    ]


def speed_section(
    args, device: torch.device, iterations: int, size: int, prepared: dict | None
) -> tuple[list[str], list[bool]]:
    rows, ran = [], []
    for method in args.speed_methods:
        for M in args.M:
            for splits in args.splits:
                check.reset_peak_memory(device)
                try:
                    row = speed.measure(method, M, size, splits, iterations, device)
                    rows.append(
                        [
                            method,
                            M,
                            splits,
                            f"{row['seconds']:.4f}",
                            *estimated(prepared, method, M, splits),
                            f"{row['flops'] / 1e9:.2f}",
                            f"{row['flops'] / row['seconds'] / 1e9:.1f}",
                            row["operators"],
                            megabytes(check.peak_memory(device), device),
                            "",
                        ]
                    )
                    ran.append(True)
                except Exception as error:  # recorded, not fatal
                    rows.append(
                        [
                            method,
                            M,
                            splits,
                            "",
                            "",
                            "",
                            "",
                            "",
                            "",
                            "",
                            megabytes(check.peak_memory(device), device),
                            check.describe(error),
                        ]
                    )
                    ran.append(False)
                print(f"speed {method} M {M} splits {splits}: {'done' if ran[-1] else 'FAILED'}", flush=True)
    sets = " / ".join(gpu_estimate.RATE_SETS)
    return [
        f"## 3. speed.py rows (N {size}, batch {speed.BATCH}, D {speed.D}, RFE {speed.HIDDEN} units, "
        f"float64; {iterations} timed iteration(s) after one warm-up)",
        "",
        f"Beside each measured s/it, benchmarks/gpu_estimate.py's estimate for an H100 SXM from the row's "
        f"counts on meta ({'read from ' + str(args.estimates) if prepared is not None else 'counted here'}), "
        f"under its {sets} rate sets, and the central set's GPU-busy and host seconds: "
        f"where they differ from the measurement, the rates are what to correct.",
        "",
        *table(
            [
                "method",
                "M",
                "splits",
                "s/it",
                f"estimated s/it ({sets})",
                "estimated GPU s/it",
                "estimated host s/it",
                "GFLOP/it",
                "GFLOP/s",
                "ops/it",
                "peak MiB",
                "error",
            ],
            rows,
        ),
    ], ran


def cholesky_section(rows: list[check.CholeskyTiming], batch: int, size: int) -> list[str]:
    """One size's table of section 4."""
    cells = [
        [
            row.library,
            "" if row.seconds is None else f"{row.seconds:.4f}",
            "" if row.residual is None else f"{row.residual:.1e}",
            "" if row.difference is None else "reference" if row is rows[0] else f"{row.difference:.1e}",
            row.error or "",
        ]
        for row in rows
    ]
    return [
        f"### torch.linalg.cholesky_ex and gpstudy.linalg.blocked of {batch} x {size} x {size} float64",
        "",
        *table(
            ["library", "s per batch", "residual |LL'v - Av|/|Av|", "max |L - L_first| / max |L_first|", "error"], cells
        ),
    ]


def block_tril_section(rows: list[check.BlockTrilTiming], batch: int, n: int, size: int) -> list[str]:
    """Section 5: the RFE's product by column blocks."""
    cells = [
        [
            str(row.blocks),
            f"{row.seconds:.4f}",
            f"{row.seconds / rows[0].seconds:.2f}",
            "reference" if row is rows[0] else f"{row.difference:.1e}",
        ]
        for row in rows
    ]
    return [
        f"## 5. RFE's product Phi L by column blocks, {batch} x {n} x {size} float64",
        "",
        f"gpstudy stores L in {BLOCKS} column blocks from {DENSE_BELOW} columns and multiplies a diagonal block "
        f"of at least {DENSE_BELOW} columns by halves (`gpstudy/nets/block_tril.py`): 1, 4 and 8 blocks of 2000 "
        "columns do the same FLOPs, 9/16 of a dense product's, in products 1000-250, 500-250 and 250 columns "
        "wide. gpu_estimate.py counts one product rate; the fastest row here is this GPU's choice.",
        "",
        *table(
            ["blocks", "s per forward and backward", "time / first row", "max |PhiL - PhiL_first| / max |PhiL_first|"],
            cells,
        ),
    ]


def copy_rates(device: torch.device, repeats: int) -> list[tuple[str, str]]:
    """GB/s of a ``COPY_MIB`` MiB float64 copy from pinned host memory to ``device`` and back (CUDA; not
    applicable elsewhere)."""
    if device.type != "cuda":
        return [("host-device copies", f"not applicable on {device.type}")]
    host = torch.empty(COPY_MIB * 2**20 // 8, dtype=torch.float64).pin_memory()
    on_device = torch.empty_like(host, device=device)
    facts = []
    for name, target, source in (("host to device", on_device, host), ("device to host", host, on_device)):
        target.copy_(source, non_blocking=True)  # warm-up
        torch.cuda.synchronize(device)
        tic = time.perf_counter()
        for _ in range(repeats):
            target.copy_(source, non_blocking=True)
        torch.cuda.synchronize(device)
        rate = COPY_MIB * 2**20 * repeats / (time.perf_counter() - tic) / 1e9
        facts.append((f"copy {name}, {COPY_MIB} MiB pinned", f"{rate:.1f} GB/s"))
    return facts


def environment_facts(device: torch.device, repeats: int) -> list[tuple[str, str]]:
    """Section 1's facts: ``device_check.environment``'s and :func:`copy_rates`."""
    return check.environment(device, repeats) + copy_rates(device, repeats)


def environment_section(args, device: torch.device, repeats: int) -> tuple[list[str], list[list[str]]]:
    facts = environment_facts(device, repeats)
    return ["## 1. Environment", "", *table(["", ""], [list(fact) for fact in facts])], []


def probes_lines(args, device: torch.device, warmup: int, steps: int) -> tuple[list[str], list[list[str]]]:
    config = load_config(DEFAULT_CONFIG)
    checks = []
    for name in args.probes:
        checks.append(check.check_probe(name, config, device, warmup, steps))
        print(f"probe {name}: {'pass' if checks[-1].passed else 'FAIL'}", flush=True)
    cuda = device.type == "cuda"
    summary = [
        [
            "probes trained" + (" under sync debug mode" if cuda else ""),
            f"{sum(c.error is None for c in checks)} of {len(checks)}",
        ],
        [
            "probes with at most one deliberate and no other sync per iteration (counted)",
            f"{sum(c.passed for c in checks)} of {len(checks)}",
        ],
        ["peak memory per job", "recorded" if cuda else f"not applicable on {device.type}"],
    ]
    return probe_section(checks, device, warmup, steps), summary


def cholesky_lines(args, device: torch.device, repeats: int) -> tuple[list[str], list[list[str]]]:
    batch, *sizes = args.cholesky
    cholesky = {size: check.cholesky_libraries(device, batch, size, repeats) for size in sizes}
    lines = [
        "## 4. Batched Cholesky",
        "",
        "Each library via torch.backends.cuda.preferred_linalg_library (on the CPU: LAPACK alone), then "
        "gpstudy.linalg.blocked's factor by halves, its leaves by the first library and the rest matrix products "
        f"(whether it is faster than the library's is what this section tells). They agree when residual "
        f"and difference are below {check.AGREEMENT:g}.",
        "",
        *[line for size, rows in cholesky.items() for line in cholesky_section(rows, batch, size)],
    ]
    agree = "yes" if all(map(check.libraries_agree, cholesky.values())) else "NO"
    return lines, [["Cholesky libraries factor and agree", agree]]


def block_tril_lines(args, device: torch.device, repeats: int) -> tuple[list[str], list[list[str]]]:
    shape = args.block_tril or [20, 200 if args.quick else 1000, 2000]
    rows = check.block_tril_products(device, *shape, tuple(args.blocks), repeats)
    agree = "yes" if check.block_counts_agree(rows) else "NO"
    return block_tril_section(rows, *shape), [["RFE's product agrees across block counts", agree]]


TITLES = {  # section -> its heading's number and title, where a failed section says what failed
    "environment": "1. Environment",
    "probes": "2. Probes",
    "speed": "3. speed.py rows",
    "cholesky": "4. Batched Cholesky",
    "block_tril": "5. RFE's product Phi L by column blocks",
    "summary": "6. Summary",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:K, or cpu for a smoke test")
    parser.add_argument("--out", type=Path, default=Path("gpu_report.md"), help="the report (Markdown)")
    parser.add_argument("--append", action="store_true", help="write after what --out holds (else replace it)")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS), help="sections to run")
    parser.add_argument(
        "--estimates", type=Path, help="section 3's estimates from this file (gpu_run.py prepare's), not counted here"
    )
    parser.add_argument("--quick", action="store_true", help="few iterations, N 1000: a short pass")
    parser.add_argument("--probes", nargs="+", choices=list(PROBES), default=list(PROBES))
    parser.add_argument("--speed-methods", nargs="*", default=["svgp", "gpnet", "fbnn"])
    parser.add_argument("--M", type=int, nargs="+", default=[100, 500])
    parser.add_argument("--splits", type=int, nargs="+", default=[1, 20])
    parser.add_argument("--size", type=int, default=8192, help="training-set size N of the speed rows")
    parser.add_argument(
        "--cholesky",
        type=int,
        nargs="+",
        default=[20, 500, 1000],
        metavar="BATCH SIZE",
        help="batch, then the sizes of section 4's Cholesky factors",
    )
    parser.add_argument(
        "--block-tril",
        type=int,
        nargs=3,
        metavar=("BATCH", "ROWS", "SIZE"),
        help="section 5's Phi [batch, rows, size]: 20 1000 2000 (FBNN-500's), with --quick 20 200 2000",
    )
    parser.add_argument("--blocks", type=int, nargs="+", default=[1, 4, 8], help="section 5's block counts")
    args = parser.parse_args()
    if len(args.cholesky) < 2:
        parser.error(f"--cholesky takes a batch and at least one size, not {args.cholesky}")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device is visible to torch; run with --device cpu for a smoke test")
    warmup, steps, iterations, repeats = (2, 3, 1, 1) if args.quick else (3, 30, 10, 5)
    size = 1000 if args.quick else args.size
    prepared = read_json(args.estimates) if args.estimates is not None else None

    def speed_lines(args, device):
        lines, ran = speed_section(args, device, iterations, size, prepared)
        return lines, [["speed rows measured", f"{sum(ran)} of {len(ran)}"]]

    runs = {
        "environment": lambda: environment_section(args, device, repeats),
        "probes": lambda: probes_lines(args, device, warmup, steps),
        "speed": lambda: speed_lines(args, device),
        "cholesky": lambda: cholesky_lines(args, device, repeats),
        "block_tril": lambda: block_tril_lines(args, device, repeats),
    }
    report = Report(args.out, args.append)
    report.add(
        [
            f"# gpstudy GPU check ({'quick' if args.quick else 'full'}, device {device})",
            "",
            f"Command: `python benchmarks/{Path(__file__).name} {' '.join(sys.argv[1:])}`",
            "",
        ]
    )
    summary = []
    for name in SECTIONS[:-1]:
        if name not in args.sections:
            summary.append([TITLES[name], "not run (not in --sections)"])
            continue
        try:
            lines, rows = runs[name]()
        except Exception as error:  # recorded, not fatal: the next section runs
            lines = [
                f"## {TITLES[name]}: failed",
                "",
                f"{check.describe(error)} (at {check.origin(error) or 'no gpstudy frame'})",
                "",
            ]
            rows = [[TITLES[name], f"failed: {check.describe(error)}"]]
        report.add(lines)
        summary += rows
        print(f"{name} done", flush=True)
    if "summary" in args.sections:
        report.add(["## 6. Summary", "", *table(["check", "result"], summary)])
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
