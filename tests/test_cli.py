"""The gpstudy command: one run outside Snakemake, on the same paths and defaults."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import gpstudy
from gpstudy.cli import main
from gpstudy.study import DEFAULT_CONFIG

REPO = Path(__file__).resolve().parents[1]


def test_datasets_lists_the_registry(capsys):
    main(["datasets"])
    out = capsys.readouterr().out
    assert "boston" in out and "cifar10" in out and "classification" in out


def test_datasets_prints_the_sha256_recorded_for_files_without_a_trusted_one(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    main(["datasets"])
    assert "  2008.csv.bz2: no trusted sha256, none recorded yet" in capsys.readouterr().out
    manifest = tmp_path / "data/raw/airline/files_random.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(
        json.dumps(
            {
                "dataset": "airline",
                "protocol": "random",
                "sha256": {"2008.csv.bz2": "ab" * 32, "plane-data.csv": "cd" * 32},
            }
        )
    )
    main(["datasets"])
    lines = capsys.readouterr().out.splitlines()
    line = next(line for line in lines if line.startswith("  2008.csv.bz2:"))
    assert "recorded at the first fetch in data/raw/airline/files_random.json" in line
    pin = line.split("pin it in the config: ")[1]
    assert yaml.safe_load(pin) == {"dataset_options": {"airline": {"sha256": {"2008.csv.bz2": "ab" * 32}}}}
    assert not any(line.startswith("  data.txt") for line in lines)  # a file files.tsv pins is not listed


def test_train_one_run(tmp_path, monkeypatch, shared_data, capsys):
    monkeypatch.chdir(tmp_path)
    main(
        [
            "train",
            "--configfile",
            str(REPO / "configs/quick.yaml"),
            "--dataset",
            "snelson",
            "--method",
            "gpnet",
            "--M",
            "5",
            "--iterations",
            "30",
            "--mirror",
            str(shared_data),
        ]
    )
    run = tmp_path / "results/cli/snelson/gpnet/M5/split0"
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["status"] == "ok" and metrics["iterations"] == 30 and metrics["device"] == "cpu"
    assert (metrics["dataset"], metrics["method"], metrics["M"], metrics["split"]) == ("snelson", "gpnet", 5, 0)
    assert (run / "learning_curve.csv").exists() and (run / "predictions.csv").exists()
    assert (tmp_path / "data/splits/snelson/random/split0.npz").exists()
    assert "rmse" in capsys.readouterr().out


def test_train_several_splits_as_one_batch(tmp_path, monkeypatch, shared_data, capsys):
    monkeypatch.chdir(tmp_path)
    main(
        [
            "train",
            "--configfile",
            str(REPO / "configs/quick.yaml"),
            "--dataset",
            "boston",
            "--method",
            "svgp",
            "--M",
            "10",
            "--iterations",
            "20",
            "--split",
            "0",
            "1",
            "--mirror",
            str(shared_data),
        ]
    )
    out = tmp_path / "results/cli/boston/svgp/M10/split0-1"
    metrics = [json.loads((out / f"split{s}/metrics.json").read_text()) for s in (0, 1)]
    assert [m["split"] for m in metrics] == [0, 1] and all(m["status"] == "ok" for m in metrics)
    assert all(m["batch_splits"] == [0, 1] for m in metrics) and metrics[0]["rmse"] != metrics[1]["rmse"]
    assert metrics[0]["seconds"] == metrics[1]["seconds"]  # the batch's training time
    assert not (out / "checkpoint.pt").exists() and capsys.readouterr().out.count("metrics.json") == 2


COMMANDS = {"settings": ["--method", "svgp", "--M", "5"], "prepare": [], "train": ["--method", "svgp", "--M", "5"]}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    "words, message",
    [
        (
            ["--configfile", "nowhere.yaml"],
            "config file nowhere.yaml: no such file in .*; --configfile takes YAML files",
        ),
        (["--configfile", "list.yaml"], "config file list.yaml: a list, not a mapping of keys to values"),
        (["--configfile", "broken.yaml"], "config file broken.yaml: not YAML: while parsing a flow sequence"),
        (["--config", "configs/quick.yaml"], "--config: .* name=value pairs.*; a config file goes after --configfile"),
        (["--config", "iterations=many"], r"invalid configuration: config key \$\.iterations: 'many' is not of type"),
    ],
)
def test_a_missing_or_bad_config_is_one_line_naming_it(tmp_path, monkeypatch, command, words, message):
    """Issue 36: every command that reads the config ends a bad one with one line (no traceback) naming it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "list.yaml").write_text("- iterations: 5\n")
    (tmp_path / "broken.yaml").write_text("datasets: [boston\n")
    with pytest.raises(SystemExit) as exit:
        main([command, "--dataset", "boston", *COMMANDS[command], *words])
    assert re.fullmatch(f"gpstudy {command}: {message}.*", exit.value.code) and "\n" not in exit.value.code


def test_the_commands_take_their_defaults_from_the_package_in_any_directory(tmp_path, monkeypatch, capsys):
    """Issue 36: no config.yaml in the working directory; the packaged one is read and named config.yaml."""
    monkeypatch.chdir(tmp_path)
    main(["settings", "--dataset", "boston", "--method", "svgp", "--M", "100", "--config", "iterations=7"])
    printed = capsys.readouterr().out
    line = re.search(r"^lr = 0\.003 +config\.yaml:(\d+): training\.lr$", printed, re.M)[1]
    assert DEFAULT_CONFIG.read_text().splitlines()[int(line) - 1].strip().startswith("lr: 0.003")
    assert re.search(r"^iterations = 7 +--config: iterations$", printed, re.M)


def test_version_is_the_package_version(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0 and capsys.readouterr().out == f"gpstudy {gpstudy.__version__}\n"


@pytest.mark.parametrize("words", [["--help"], ["--version"], ["train", "--help"], ["compare", "--help"]])
def test_help_and_version_do_not_import_torch(words):
    """Issue 36: ``gpstudy --help`` starts in a fraction of a second: torch (about 4 s) is imported by the
    commands that use it, not by the command line's module."""
    code = (
        "import sys\nfrom gpstudy.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print('imported:', sorted(name for name in ('torch', 'pandas', 'snakemake') if name in sys.modules))"
    )
    run = subprocess.run(
        [sys.executable, "-c", code, *words],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=True,
    )
    assert run.stdout.splitlines()[-1] == "imported: []", run.stdout
