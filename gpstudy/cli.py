"""The ``gpstudy`` command: the pipeline's steps for one data set, outside Snakemake.

Its defaults are the packaged config.yaml (``gpstudy.study.DEFAULT_CONFIG``), so it runs from any directory.
Torch, and every module that imports it, is imported inside the commands that use it: ``gpstudy --help``
and ``gpstudy --version`` start without it.
"""

import argparse
import difflib
import logging
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import gpstudy
from gpstudy import paths
from gpstudy.io import read_json, write_json

if TYPE_CHECKING:
    from gpstudy.data import Dataset
    from gpstudy.study.files import Sources

OVERRIDES_SOURCE = "--config"  # where `gpstudy settings` says an override of its --config came from
RUN_DIR = "results/cli/{dataset}/{method}/M{M}/split{splits}"  # default --out of `gpstudy train` ({splits}: 0-1-2)
PRETRAINED = "pretrained.json"  # in a split's run folder: the pretrained hyperparameters its training starts from
SETTINGS = "settings.json"  # in a split's run folder: the resolved settings it trained with (a sweep's values)
REFUSED = 2  # the exit status of a refused command line, config or input (argparse's own)


class Refusal(ValueError):
    """Bad input the command refuses: printed as one line on stderr, exit status ``REFUSED``."""


class Parser(argparse.ArgumentParser):
    """argparse's parser, but a bad argument is one line (``gpstudy train: --M: ...``), not the usage too."""

    def error(self, message: str) -> NoReturn:
        refuse(f"{self.prog}: {message} (see {self.prog} --help)")


def refuse(message: str) -> NoReturn:
    """End the command: ``message`` as one line on stderr, exit status ``REFUSED``."""
    print(" ".join(line.strip() for line in message.splitlines()), file=sys.stderr)
    raise SystemExit(REFUSED)


def count(minimum: int):
    """An argparse type: an integer of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is less than {minimum}")
        return value

    return parse


def known(kind: str, name: str, names: list[str]) -> None:
    """Refuse ``name`` unless it is in ``names``, naming the closest ones."""
    if name not in names:
        close = difflib.get_close_matches(name, names)
        hint = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
        raise Refusal(f"unknown {kind} {name!r}; {hint}known: {', '.join(sorted(names))}")


def ensure_split(config: dict, dataset: str, split: int) -> Path:
    """Fetch, read and split ``dataset`` as the config says, skipping files already made; the split's path."""
    from gpstudy.data import fetch_dataset, prepare_split, prepare_table
    from gpstudy.study import data_plan, dataset_of

    plan, spec = data_plan(config, dataset), dataset_of(config, dataset)
    check_splits(config, dataset, [split])
    fields = {"dataset": dataset, "protocol": plan.protocol}
    manifest, table = Path(paths.RAW_MANIFEST.format(**fields)), Path(paths.TABLE.format(**fields))
    output = Path(paths.SPLIT.format(split=split, **fields))
    if not manifest.exists():
        fetch_dataset(spec, plan.protocol, manifest.parent, manifest, mirror=config.get("mirror"))
    if not table.exists():
        prepare_table(spec, plan.protocol, manifest, table)
    if not output.exists():
        prepare_split(spec, plan.protocol, split, table, manifest, output, seed=config["seed"], **plan.split_options())
    return output


def check_splits(config: dict, dataset: str, splits: list[int]) -> None:
    """Refuse a split index the config does not make for ``dataset``."""
    from gpstudy.study import data_plan

    made = data_plan(config, dataset).splits
    for split in splits:
        if split not in made:
            raise Refusal(f"split {split}: {dataset} has splits 0 to {len(made) - 1} under this config")


def check_folder(folder: Path, option: str) -> None:
    """Refuse in one line naming the path a folder ``option`` names that cannot be made or written in: the
    nearest of it and its parents that exists must be a folder one can write in (not a file; its permissions, a
    read-only file system). Nothing is made, so that a later refusal leaves nothing behind."""
    try:
        existing = next(path for path in (folder, *folder.parents) if path.exists())
    except OSError as error:  # a parent one may not look into
        raise Refusal(f"{option} {folder}: {error.strerror}: {error.filename}") from None
    if not existing.is_dir():
        raise Refusal(f"{option} {folder}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise Refusal(f"{option} {folder}: cannot write in {existing} (its permissions or a read-only file system)")


def recorded_hashes(dataset: "Dataset", root: Path = Path(".")) -> list[str]:
    """Lines on each file of ``dataset`` that no trusted sha256 pins: the sha256 its raw manifests under
    ``root`` recorded at the first fetch (later reads are checked against it), as a config pins it."""
    from gpstudy.data import PROTOCOLS

    lines = []
    for path in dataset.unpinned_files():
        recorded: dict[str, list[str]] = {}
        for protocol in PROTOCOLS:
            manifest = root / paths.RAW_MANIFEST.format(dataset=dataset.name, protocol=protocol)
            sha256 = read_json(manifest)["sha256"].get(path) if manifest.is_file() else None
            if sha256:
                recorded.setdefault(sha256, []).append(str(manifest.relative_to(root)))
        if not recorded:
            lines.append(
                f"  {path}: no trusted sha256, none recorded yet (fetch it: gpstudy prepare --dataset {dataset.name})"
            )
        for sha256, manifests in recorded.items():
            lines.append(
                f"  {path}: no trusted sha256; recorded at the first fetch in {', '.join(manifests)}; pin "
                f"it in the config: dataset_options: {{{dataset.name}: {{sha256: {{{path}: '{sha256}'}}}}}}"
            )
    return lines


def snakemake_config(
    configfiles: list[Path], entries: list[str], overrides: dict[str, Any] | None = None
) -> tuple[dict[str, Any], "Sources"]:
    """The config a Snakemake started with ``--configfile *configfiles --config *entries`` (here) builds, and
    where each value was set: the packaged config.yaml, each file merged over it in order, then the entries,
    read as the workflow reads them (:func:`gpstudy.study.files.parse_config_entries`: dotted keys, YAML values;
    no Snakemake needed), then ``overrides`` (a command's own options, e.g. ``--mirror``).

    Raises:
        ConfigError: a file that does not exist, an entry that is not ``key=value``, a config the schema refuses.
    """
    from gpstudy.study import DEFAULT_CONFIG, ConfigError, parse_config_entries
    from gpstudy.study.files import load_traced_config

    parsed = parse_config_entries(entries)
    for path in configfiles:
        if not path.is_file():
            raise ConfigError(
                f"config file {path}: no such file in {Path.cwd()}; --configfile takes YAML files "
                f"merged over the packaged defaults ({DEFAULT_CONFIG}), which need none"
            )
    return load_traced_config(
        DEFAULT_CONFIG, *configfiles, overrides={**parsed, **(overrides or {})}, overrides_source=OVERRIDES_SOURCE
    )


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """A command's ``--configfile`` and ``--config``, as Snakemake's."""
    parser.add_argument(
        "--configfile",
        type=Path,
        nargs="+",
        default=[],
        metavar="FILE",
        help="as snakemake's: config files merged in order over the packaged config.yaml, which "
        "holds every default (the quick study: configs/quick.yaml)",
    )
    parser.add_argument(
        "--config",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="as snakemake's, merged last; a dotted key sets one nested key, a value is read as YAML "
        "(gpstudy.study.parse_config_entries; no Snakemake needed): training.lr=0.1 'datasets=[boston]'",
    )


def command_line() -> argparse.ArgumentParser:
    """The ``gpstudy`` command's parser, with a subparser per command."""
    parser = Parser(prog="gpstudy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"gpstudy {gpstudy.__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "datasets",
        help="list the registered data sets, and the sha256 recorded for files without a trusted one (under data/raw)",
    )
    prepare = commands.add_parser("prepare", help="fetch a data set and write its splits under data/")
    prepare.add_argument("--dataset", required=True, help="a registered data set or one the config defines")
    prepare.add_argument("--splits", type=count(0), nargs="*", help="split indices (default: all of the config's)")
    add_config_arguments(prepare)
    prepare.add_argument("--mirror", help="local directory or file:// URL tried before the network")
    train = commands.add_parser(
        "train", help=f"train one method on splits (one batch); write metrics.json and {SETTINGS}"
    )
    train.add_argument("--dataset", required=True, help="a registered data set or one the config defines")
    train.add_argument(
        "--split", type=count(0), nargs="+", default=[0], help="split indices, trained as one batch (default: 0)"
    )
    train.add_argument("--method", required=True, help="a registered method or a variant the config defines")
    train.add_argument("--M", type=count(1), required=True, help="inducing or measurement points")
    train.add_argument("--iterations", type=count(1), help="Adam steps (default: the config's)")
    train.add_argument("--device", help="auto | cpu | cuda | cuda:K (default: the config's)")
    add_config_arguments(train)
    train.add_argument("--mirror", help="local directory or file:// URL tried before the network")
    train.add_argument(
        "--out",
        type=Path,
        help=f"run folder (default {RUN_DIR}); with several splits, "
        "one folder per split in it: OUT/split{s}/metrics.json",
    )
    train.add_argument(
        "--threads",
        type=count(1),
        help="torch CPU threads (default: a pipeline job's, gpstudy.runtime.environment.DEFAULT_THREADS); "
        "metrics.json records them",
    )
    shown = commands.add_parser(
        "settings", help="print every resolved setting of one run, each with the file and key path it came from"
    )
    shown.add_argument("--dataset", required=True, help="a registered data set or one the config defines")
    shown.add_argument("--method", required=True, help="a registered method or a variant the config defines")
    shown.add_argument("--M", type=count(1), required=True, help="inducing or measurement points")
    add_config_arguments(shown)
    compared = commands.add_parser(
        "compare",
        help="a regeneration against a reference, cell by cell: exit 0 "
        "when reproduced within the tolerance, 1 when not, 2 on an unreadable folder",
    )
    compared.add_argument(
        "results", type=Path, metavar="RESULTS", help="a results folder (results/: runs.csv, claims.csv)"
    )
    compared.add_argument(
        "reference",
        type=Path,
        metavar="REFERENCE",
        help="the folder compared with, e.g. docs/reference/paper-cpu or an earlier results/",
    )
    compared.add_argument(
        "--se",
        type=float,
        help="a cell may move at most this many of the reference's "
        "standard errors (default 0.1, gpstudy.report.compare.Tolerance's)",
    )
    compared.add_argument(
        "--relative",
        type=float,
        help="and at most this fraction of the reference's mean (default 0.001, gpstudy.report.compare.Tolerance's)",
    )
    compared.add_argument(
        "--partial",
        action="store_true",
        help="RESULTS regenerated part of REFERENCE: the reference's runs and claims it lacks are no difference",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``gpstudy`` console command. Bad input (an argument, a config, a data set) ends it
    with one line on stderr and exit status ``REFUSED``; output cut short by its reader (``| head``) ends it
    quietly."""
    try:
        run_command(command_line().parse_args(argv))
    except BrokenPipeError:  # Python's documented way: stdout to devnull, so that the exit's flush is quiet
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(1) from None


def run_command(args: argparse.Namespace) -> None:
    """Run the parsed command."""
    if args.command == "compare":
        compare_folders(args)
        return
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from gpstudy.data import DATASETS

    if args.command == "datasets":
        for dataset in DATASETS.values():
            print(f"{dataset.name:10s} {dataset.task:15s} protocol={dataset.protocol} shape={dataset.shape}")
            for line in recorded_hashes(dataset):
                print(line)
        return
    from gpstudy.data import DataError, FetchError
    from gpstudy.study import ConfigError, SettingsError, method_names, user_datasets
    from gpstudy.study.validate import check_mirror

    given = {key: getattr(args, key, None) for key in ("mirror", "iterations", "device")}  # the schema checks them
    try:  # a missing or bad file, a bad entry, key, setting, name or file: one line naming it, no traceback
        config, sources = snakemake_config(
            args.configfile, args.config, {key: value for key, value in given.items() if value is not None}
        )
        known("data set", args.dataset, [*DATASETS, *user_datasets(config)])
        if "method" in args:
            known("method", args.method, method_names(config))
        check_mirror(config, [args.dataset])
        if args.command == "settings":
            show_settings(config, sources, args)
        elif args.command == "prepare":
            prepare_splits(config, args)
        else:
            train_run(config, args)
    except (ConfigError, SettingsError, Refusal, DataError, FetchError) as error:
        refuse(f"gpstudy {args.command}: {error}")


def compare_folders(args: argparse.Namespace) -> None:
    """``gpstudy compare``: print the comparison; exit 1 when it differs, 2 when a folder cannot be read."""
    from gpstudy.report.compare import Tolerance, compare

    try:
        given = {name: value for name, value in (("se", args.se), ("relative", args.relative)) if value is not None}
        comparison = compare(args.results, args.reference, Tolerance(**given), partial=args.partial)
    except ValueError as error:
        refuse(f"gpstudy compare: {error}")
    print(comparison.report())
    if not comparison.reproduced:
        raise SystemExit(1)


def show_settings(config: dict[str, Any], sources: "Sources", args: argparse.Namespace) -> None:
    """``gpstudy settings``: every resolved setting of one run and where it was set."""
    from gpstudy.study.provenance import settings_lines

    print(
        f"{args.method} at M = {args.M} on {args.dataset}; each setting's source, lowest precedence first: "
        "training, methods.<method>, dataset_options.<dataset>, dataset_options.<dataset>.methods.<method>, "
        "variants.<variant>, the study-wide iterations and device, the command line; the config as Snakemake "
        "builds it: config.yaml, each --configfile over it in order, then --config"
    )
    for line in settings_lines(config, sources, args.dataset, args.method, args.M):
        print(line)


def prepare_splits(config: dict[str, Any], args: argparse.Namespace) -> None:
    """``gpstudy prepare``: the data stage of one data set; prints each split's path."""
    from gpstudy.study import data_plan

    splits = args.splits if args.splits is not None else data_plan(config, args.dataset).splits
    check_splits(config, args.dataset, splits)
    for split in splits:
        print(ensure_split(config, args.dataset, split))


def train_run(config: dict[str, Any], args: argparse.Namespace) -> None:
    """``gpstudy train``: one method on the splits of one data set as one batch; prints each split's metrics and
    writes the settings it trained with beside them (``SETTINGS``: a sweep's runs say their values).
    Where the settings pretrain, each split is first pretrained as the workflow's pretrain job does it
    (:func:`pretrain_like_the_workflow`), and the training starts from those hyperparameters."""
    from gpstudy.likelihoods import LIKELIHOODS
    from gpstudy.metrics import TASK_METRICS
    from gpstudy.runtime.environment import DEFAULT_THREADS, torch_threads
    from gpstudy.runtime.flags import keep_freed_memory
    from gpstudy.study import check_settings, dataset_of, run_settings
    from gpstudy.training import progress, run_job

    keep_freed_memory()
    settings = run_settings(
        config, args.dataset, method=args.method, M=args.M
    )  # --iterations and --device are the config's (``run_command``), checked by its schema
    check_settings(settings, dataset_of(config, args.dataset))
    splits = sorted(set(args.split))
    labels = {"dataset": args.dataset, "method": args.method, "M": args.M}
    out = args.out or Path(RUN_DIR.format(splits="-".join(map(str, splits)), **labels))
    out_dirs = {s: out if len(splits) == 1 else out / paths.SPLIT_FOLDER.format(split=s) for s in splits}
    check_splits(config, args.dataset, splits)
    check_folder(out, "--out" if args.out else f"the run folder (--out's default {RUN_DIR})")  # before any file
    split_files = {s: ensure_split(config, args.dataset, s) for s in splits}
    threads = args.threads or DEFAULT_THREADS
    logging.getLogger(__name__).info("torch CPU threads: %d (--threads)", threads)
    with progress.bars(progress.watched()), torch_threads(threads):  # a bar on a terminal, none in a file
        pretrained = (
            pretrain_like_the_workflow(config, args.dataset, split_files, out_dirs) if settings.pretrain else None
        )
        results = run_job(
            split_files,
            settings,
            out_dirs,
            out / "checkpoint.pt",
            labels,
            pretrained,
            jobs_per_gpu=config["jobs_per_gpu"],
            gpu_lock_dir=config["gpu_lock_dir"],
        )
    names = TASK_METRICS[LIKELIHOODS[settings.likelihood].task]
    for s, metrics in results.items():
        write_json(out_dirs[s] / SETTINGS, asdict(settings))
        values = ", ".join(f"{name} {metrics[name]:.4g}" for name in names)
        print(f"{out_dirs[s] / 'metrics.json'}: {values}, {metrics['status']}")


def pretrain_like_the_workflow(
    config: dict[str, Any], dataset: str, split_files: dict[int, Path], out_dirs: dict[int, Path]
) -> dict[int, Path]:
    """Each split pretrained as the workflow's pretrain rule does it: alone, by its job's function
    (:func:`gpstudy.training.run.pretrain_split`) with the exact GP's settings on ``dataset``
    (:func:`gpstudy.study.exact_gp_settings`: ``methods.exact.device``, not the training device) and the rule's
    CPU threads (``PRETRAIN_THREADS``, restored after); each split's hyperparameters written in its run folder
    (``PRETRAINED``), the files returned by split, as the workflow hands them to its training job."""
    import torch

    from gpstudy.study import exact_gp_settings
    from gpstudy.training.run import PRETRAIN_THREADS, pretrain_split, pretraining_reads

    reads, threads = pretraining_reads(exact_gp_settings(config, dataset)), torch.get_num_threads()
    files = {s: out_dirs[s] / PRETRAINED for s in split_files}
    torch.set_num_threads(PRETRAIN_THREADS)
    try:
        for s, path in split_files.items():
            pretrain_split(s, path, reads, files[s], files[s].with_suffix(".checkpoint.pt"))
    finally:
        torch.set_num_threads(threads)
    return files
