"""Every setting that shapes a data file reruns exactly the jobs that depend on it (issue #25, items 1-2).

Snakemake reruns a job whose params changed, and every job downstream of one it reruns; the data
rules' params are ``gpstudy.study.data_stage_params``. The unit tests change each data set key the
schema knows and check which stages' params change; the workflow test runs a tiny study of a user's
own CSV once, then asks Snakemake (dry runs) which jobs each change would rerun, and reruns one.
"""

import copy
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from gpstudy import paths
from gpstudy.data import DATASETS
from gpstudy.methods import METHODS
from gpstudy.study import DATA_STAGES, data_plan, data_stage_params, load_config, merge, training_keys

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
SOURCE = {"file": "mydata.csv"}  # sha256 added by each config
USER = {"format": "csv", "target": -1, "task": "regression"}
DATA_KEYS = {  # a data set key of the schema -> (options that change it, the stages whose output it changes)
    "source": ({"source": {"file": "other.csv", "sha256": "1" * 64}}, {"fetch", "tabulate", "split"}),
    "format": ({"format": "whitespace"}, {"tabulate", "split"}),
    "target": ({"target": "a"}, {"tabulate", "split"}),
    "task": ({"task": "classification", "likelihood": "bernoulli"}, {"tabulate", "split"}),
    "train_size": ({"train_size": 40}, {"split"}),
    "test_size": ({"test_size": 5}, {"split"}),
    "drop_features": ({"drop_features": [0]}, {"split"}),
    "protocol": ({"protocol": "first_rows"}, set()),  # in every data file's path: new files, none rerun
    "splits": ({"splits": 3}, set()),  # more split files, each made once
    "sha256": None,  # a registered data set's pins: see test_a_pin_of_a_registered_file_reruns_its_fetch
    "months": None,  # the airline reader's: see test_the_airline_months_rerun_its_table_and_splits
    "standardize_inputs": None,  # a classification data set's: see test_per_pixel_standardization_reruns_the_splits
}
STUDY_KEYS = {"seed": (1, {"split"}), "mirror": ("/elsewhere", set())}  # top-level keys that reach the data stage


def user_config(sha256: str, **changes) -> dict:
    """config.yaml with a user data set ``mydata`` (its options changed by ``changes``), validated."""
    return load_config(
        REPO / "config.yaml",
        overrides={
            "datasets": ["mydata"],
            "dataset_options": {"mydata": {"source": {**SOURCE, "sha256": sha256}, **USER, **changes}},
            "experiments": {"mine": {"datasets": ["mydata"], "methods": {"svgp": [5]}}},
        },
    )


def changed_stages(before: dict, after: dict, dataset: str = "mydata", protocol: str = "random") -> set[str]:
    old, new = (data_stage_params(config, dataset, protocol) for config in (before, after))
    return {stage for stage in DATA_STAGES if old[stage] != new[stage]}


def test_every_data_set_key_is_classified():
    """A key added to the schema's ``dataset_options`` must be added to DATA_KEYS, saying what it reruns."""
    schema = yaml.safe_load((REPO / "gpstudy/study/config.schema.yaml").read_text())
    keys = set(schema["properties"]["dataset_options"]["additionalProperties"]["properties"])
    run_keys = (
        set(training_keys()) | {key for method in METHODS.values() for key in method.options_schema} | {"methods"}
    )
    assert keys - run_keys == set(DATA_KEYS)


@pytest.mark.parametrize("key", [key for key, case in DATA_KEYS.items() if case is not None])
def test_a_data_set_key_changes_the_params_of_exactly_the_stages_it_shapes(key):
    changes, stages = DATA_KEYS[key]
    before = user_config("0" * 64)
    assert changed_stages(before, user_config("0" * 64, **changes)) == stages


@pytest.mark.parametrize("key", list(STUDY_KEYS))
def test_a_study_key_changes_the_params_of_exactly_the_stages_it_shapes(key):
    value, stages = STUDY_KEYS[key]
    before = user_config("0" * 64)
    assert changed_stages(before, {**before, key: value}) == stages


def test_a_new_checksum_reruns_the_fetch_but_a_new_url_for_the_same_file_does_not():
    before = user_config("0" * 64)
    assert changed_stages(before, user_config("1" * 64)) == {"fetch", "tabulate", "split"}
    moved = user_config("0" * 64, source={**SOURCE, "sha256": "0" * 64, "url": "https://example.org/mydata.csv"})
    assert changed_stages(before, moved) == set()


def test_a_pin_of_a_registered_file_reruns_its_fetch():
    before = load_config(REPO / "config.yaml")
    pinned = copy.deepcopy(before)
    merge(pinned, {"dataset_options": {"airline": {"sha256": {"2008.csv.bz2": "2" * 64}}}})
    assert changed_stages(before, pinned, "airline") == {"fetch", "tabulate", "split"}


def test_the_airline_months_rerun_its_table_and_splits():
    before = load_config(REPO / "config.yaml")
    whole_year = copy.deepcopy(before)
    merge(whole_year, {"dataset_options": {"airline": {"months": list(range(1, 13))}}})
    assert changed_stages(before, whole_year, "airline") == {"tabulate", "split"}


def test_per_pixel_standardization_reruns_the_splits():
    """MNIST's standardize_inputs (the AutoGP authors' per-pixel standardization) changes its splits, not its
    files or table: its split jobs rerun, and every training job on them."""
    before = load_config(REPO / "config.yaml")
    after = copy.deepcopy(before)
    merge(after, {"dataset_options": {"mnist": {"standardize_inputs": True}}})
    assert changed_stages(before, after, "mnist", "given") == {"split"}
    assert data_stage_params(after, "mnist", "given")["split"]["options"]["standardize_inputs"] is True


def test_stage_params_are_plain_data_snakemake_can_compare(study_config):
    """Snakemake leaves a param it cannot represent out of its rerun check, silently: every value must be plain
    (json.dumps refuses any other), for a user data set and every registered one under its protocol."""
    params = data_stage_params(user_config("0" * 64), "mydata", "random")
    assert params["tabulate"]["dataset"]["read"]["keywords"] == {"path": "mydata.csv", **USER}
    json.dumps(params)
    for name in DATASETS:
        params = data_stage_params(study_config, name, data_plan(study_config, name).protocol)
        read = params["tabulate"]["dataset"]["read"]  # a function, or one with its options bound (airline's months)
        assert params["fetch"]["files"] and (read if isinstance(read, str) else read["function"]).startswith(
            "gpstudy.data."
        )
        json.dumps(params)


def write_csv(path: Path, scale: float, seed: int = 0, rows: int = 48) -> str:
    """A CSV of three features ``a b c`` and a target ``y`` of size ``scale``; returns its sha256."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, size=(rows, 3))
    y = scale * (np.sin(x[:, 0]) + 0.5 * x[:, 1]) + 0.05 * scale * rng.normal(size=rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"a": x[:, 0], "b": x[:, 1], "c": x[:, 2], "y": y}).to_csv(path, index=False, float_format="%.6f")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def overlay(workdir: Path, name: str, sha256: str, mirror: Path, data: dict | None = None, **study) -> Path:
    """A config overlay: the user data set ``mydata`` (with ``data`` changes), one SVGP run, pretrained."""
    options = {
        "source": {**SOURCE, "sha256": sha256},
        **USER,
        "pretrain": True,
        "pretrain_iterations": 5,
        **(data or {}),
    }
    config = {
        "datasets": ["mydata"],
        "splits": 1,
        "device": "cpu",
        "mirror": str(mirror),
        "dataset_options": {"mydata": options},
        "experiments": {"mine": {"datasets": ["mydata"], "methods": {"svgp": [5]}}},
        "training": {"iterations": 20, "batch_size": 20, "eval_every": 10},
        **study,
    }
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def snakemake(workdir: Path, config: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            SNAKEMAKE,
            "-s",
            str(REPO / "Snakefile"),
            "--directory",
            str(workdir),
            "--configfile",
            str(config),
            "--cores",
            "1",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )


PLAN = """
import json, sys
from collections import Counter
from snakemake import cli
from snakemake.executors import dryrun

out, snakefile, workdir, target, *configs = sys.argv[1:]
jobs = []
run_job = dryrun.Executor.run_job  # the dry run's executor: runs nothing, reports each job done


def record(self, job):
    jobs.append(job.rule.name)
    run_job(self, job)


dryrun.Executor.run_job = record
plans = {}
for config in configs:
    jobs.clear()
    parser, args = cli.parse_args(["-s", snakefile, "--directory", workdir, "--configfile", config, "-n",
                                   "--cores", "1", target])
    if not cli.args_to_api(args, parser):
        sys.exit(f"dry run under {config} failed")
    plans[config] = dict(Counter(jobs))
json.dump(plans, open(out, "w"))
"""  # dry runs in one process (Snakemake and torch imported once): the jobs each config would run


def planned(workdir: Path, *configs: Path) -> list[dict[str, int]]:
    """The jobs a dry run under each of ``configs`` would run to make the run table, rule -> count (empty:
    nothing to be done)."""
    out = workdir / "plans.json"
    run = subprocess.run(
        [sys.executable, "-c", PLAN, str(out), str(REPO / "Snakefile"), str(workdir), paths.RUNS, *map(str, configs)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    plans = json.loads(out.read_text())
    return [plans[str(config)] for config in configs]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A tiny study of a user's CSV (one split, one 20-step SVGP run on pretrained hyperparameters), run once."""
    workdir = tmp_path_factory.mktemp("rerun")
    mirror = workdir / "mirror"
    sha256 = write_csv(mirror / "mydata/mydata.csv", scale=0.1)
    config = overlay(workdir, "first", sha256, mirror)
    run = snakemake(workdir, config, paths.RUNS)  # not the learning curves figure
    assert run.returncode == 0, run.stderr[-5000:]
    return workdir, mirror, sha256


@pytest.fixture(scope="module")
def new_sha256(study) -> str:
    """The study's CSV overwritten by the user with targets 100 times larger (after its study ran); its sha256."""
    _, mirror, _ = study
    return write_csv(mirror / "mydata/mydata.csv", scale=10.0, seed=1)


TRAINING = {"train": 1, "collect": 1}  # a training job and what collects it
FROM_SPLIT = {"split": 1, "pretrain": 1, **TRAINING}


def test_each_change_reruns_exactly_the_jobs_that_depend_on_it(study, new_sha256):
    workdir, mirror, sha256 = study
    cases = {  # name -> (overlay arguments, the jobs a dry run plans)
        "unchanged": ({}, {}),
        "sha256": ({"sha256": new_sha256}, {"fetch": 1, "tabulate": 1, **FROM_SPLIT}),
        "target": ({"data": {"target": "a"}}, {"tabulate": 1, **FROM_SPLIT}),
        "drop_features": ({"data": {"drop_features": [1]}}, FROM_SPLIT),
        "train_size": ({"data": {"train_size": 40}}, FROM_SPLIT),
        "seed": ({"seed": 3}, FROM_SPLIT),
        "mirror": ({"mirror": workdir / "elsewhere"}, {}),  # where a pinned file is found, not what it is
        "url": ({"data": {"source": {**SOURCE, "sha256": sha256, "url": "https://example.org/mydata.csv"}}}, {}),
        # a training-only setting reruns training, not pretraining, which reads none of them (issue 35, item 11b)
        "lr": ({"data": {"lr": 0.02}}, TRAINING),
        "iterations": ({"iterations": 30}, TRAINING),
        "eval_every": ({"data": {"eval_every": 5}}, TRAINING),
        "checkpoint_every": ({"data": {"checkpoint_every": 5}}, TRAINING),
        "pretrain_lr": ({"data": {"pretrain_lr": 0.05}}, {"pretrain": 1, **TRAINING}),
        "pretrain_subset": ({"data": {"pretrain_subset": 20}}, {"pretrain": 1, **TRAINING}),
    }
    configs = [
        overlay(workdir, name, **{"sha256": sha256, "mirror": mirror, **changes})
        for name, (changes, _) in cases.items()
    ]
    assert dict(zip(cases, planned(workdir, *configs))) == {name: jobs for name, (_, jobs) in cases.items()}


def test_a_rerun_after_a_new_file_trains_on_it(study, new_sha256):
    """Item 1: the CSV overwritten, its new sha256 given: the runs train and test on the new numbers."""
    workdir, mirror, _ = study
    before = pd.read_csv(workdir / "results/runs.csv")["rmse"].item()
    run = snakemake(workdir, overlay(workdir, "new_file", new_sha256, mirror), paths.RUNS)
    assert run.returncode == 0, run.stderr[-5000:]
    after = pd.read_csv(workdir / "results/runs.csv")["rmse"].item()
    assert before < 0.5 and after > 10 * before, (before, after)  # targets 100 times larger
