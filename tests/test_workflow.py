"""The Snakemake workflow: lint, dry runs, config errors, and the quick study end to end."""

import hashlib
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from gpstudy.data import load_split
from gpstudy.report.claims import load_claims

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
SCREENSHOTS = REPO / "docs" / "report_screenshots.py"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PLANNED_JOBS = """
import json, sys
import torch
from snakemake import cli
from snakemake.executors import dryrun

fake_gpu, out, *argv = sys.argv[1:]
if fake_gpu == "yes":  # Snakemake's process sees a GPU (it resolves every run's device)
    from gpstudy.runtime import devices
    torch.backends.cuda.is_built = lambda: True
    devices.nvidia_smi_gpus = lambda: [devices.Gpu(0, "Fake GPU", "GPU-00000000-fake")]
jobs = []

def record(self, job):  # the dry run's executor: note the job's device and resources, run nothing
    settings = getattr(job.params, "settings", None)
    jobs.append({"rule": job.rule.name, "device": settings and settings["device"], "gpu": job.resources.get("gpu", 0),
                 "runtime": job.resources.get("runtime"), "slurm_extra": job.resources.get("slurm_extra"),
                 "lr": settings and settings.get("lr"), "wildcards": dict(job.wildcards)})
    self.report_job_submission(dryrun.SubmittedJobInfo(job=job))
    self.report_job_success(dryrun.SubmittedJobInfo(job=job))

dryrun.Executor.run_job = record
parser, args = cli.parse_args(argv)
ok = cli.args_to_api(args, parser)
json.dump(jobs, open(out, "w"))
sys.exit(0 if ok else 1)
"""  # a dry run through Snakemake's command line (profiles and all) that writes every planned job


def command(workdir, *args, config="config.yaml"):
    """The snakemake command line for the repo's workflow; ``config`` relative to the repo."""
    return [
        SNAKEMAKE,
        "-s",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(REPO / config),
        "--cores",
        "2",
        *args,
    ]


def snakemake(workdir, *args, config="config.yaml", timeout=900):
    """Run the repo's workflow in ``workdir``; return the finished process."""
    return subprocess.run(command(workdir, *args, config=config), capture_output=True, text=True, timeout=timeout)


def job_counts(output: str) -> dict[str, int]:
    """The 'Job stats' table of a dry run."""
    table = output.split("Job stats:")[1].split("\n\n")[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE), f"{path} is not a PNG"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_lint_is_clean():
    run = subprocess.run([SNAKEMAKE, "--lint"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Congratulations, your workflow is in a good condition!" in run.stdout + run.stderr


def test_dry_run_of_the_full_study_plans_every_job(tmp_path):
    run = snakemake(tmp_path, "-n")
    assert run.returncode == 0, run.stderr
    assert job_counts(run.stdout) == {
        "fetch": 8,
        "tabulate": 8,
        "split": 7 * 20 + 1,  # 7 UCI sets x 20 splits + Snelson's one draw
        "pretrain": 4 * 20 + 1,  # Boston, Concrete, Kin8nm, Protein and Snelson pretrain
        "train": 7 * 5
        + 7 * 4
        + 3 * 3,  # UCI: 5 (method, M) per data set, 20 splits in each job; ODVGP: 4; Snelson: 3 x 3
        "collect": 1,
        "tables": 2 + 2,
        "violins": 1,
        "posteriors": 1,
        "learning_curves": 3,
        "all": 1,  # tables: per metric
        "exact_reference": 1,
        "claims": 1,  # Snelson's exact GP on the plotted grid; results/claims.md
        "total": 323,
    }


def test_dry_run_with_overrides(tmp_path):
    run = snakemake(tmp_path, "-n", "--config", "datasets=[boston]", "splits=3", "iterations=50", "device=cpu")
    assert run.returncode == 0, run.stderr
    counts = job_counts(run.stdout)
    assert counts["train"] == 5 + 4 and counts["split"] == 3 and "posteriors" not in counts  # uci and odvgp
    one_per_split = snakemake(tmp_path, "-n", "--config", "datasets=[boston]", "splits=3", "splits_per_job=1")
    assert job_counts(one_per_split.stdout)["train"] == 3 * (5 + 4), one_per_split.stderr


def planned_jobs(workdir: Path, profile: str, *args: str, fake_gpu: bool = False) -> list[dict]:
    """Every job of a dry run of the full config under ``profiles/<profile>``: its rule, the device its
    settings resolve to (None: a job without settings) and its ``gpu`` resource. The profile is copied
    without its executor and that executor's own keys (``slurm-...``), so that no plugin is needed;
    everything else (its config, resources) is Snakemake's to apply. ``fake_gpu``: torch in Snakemake's
    process sees a GPU."""
    keys = yaml.safe_load((REPO / "profiles" / profile / "config.yaml").read_text())
    executor = keys.pop("executor", "local")
    local = workdir / "profile"
    local.mkdir()
    (local / "config.yaml").write_text(
        yaml.safe_dump({key: value for key, value in keys.items() if not key.startswith(executor + "-")})
    )
    out = workdir / "jobs.json"
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            PLANNED_JOBS,
            "yes" if fake_gpu else "no",
            str(out),
            "-s",
            str(REPO / "Snakefile"),
            "--directory",
            str(workdir),
            "--workflow-profile",
            str(local),
            "-n",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize(
    "profile, args, fake_gpu",
    [
        ("slurm", (), False),  # the cluster: its config's device; the submit host has no GPU
        ("default", (), True),  # a workstation with a GPU: device auto
        ("default", ("--config", "device=cuda"), False),  # the study moved to CUDA from the command line
    ],
)
def test_every_job_on_cuda_asks_for_a_gpu(tmp_path, profile, args, fake_gpu, study_config):
    jobs = planned_jobs(tmp_path, profile, *args, fake_gpu=fake_gpu)
    assert len(jobs) == 323  # the full study (test_dry_run_of_the_full_study_plans_every_job)
    for job in jobs:
        assert job["device"] is None or re.fullmatch(r"cpu|cuda(:\d+)?", job["device"]), job  # resolved, never auto
        on_cuda = job["device"] is not None and job["device"].startswith("cuda")
        assert not on_cuda or job["gpu"] >= 1, job
    assert any(job["device"].startswith("cuda") for job in jobs if job["rule"] == "train")
    exact_gp = [job for job in jobs if job["rule"] in ("pretrain", "exact_reference")]
    assert len(exact_gp) == 4 * 20 + 1 + 1 and all(job["device"] == "cpu" for job in exact_gp)  # methods.exact.device
    train = [job for job in jobs if job["rule"] == "train"]  # a first attempt: train_resources' runtime
    assert all(job["runtime"] == study_config["train_resources"]["runtime"] for job in train)
    warning = {"--signal=TERM@300"} if profile == "slurm" else {None}  # SIGTERM ahead of the time limit (issue 38)
    assert {job["slurm_extra"] for job in train} == warning


def test_a_sweep_value_on_snakemakes_command_line_reaches_the_jobs_typed(tmp_path):
    """Issue 48, item 1: Snakemake reads a value nested in a --config mapping as a string ('0.1', refused by the
    schema); the workflow reads its entries as the gpstudy commands do (docs/configuration.md, Sweeps)."""
    overrides = ["training={lr: 0.1}", "experiments={uci: {methods: {svgp: [50, 100]}}}", "seed=3"]
    jobs = planned_jobs(tmp_path, "default", "--configfile", str(REPO / "configs/quick.yaml"), "--config", *overrides)
    train = [job for job in jobs if job["rule"] == "train"]
    svgp = [job for job in train if job["wildcards"]["method"] == "svgp"]
    assert svgp and {job["lr"] for job in svgp} == {0.1}
    uci = {
        (job["wildcards"]["dataset"], job["wildcards"]["M"]) for job in svgp if job["wildcards"]["experiment"] == "uci"
    }
    assert uci == {(dataset, M) for dataset in ("boston", "concrete") for M in ("50", "100")}


def test_snakemake_refuses_a_dotted_key_before_the_workflow_starts(tmp_path):
    """What docs/configuration.md's Sweeps section says: Snakemake's own parser refuses ``training.lr=0.1``."""
    run = snakemake(tmp_path, "-n", "--config", "training.lr=0.1", config="configs/quick.yaml", timeout=120)
    output = run.stdout + run.stderr
    assert run.returncode != 0 and "Config entry must start with a valid identifier" in output, output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "override, message",
    [
        ("datasets=[boston,bostn]", r"\$\.datasets\[1\]: unknown data set 'bostn'"),
        ("splits=-1", r"\$\.splits: -1 is less than the minimum of 1"),
        ("mirrror=/tmp", r"'mirrror' was unexpected"),
        ("training={lrr: 0.1}", r"\$\.training: Additional properties are not allowed \('lrr' was unexpected\)"),
        ("training={lr: -0.1}", r"\$\.training\.lr: -0\.1 is less than or equal to the minimum of 0"),  # a number
        # issue 48: a mirror that is no folder, or the wrong one, was found by the fetch job (a 12-line traceback)
        ("mirror=/nowhere", r"\$\.mirror: mirror '/nowhere': /nowhere is not a directory \(it does not exist\)"),
        (f"mirror=file://{REPO}", rf"\$\.mirror: 'file://{REPO}' holds none of the files to fetch \(no {REPO}/"),
    ],
)
def test_config_error_stops_before_any_job(tmp_path, override, message):
    run = snakemake(tmp_path, "--config", override)
    assert run.returncode != 0
    assert re.search(message, run.stderr), run.stderr
    assert not (tmp_path / "data").exists() and not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    "line, edited, message",
    [
        (
            "      svgp: [100, 500]",
            "      svgp: [-100, 500]",
            r"\$\.experiments\.uci\.methods\.svgp\[0\]: -100 is less than the minimum of 1",
        ),
        (
            "      svgp: [100, 500]",
            "      svpg: [100, 500]",
            r"\$\.experiments\.uci\.methods\.svpg: unknown method 'svpg'",
        ),
    ],
)
def test_config_file_error_stops_before_any_job(tmp_path, line, edited, message):
    config = tmp_path / "config.yaml"
    config.write_text((REPO / "config.yaml").read_text().replace(line, edited, 1))
    run = snakemake(tmp_path, "-n", config=config)
    assert run.returncode != 0
    assert re.search(message, run.stdout + run.stderr), run.stdout + run.stderr
    assert not (tmp_path / "data").exists() and not (tmp_path / "results").exists()


def overlay_dry_run(tmp_path: Path, overlay: dict) -> subprocess.CompletedProcess:
    """A dry run in ``tmp_path/work`` of config.yaml with ``overlay`` (a --configfile) merged over it."""
    (tmp_path / "overlay.yaml").write_text(yaml.safe_dump(overlay))
    (tmp_path / "work").mkdir()
    return snakemake(tmp_path / "work", "-n", config=tmp_path / "overlay.yaml")


def refused(run: subprocess.CompletedProcess, message: str, tmp_path: Path) -> None:
    """Assert a dry run stopped on one line matching ``message``, with no traceback and nothing written."""
    output = run.stdout + run.stderr
    assert run.returncode != 0 and re.search(message, output), output
    assert "Traceback" not in output, output
    assert sorted(path.name for path in tmp_path.iterdir()) == ["overlay.yaml", "work"]
    assert not (tmp_path / "work" / "data").exists() and not (tmp_path / "work" / "results").exists()


@pytest.mark.parametrize("name", ["../../../esc", "u.i", "Uci"])
def test_an_experiment_name_outside_the_path_rule_is_refused_before_any_job(tmp_path, name):
    experiment = {"datasets": ["boston"], "methods": {"svgp": [10]}, "outputs": ["tables"]}
    run = overlay_dry_run(
        tmp_path, {"datasets": ["boston"], "splits": 1, "experiments": {name: experiment}, "run_experiments": [name]}
    )
    refused(
        run, rf"config key \$\.experiments\.{re.escape(name)}: experiment name '{re.escape(name)}' must match", tmp_path
    )


def test_a_users_own_variant_on_a_built_in_data_set_plans_the_claims(tmp_path):
    """A documented variant listed by an experiment on Boston ended the DAG in rule claims (SettingsError:
    unknown method 'svgp_fast'): the claims resolved every cell against config.yaml alone."""
    overlay = {
        "datasets": ["boston"],
        "splits": 1,
        "variants": {"svgp_fast": {"method": "svgp", "lr": 0.01}},
        "experiments": {"uci": {"methods": {"svgp_fast": [10]}}},
    }
    run = overlay_dry_run(tmp_path, overlay)
    assert run.returncode == 0, run.stdout + run.stderr
    assert job_counts(run.stdout)["claims"] == 1 and "svgp_fast" in run.stdout


BILLION_LAUGHS = "".join(  # 10 levels of 9 aliases of the level below: 9^10 values, expanded
    f"l{n}: &l{n} [{', '.join([f'*l{n - 1}' if n else '1'] * 9)}]\n" for n in range(10)
)


def test_a_billion_laughs_config_is_refused_in_seconds(tmp_path):
    """Such a config held validation for over 12 minutes (every leaf walked before the schema ran). Nested
    mappings of aliases are expanded by Snakemake itself (merging --configfile), before the Snakefile runs:
    the gpstudy CLI refuses those (tests/study/test_validate.py)."""
    (tmp_path / "overlay.yaml").write_text(BILLION_LAUGHS)
    (tmp_path / "work").mkdir()
    tic = time.perf_counter()
    run = snakemake(tmp_path / "work", "-n", config=tmp_path / "overlay.yaml", timeout=120)
    assert time.perf_counter() - tic < 60
    refused(run, r"config key \$\.l9: more than 100000 values once its YAML aliases are expanded", tmp_path)


@pytest.mark.parametrize(
    "seed, message",
    [
        (2**32, r"config key \$\.seed: 4294967296 is greater than the maximum of 4294967295"),
        (2**32 - 2, r"config key \$\.seed: 4294967294 \+ split 2 of data set 'boston' is past 4294967295"),
    ],
)
def test_a_seed_past_numpys_range_is_refused_before_any_job(tmp_path, seed, message):
    """Such a seed passed validation; the split job failed with numpy's traceback (RandomState takes 32 bits)."""
    run = overlay_dry_run(tmp_path, {"datasets": ["boston"], "splits": 3, "seed": seed})
    refused(run, message, tmp_path)


@pytest.mark.parametrize(
    "source, message",
    [
        ({"file": ".."}, r"config key \$\.dataset_options\.mine\.source\.file: '\.\.' does not match"),
        ({"file": "."}, r"config key \$\.dataset_options\.mine\.source\.file: '\.' does not match"),
        (
            {"url": "https://example.org/data/.."},
            r"\$\.dataset_options\.mine\.source: url 'https://example.org/data/\.\.' ends in '\.\.', no file",
        ),
        (
            {"url": "https://example.org"},
            r"config key \$\.dataset_options\.mine\.source: url 'https://example.org' ends in ''",
        ),
    ],
)
def test_a_user_file_named_like_a_folder_is_refused_before_any_job(tmp_path, source, message):
    """source.file '..' (or a URL ending /..) passed the schema; the fetch job failed with IsADirectoryError."""
    mine = {"source": {**source, "sha256": "0" * 64}, "format": "csv", "target": -1, "task": "regression"}
    overlay = {"datasets": ["mine"], "splits": 1, "dataset_options": {"mine": mine}}
    run = overlay_dry_run(tmp_path, {**overlay, "experiments": {"uci": {"datasets": ["mine"]}}})
    refused(run, message, tmp_path)


def tabulate_user_file(tmp_path: Path, content: bytes, format: str, target: int | str = -1):
    """Snakemake's tabulate job on a user data set of one file holding ``content``: (the run, the job's log)."""
    (tmp_path / "mirror" / "mine").mkdir(parents=True)
    (tmp_path / "mirror" / "mine" / "mine.csv").write_bytes(content)
    source = {"file": "mine.csv", "sha256": hashlib.sha256(content).hexdigest()}
    mine = {"source": source, "format": format, "target": target, "task": "regression"}
    overlay = {"datasets": ["mine"], "splits": 1, "dataset_options": {"mine": mine}, "mirror": str(tmp_path / "mirror")}
    (tmp_path / "overlay.yaml").write_text(yaml.safe_dump({**overlay, "experiments": {"uci": {"datasets": ["mine"]}}}))
    run = snakemake(tmp_path / "work", "data/tables/mine_random.npz", config=tmp_path / "overlay.yaml")
    return run, (tmp_path / "work" / "logs" / "tabulate" / "mine_random.log").read_text()


@pytest.mark.parametrize(
    "content, format",
    [(b"\0" * 5_000_000 + b" 1", "whitespace"), (b"a,y\n1," + b"x" * 5_000_000, "csv")],  # a feature beside it
    ids=["zeros", "cell"],
)
def test_a_huge_line_is_quoted_by_its_first_characters_only(tmp_path, content, format):
    """A file of 300 MB without newlines was quoted whole in the tabulate job's error: a 1.26 GB log, the
    same on the console and in Snakemake's log (2 GB: a MemoryError while the message was built)."""
    run, log = tabulate_user_file(tmp_path, content, format)
    assert run.returncode != 0 and re.search(r"mine\.csv: data row \d \(0-based\), column .*characters\)", log), log
    assert len(log) < 5_000 and len(run.stdout + run.stderr) < 20_000, (len(log), len(run.stdout + run.stderr))


def test_a_header_naming_a_column_twice_is_refused(tmp_path):
    """A header a,y,y trained with its copy y.1 (pandas' name for it) as a feature, no warning, status ok."""
    run, log = tabulate_user_file(tmp_path, b"a,y,y\n1,2,3\n4,5,6\n7,8,9\n", "csv", target="y")
    assert run.returncode != 0, log
    assert re.search(r"mine\.csv: the header names column 'y' twice \(columns 1 and 2, 0-based\)", log), log


@pytest.mark.parametrize(
    "content, message",
    [
        (b"y\n1\n2\n3\n", r"mine\.csv: no feature column beside the target 'y'"),
        (b"a,y\n", r"mine\.csv: no data rows"),
    ],
)
def test_a_table_without_features_or_rows_is_refused_by_its_tabulate_job(tmp_path, content, message):
    """A table with no feature column was tabulated and split, and failed inside k-means with a reshape traceback."""
    run, log = tabulate_user_file(tmp_path, content, "csv")
    assert run.returncode != 0 and re.search(message, log), log


@pytest.fixture(scope="module")
def quick_study(tmp_path_factory, shared_data):
    """The README's quick study, run once from scratch in a temporary folder."""
    workdir = tmp_path_factory.mktemp("quick")
    tic = time.perf_counter()
    run = snakemake(workdir, "--config", f"mirror={shared_data}", config="configs/quick.yaml", timeout=1800)
    assert run.returncode == 0, run.stderr[-5000:]
    print(f"quick study: {time.perf_counter() - tic:.0f} s")
    console_of(workdir).write_text(run.stderr)
    return workdir


def console_of(workdir: Path) -> Path:
    """Where the quick_study fixture keeps its run's console (Snakemake's stderr), beside its folder."""
    return workdir.with_name(workdir.name + ".console.txt")


def test_quick_study_has_every_run(quick_study):
    runs = pd.read_csv(quick_study / "results/runs.csv")
    expected = {("snelson", "snelson", method, M, 0) for method in ("svgp", "gpnet", "fbnn") for M in (2, 5, 20)}
    expected |= {
        ("uci", dataset, method, M, split)
        for dataset in ("boston", "concrete")
        for split in (0, 1)
        for method, M in (("svgp", 100), ("gpnet", 100), ("svgp", 500), ("gpnet", 500), ("fbnn", 500))
    }
    expected |= {
        ("odvgp", "boston", method, M, split)
        for split in (0, 1)
        for method, M in (("orth", 30), ("orthnat", 30), ("svgp", 30), ("svgp", 100))
    }
    assert set(runs[["experiment", "dataset", "method", "M", "split"]].itertuples(index=False, name=None)) == expected
    assert (runs["status"] == "ok").all()
    assert np.isfinite(runs[["rmse", "test_ll", "seconds"]].to_numpy()).all()
    assert (runs["device"] == "cpu").all() and (runs.loc[runs.dataset == "boston", "iterations"] == 100).all()


def test_quick_study_console_is_a_line_a_job_start_and_end_with_the_time_left(quick_study):
    """The study's console (gpstudy.study.console): each job a line as it starts (with its log) and one as it ends
    (k of N, elapsed, time left), where Snakemake's own wrote ~17; its blocks stay in the complete log."""
    console = console_of(quick_study).read_text()
    ended = re.findall(
        r"^\[\d\d:\d\d:\d\d\] (\d+) of (\d+) jobs done \(\d+%\), \d+:\d\d:\d\d elapsed(.*)$", console, re.M
    )
    jobs = int(ended[-1][1])
    assert jobs > 40 and [(int(k), int(n)) for k, n, _ in ended] == [(k, jobs) for k in range(1, jobs + 1)]
    started = re.findall(
        r"^\[\d\d:\d\d:\d\d\] started train \(experiment=uci, dataset=\w+, method=\w+, M=\d+, "
        r"splits=0-1\), log logs/train/uci/\S+\.log$",
        console,
        re.M,
    )
    assert len(started) == 10 and len(re.findall(r"^\[\d\d:\d\d:\d\d\] started ", console, re.M)) == jobs
    estimates = [re.match(r", about \d+:\d\d:\d\d left( \+ (\d+) untimed jobs?)?;", rest) for _, _, rest in ended]
    assert all(estimates[:-1]) and not estimates[-1]  # each but the last (after the first job)
    untimed = [int(m[2] or 0) for m in estimates[:-1]]
    assert untimed == sorted(untimed, reverse=True) and untimed[0] > 20 and untimed[-1] <= 1  # rules timed in turn
    assert "rule train:" not in console and "Select jobs" not in console
    assert len(console.splitlines()) < 2 * jobs + 60  # Snakemake's header and job stats beside the jobs' lines
    complete_log = next((quick_study / ".snakemake/log").glob("*.snakemake.log")).read_text()
    trains = len(re.findall(r"^\[\d\d:\d\d:\d\d\] started train ", console, re.M))
    assert complete_log.count("rule train:") == trains and f"{jobs} of {jobs} steps (100%) done" in complete_log


def test_quick_study_tables_carry_the_papers_values(quick_study):
    for metric, boston_svgp_100 in (("rmse", "(2.897 ± 0.132)"), ("test_ll", "(-2.465 ± 0.054)")):
        table = pd.read_csv(quick_study / f"results/tables/uci_{metric}.csv")
        assert set(table["dataset"]) == {"boston", "concrete"} and (table["n"] == 2).all()
        assert table["paper_mean"].notna().all() and table["mean"].notna().all()
        markdown = (quick_study / f"results/tables/uci_{metric}.md").read_text()
        assert "| Boston |" in markdown and boston_svgp_100 in markdown
        assert "\\begin{tabular}" in (quick_study / f"results/tables/uci_{metric}.tex").read_text()


def test_quick_study_claims_are_not_run_at_its_settings(quick_study):
    claims = pd.read_csv(quick_study / "results/claims.csv")
    assert (claims["verdict"] == "not run").all() and (claims["claim_verdict"] == "not run").all()
    snelson = claims[claims["experiment"] == "snelson"]
    assert snelson["value"].notna().all() and snelson["note"].str.contains("iterations 500, not 40000").all()
    assert "`snelson_recover_exact_gp`: not run" in (quick_study / "results/claims.md").read_text()


def test_quick_study_odvgp_table_and_wall_clock_curves(quick_study):
    table = pd.read_csv(quick_study / "results/tables/odvgp_rmse.csv")
    assert set(zip(table["method"], table["M"])) == {("orth", 30), ("orthnat", 30), ("svgp", 30), ("svgp", 100)}
    assert (table["n"] == 2).all() and table["mean"].notna().all()
    assert "| ORTHNAT 30 |" in (quick_study / "results/tables/odvgp_rmse.md").read_text()
    png_size(quick_study / "results/figures/learning_curves_odvgp.png")


def test_quick_study_figures_are_real_images(quick_study):
    figures = quick_study / "results/figures"
    for name in ("uci_violins", "snelson"):
        width, height = png_size(figures / f"{name}.png")
        assert width > 600 and height > 400
        assert (figures / f"{name}.pdf").read_bytes().startswith(b"%PDF")
    for experiment in ("uci", "snelson"):
        width, height = png_size(figures / f"learning_curves_{experiment}.png")
        assert width > 300 and height > 200
    snelson = pd.read_csv(quick_study / "results/snelson/snelson/gpnet/M5/splits0-0/split0/predictions.csv")
    assert len(snelson) == 301 and snelson["x"].min() == -3 and snelson["x"].max() == 10


def test_snelson_methods_share_the_exact_gps_pretrained_hyperparameters(quick_study):
    """Section 5.1: every method on Snelson starts from the pretrained hyperparameters and keeps them,
    SVGP too, so each posterior can be set beside the exact GP's."""
    runs = {
        method: json.loads(
            (quick_study / f"results/snelson/snelson/{method}/M5/splits0-0/split0/metrics.json").read_text()
        )["hyperparameters"]
        for method in ("svgp", "gpnet", "fbnn")
    }
    assert runs["svgp"] == runs["gpnet"] == runs["fbnn"]
    assert runs["svgp"]["lengthscale"] != [1.0]  # pretrained, not the initial values


@pytest.fixture(scope="module")
def quick_report(quick_study, shared_data) -> Path:
    """The quick study's report, made once as docs/pipeline.md says (snakemake --report)."""
    run = snakemake(
        quick_study, "--config", f"mirror={shared_data}", "--report", "report.html", config="configs/quick.yaml"
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return quick_study / "report.html"


def report_variable(report: Path, name: str):
    """A JSON variable of a Snakemake report's page: ``results`` (its entries), ``categories`` (their groups)."""
    block = rf'<script id="{name}">\s*var {name} = (.*?);\s*</script>'
    return json.loads(re.search(block, report.read_text(errors="replace"), re.S)[1])


def test_report_groups_each_table_and_figure_once_by_experiment(quick_report):
    categories = report_variable(quick_report, "categories")
    grouped = {
        category: {subcategory: set(entries) for subcategory, entries in subcategories.items()}
        for category, subcategories in categories.items()
    }
    tables, figures = "results/tables/{}.html", "results/figures/{}.png"
    assert grouped == {
        "uci": {
            "Tables": {tables.format("uci_rmse"), tables.format("uci_test_ll")},
            "Figures": {figures.format("learning_curves_uci"), figures.format("uci_violins")},
        },
        "odvgp": {
            "Tables": {tables.format("odvgp_rmse"), tables.format("odvgp_test_ll")},
            "Figures": {figures.format("learning_curves_odvgp")},
        },
        "snelson": {"Figures": {figures.format("learning_curves_snelson"), figures.format("snelson")}},
        "claims": {"Other": {"results/claims.html"}},
    }
    results = report_variable(quick_report, "results")
    assert len(results) == 10 and results.keys() == {
        entry for groups in grouped.values() for entries in groups.values() for entry in entries
    }
    assert results[tables.format("uci_rmse")]["labels"] == {"table": "Test RMSE"}
    assert results[tables.format("uci_rmse")]["mime_type"] == "text/html"
    assert results[figures.format("uci_violins")]["labels"] == {"figure": "violins over splits"}


@pytest.fixture(scope="module")
def report_screenshots():
    """docs/report_screenshots.py as a module (its CHROMIUM, WINDOW)."""
    spec = importlib.util.spec_from_file_location("report_screenshots", SCREENSHOTS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_browser_shows_table_3_and_the_claims_as_tables_in_the_report(quick_report, report_screenshots, tmp_path):
    """The report opened in headless Chromium by docs/report_screenshots.py: the rendered pages' table cells."""
    if not report_screenshots.CHROMIUM.exists():
        pytest.skip(f"no Chromium at {report_screenshots.CHROMIUM}: apt-get install chromium (.ci/run does)")
    run = subprocess.run(
        [sys.executable, str(SCREENSHOTS), str(quick_report), "--out", str(tmp_path), "--print"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    pages = json.loads(run.stdout)
    table3 = pages["table3"]["cells"]
    assert table3[:4] == ["Data set", "N", "D", "SVGP 100"]
    boston_svgp_100 = table3[table3.index("Boston") + 3]  # ours, and the paper's below it, with the mark
    assert re.fullmatch(r"\d+\.\d{3} ± \d+\.\d{3}\n\(2\.897 ± 0\.132\) \([✓✗]\)", boston_svgp_100), boston_svgp_100
    claim = load_claims()[0]
    claims = pages["claims"]["cells"]
    start = claims.index(claim.quote)
    assert claims[start - 1 : start + 4] == ["1", claim.quote, claim.experiment, claim.holds_on, "not run"]
    for name in ("table3", "claims"):
        assert png_size(tmp_path / f"report_{name}.png") == report_screenshots.WINDOW


def test_rerun_after_a_finished_study_does_nothing(quick_study, shared_data):
    run = snakemake(quick_study, "--config", f"mirror={shared_data}", config="configs/quick.yaml")
    assert run.returncode == 0 and "Nothing to be done" in run.stdout + run.stderr


def job_processes(workdir: Path) -> list[int]:
    """The running processes of Snakemake jobs started in ``workdir`` (their scripts live in .snakemake/scripts)."""
    scripts = str(workdir / ".snakemake/scripts").encode()
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if scripts in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:  # ended meanwhile
            pass
    return found


def test_killed_snakemake_takes_its_job_along_and_the_rerun_resumes(tmp_path, shared_data):
    target = "results/snelson/snelson/gpnet/M5/splits0-0"  # the job's folder (a directory output)
    args = [target, "--config", f"mirror={shared_data}", "iterations=10000"]  # long enough to outlast the checks
    job = subprocess.Popen(
        command(tmp_path, *args, config="configs/quick.yaml"),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    checkpoint = tmp_path / "results/snelson/snelson/gpnet/M5/splits0-0.checkpoint.pt"
    deadline = time.time() + 300
    while not checkpoint.exists() and time.time() < deadline and job.poll() is None:
        time.sleep(0.1)
    assert job.poll() is None, "the job ended before its first checkpoint"
    assert job_processes(tmp_path), "no training process found"
    second = snakemake(tmp_path, *args, config="configs/quick.yaml")  # a second Snakemake on the same folder
    assert second.returncode != 0 and "cannot be locked" in second.stdout + second.stderr
    assert job.poll() is None, "the job ended before Snakemake could be killed"
    os.kill(job.pid, signal.SIGKILL)  # Snakemake alone, as `kill -9 <pid>` or a lost login would
    job.wait()
    deadline = time.time() + 20
    while job_processes(tmp_path) and time.time() < deadline:
        time.sleep(0.1)
    orphans = job_processes(tmp_path)
    os.killpg(job.pid, signal.SIGKILL)  # leave nothing behind even if the test fails
    assert not orphans, "the training process outlived Snakemake"
    assert checkpoint.exists() and not (tmp_path / target).exists()
    assert snakemake(tmp_path, "--unlock", config="configs/quick.yaml").returncode == 0  # the crash left a lock
    rerun = snakemake(tmp_path, *args, config="configs/quick.yaml")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    log = (tmp_path / "logs/train/snelson/snelson/gpnet/M5/splits0-0.log").read_text()
    assert "resumed from" in log
    assert json.loads((tmp_path / target / "split0/metrics.json").read_text())["status"] == "ok"
    assert not checkpoint.exists()


def test_data_stage_splits(quick_study):
    split = load_split(quick_study / "data/splits/boston/random/split0.npz")
    assert split.x_train.shape == (455, 13) and abs(split.y_train.mean()) < 1e-10
    assert load_split(quick_study / "data/splits/snelson/random/split0.npz").x_plot.shape == (301, 1)
