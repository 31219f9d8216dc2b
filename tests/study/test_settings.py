"""Run settings: config.yaml's defaults, then the data set's options, then its per-method ones, then the
command line; no defaults of their own."""

import copy
from dataclasses import fields
from pathlib import Path

import pytest
import torch
import yaml

from gpstudy.data.registry import get_dataset
from gpstudy.methods.base import COMPILE_NEEDS_TORCH
from gpstudy.runtime import devices
from gpstudy.study import ConfigError, RunSettings, merge, run_settings, training_keys, validate_config
from gpstudy.study.settings import SettingsError, check_settings, exact_gp_settings

REPO = Path(__file__).resolve().parents[2]


def test_precedence(study_config):
    boston = run_settings(study_config, "boston", method="gpnet", M=100)
    assert boston.pretrain and boston.options["measurement"] == "noisy" and boston.iterations == 10000
    assert boston.seed == study_config["seed"]  # split s draws from seed + s
    svgp = run_settings(study_config, "boston", method="svgp", M=100)
    assert not svgp.pretrain and svgp.options == {
        "online_hyperparameters": True,
        "inducing_init": "kmeans",
        "learn_inducing_inputs": True,
    }  # no measurement: not svgp's
    power = run_settings(study_config, "power", method="gpnet", M=500, iterations=7, device=None)
    assert (power.options["beta0"], power.options["xi"], power.options["online_hyperparameters"]) == (0.01, 0.1, True)
    assert (
        power.iterations == 7 and power.device == "cpu"
    )  # None from the command line keeps the config's (auto, no GPU)
    airline = {method: run_settings(study_config, "airline", method=method, M=100) for method in ("gpnet", "fbnn")}
    assert airline["gpnet"].options["online_hyperparameters"] and not airline["fbnn"].options["online_hyperparameters"]
    assert all(settings.pretrain and settings.options["measurement"] == "noisy" for settings in airline.values())


def test_snelson_pretrains_every_method_and_keeps_the_hyperparameters_fixed(study_config):
    for method in ("svgp", "gpnet", "fbnn"):
        settings = run_settings(study_config, "snelson", method=method, M=5)
        assert settings.pretrain and settings.pretrain_iterations == 100
        assert settings.options["online_hyperparameters"] is False
    assert run_settings(study_config, "snelson", method="gpnet", M=5).options["box"] == [[-3.0], [10.0]]


def test_a_training_key_for_one_method_yields_to_the_data_sets(study_config):
    config = copy.deepcopy(study_config)
    config["methods"]["svgp"]["kernel"] = "matern52"
    config["dataset_options"]["boston"]["kernel"] = "matern32"
    validate_config(config)
    assert run_settings(config, "concrete", method="svgp", M=5).kernel == "matern52"
    assert run_settings(config, "concrete", method="gpnet", M=5).kernel == "rbf"
    assert run_settings(config, "boston", method="svgp", M=5).kernel == "matern32"


def test_study_wide_keys_override_every_data_set(study_config):
    config = {**study_config, "iterations": 11, "device": "cpu"}
    snelson = run_settings(config, "snelson", method="fbnn", M=5)
    assert (snelson.iterations, snelson.device) == (11, "cpu")


def fake_gpu(monkeypatch, present: bool) -> None:
    """This process sees one GPU (a CUDA build of torch, nvidia-smi listing it), or none."""
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    monkeypatch.setattr(
        devices, "nvidia_smi_gpus", lambda: [devices.Gpu(0, "Fake GPU", "GPU-0000-fake")] if present else []
    )


@pytest.mark.parametrize("gpu, expected", [(False, "cpu"), (True, "cuda")])
def test_auto_is_resolved_once_to_a_device_type(study_config, monkeypatch, gpu, expected):
    fake_gpu(monkeypatch, gpu)
    settings = run_settings(study_config, "boston", method="svgp", M=5)
    assert study_config["training"]["device"] == "auto" and settings.device == expected  # no index: a GPU slot picks it
    assert run_settings(study_config, "boston", method="svgp", M=5, device="cuda:1").device == "cuda:1"  # pinned


def test_the_exact_gp_keeps_its_device_when_the_study_moves_to_cuda(study_config, monkeypatch):
    fake_gpu(monkeypatch, True)
    config = {**study_config, "device": "cuda"}
    assert run_settings(config, "boston", method="gpnet", M=5).device == "cuda"  # training runs move
    assert run_settings(config, "snelson", method="gpnet", M=5).device == "cuda"  # over the data set's cpu too
    assert exact_gp_settings(config, "boston").device == "cpu"  # methods.exact.device
    assert exact_gp_settings(study_config, "boston").device == "cpu"  # ... also over training.device: auto
    assert run_settings(config, "boston", method="exact", M=5).device == "cuda"  # a training run of the exact GP moves
    edited = copy.deepcopy(config)
    edited["methods"]["exact"]["device"] = "auto"
    edited["dataset_options"]["power"]["device"] = "cuda:1"
    assert exact_gp_settings(edited, "boston").device == "cuda"  # the config says otherwise
    assert exact_gp_settings(edited, "power").device == "cuda:1"  # a data set's device reaches its exact GP
    assert exact_gp_settings(config, "boston").pretrain_subset == config["training"]["pretrain_subset"]


def test_unknown_override_is_refused(study_config):
    with pytest.raises(
        SettingsError, match="the overrides: beta0 is neither a training setting nor an option of method 'svgp'"
    ):
        run_settings(study_config, "boston", method="svgp", M=5, beta0=0.1)


def test_a_variant_is_its_method_with_its_own_keys(study_config):
    config = copy.deepcopy(study_config)
    config["variants"]["gpnet_box"] = {"method": "gpnet", "measurement": "box", "box": [[-1.0], [1.0]], "lr": 0.01}
    config["experiments"]["snelson"]["methods"]["gpnet_box"] = [5]
    validate_config(config)
    variant = run_settings(config, "concrete", method="gpnet_box", M=5)
    assert variant.method == "gpnet" and variant.options["measurement"] == "box" and variant.lr == 0.01
    assert variant.options["beta0"] == config["methods"]["gpnet"]["beta0"]  # the rest from methods.gpnet
    boston = run_settings(config, "boston", method="gpnet_box", M=5)
    assert boston.options["measurement"] == "box" and boston.pretrain  # the variant's keys, the data set's others


@pytest.mark.parametrize(
    "variants, message",
    [
        ({"svgp": {"method": "gpnet"}}, r"\$\.variants\.svgp: a registered method's name"),
        ({"fast": {"method": "nope"}}, r"\$\.variants\.fast\.method: 'nope' is not one of"),
        ({"fast": {"lr": 0.1}}, r"\$\.variants\.fast: 'method' is a required property"),
        (
            {"fast": {"method": "svgp", "beta0": 0.1}},
            r"variants\.fast: beta0 is neither a training setting nor an "
            r"option of method 'svgp'",
        ),
    ],
)
def test_a_bad_variant_is_named(study_config, variants, message):
    from gpstudy.study import ConfigError

    config = copy.deepcopy(study_config)
    config["variants"].update(variants)
    config["experiments"]["snelson"]["methods"] = {name: [5] for name in variants}
    with pytest.raises(ConfigError, match=message):
        validate_config(config)


def test_fields_are_the_schemas_training_keys():
    assert {f.name for f in fields(RunSettings)} == set(training_keys()) | {"method", "M", "seed", "options"}


def test_torch_compile_is_refused_below_the_torch_that_compiles_the_method(monkeypatch, settings_for):
    """Compiled GPNet and FBNN fail (in dynamo or inductor's backward) before ``COMPILE_NEEDS_TORCH``
    (docs/installation.md): refused when the settings are checked, before any data is read, with the installed
    torch, the one needed and the fix named; eager training and compiled SVGP (which work there) are not."""
    major, minor = map(int, COMPILE_NEEDS_TORCH.split("."))
    below = f"{major}.{minor - 1}.9+cu124"  # the last patches of the minor release below
    boston = get_dataset("boston")
    monkeypatch.setattr(torch, "__version__", below)
    for method in ("gpnet", "fbnn"):
        message = (
            f"training.torch_compile: true needs torch >= {COMPILE_NEEDS_TORCH} for method {method!r} "
            f"(its compiled training fails before it: docs/installation.md), but torch {below} is installed; "
            "upgrade torch, or set training.torch_compile: false"
        )
        with pytest.raises(SettingsError) as refused:
            check_settings(settings_for(method, 8, torch_compile=True), boston)
        assert str(refused.value) == message
        check_settings(settings_for(method, 8, torch_compile=False), boston)
    check_settings(settings_for("svgp", 8, torch_compile=True), boston)
    for version in (f"{COMPILE_NEEDS_TORCH}.0", f"{COMPILE_NEEDS_TORCH}.0+cpu"):
        monkeypatch.setattr(torch, "__version__", version)
        for method in ("gpnet", "fbnn"):
            check_settings(settings_for(method, 8, torch_compile=True), boston)


def test_a_study_compiling_gpnet_on_a_torch_too_old_is_refused_before_any_job(monkeypatch):
    """configs/paper-cpu.yaml compiles Snelson's GPNet and FBNN: Snakemake's validation refuses the study."""
    paper_cpu = yaml.safe_load((REPO / "config.yaml").read_text())  # load_config would validate it already
    merge(paper_cpu, yaml.safe_load((REPO / "configs" / "paper-cpu.yaml").read_text()))
    major, minor = map(int, COMPILE_NEEDS_TORCH.split("."))
    monkeypatch.setattr(torch, "__version__", f"{major}.{minor - 1}.9")
    with pytest.raises(
        ConfigError,
        match=r"experiment 'snelson', data set 'snelson', method 'gpnet': training\."
        rf"torch_compile: true needs torch >= {COMPILE_NEEDS_TORCH} for method",
    ):
        validate_config(paper_cpu)


@pytest.mark.parametrize("iterations, refused", [(1000, True), (400, True), (1001, False)])
def test_autogp_loo_that_never_reaches_its_loo_phase_is_refused(tmp_path, monkeypatch, capsys, iterations, refused):
    """Issue 49: autogp_loo with iterations at or below variational_phase (1000) never ran its leave-one-out
    phase, without a word; ``gpstudy train`` refuses it in one line before any data is read."""
    from gpstudy.cli import main
    from gpstudy.study import DEFAULT_CONFIG, check_settings, dataset_of, load_config, run_settings

    config = load_config(DEFAULT_CONFIG)
    settings = run_settings(config, "mnist", method="autogp_loo", M=5, iterations=iterations)
    if not refused:
        check_settings(settings, dataset_of(config, "mnist"))
        return
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit:
        main(["train", "--dataset", "mnist", "--method", "autogp_loo", "--M", "5", "--iterations", str(iterations)])
    line = capsys.readouterr().err
    assert exit.value.code == 2 and list(tmp_path.iterdir()) == [], line
    assert f"iterations = {iterations} ends within the first ELBO phase (variational_phase = 1000): " in line
    assert "the leave-one-out phase (loo_phase = 1000) never runs" in line
