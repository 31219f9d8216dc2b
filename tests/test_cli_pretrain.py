"""Issue 47, item 4: ``gpstudy train`` pretrains where the workflow does (the exact GP's device, settings, subset,
seed and threads), and its training starts from the hyperparameters the workflow's would."""

import contextlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

import gpstudy.training
from gpstudy.cli import main
from gpstudy.io import read_json
from gpstudy.study import DEFAULT_CONFIG, exact_gp_settings, load_config
from gpstudy.training import run

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")
QUICK = str(REPO / "configs/quick.yaml")
GPNET_ON_BOSTON = ["--dataset", "boston", "--method", "gpnet", "--M", "10"]  # config.yaml: GPNet on Boston pretrains


class Recorded(Exception):
    """Raised by the recording pretraining: what was to be seen has been."""


@pytest.mark.skipif(
    importlib.util.find_spec("snakemake") is None or not SNAKEMAKE.exists(), reason="no snakemake to compare with"
)
def test_train_starts_from_the_hyperparameters_the_workflows_pretrain_job_writes(tmp_path, monkeypatch, shared_data):
    """The quick study's pretrain job of Boston's split 0 (Snakemake, scripts/pretrain.py), then ``gpstudy train``
    of GPNet on it with the same config: the CLI's pretrained hyperparameters are the job's, bit for bit."""
    workflow = subprocess.run(
        [SNAKEMAKE, "-s", REPO / "Snakefile", "--directory", tmp_path, "--configfile", REPO / "config.yaml", QUICK]
        + ["--config", f"mirror={shared_data}", "--cores", "2", "results/pretrain/boston/random/split0.json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert workflow.returncode == 0, workflow.stderr[-5000:]
    monkeypatch.chdir(tmp_path)
    main(["train", "--configfile", QUICK, "--config", f"mirror={shared_data}", *GPNET_ON_BOSTON, "--iterations", "1"])
    pretrained = read_json(tmp_path / "results/cli/boston/gpnet/M10/split0" / "pretrained.json")
    assert pretrained == read_json(tmp_path / "results/pretrain/boston/random/split0.json")
    assert read_json(tmp_path / "results/cli/boston/gpnet/M10/split0/metrics.json")["status"] == "ok"


@pytest.mark.parametrize("exact, training", [("cpu", "cuda"), ("cuda", "cpu")])
def test_train_pretrains_on_the_exact_gps_device_not_the_training_device(
    exact, training, tmp_path, monkeypatch, shared_data
):
    """``methods.exact.device`` (cpu in config.yaml) is where pretraining runs, whatever device training takes:
    each pretrain_splits is recorded, run on the CPU, stopped on a GPU (this machine has none); a training on
    a GPU is recorded, not run."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exact.yaml").write_text(json.dumps({"methods": {"exact": {"device": exact}}}))
    pretrained, trained = [], []
    original = run.pretrain_splits

    def recording_pretraining(splits, settings, checkpoint=None):
        pretrained.append(settings)
        if settings.device != "cpu":
            raise Recorded
        return original(splits, settings, checkpoint)

    def recording_job(split_files, settings, out_dirs, checkpoint, labels, hyperparameter_files, **options):
        trained.append((settings, hyperparameter_files))
        raise Recorded

    monkeypatch.setattr(run, "pretrain_splits", recording_pretraining)
    if training != "cpu":
        monkeypatch.setattr(gpstudy.training, "run_job", recording_job)
    words = ["train", "--configfile", QUICK, "exact.yaml", "--config", f"mirror={shared_data}", *GPNET_ON_BOSTON]
    with contextlib.suppress(Recorded):
        main([*words, "--device", training, "--iterations", "2"])
    config = load_config(DEFAULT_CONFIG, QUICK, tmp_path / "exact.yaml")
    workflows = run.pretraining_settings(run.pretraining_reads(exact_gp_settings(config, "boston")))
    assert workflows.device == exact and pretrained == [workflows]  # the pretrain rule's settings, device and all
    if training != "cpu":  # pretrained here, then handed to the training on the other device
        (settings, files), folder = trained[0], Path("results/cli/boston/gpnet/M10/split0")
        assert settings.device == training and files == {0: folder / "pretrained.json"}
