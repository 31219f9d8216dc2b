"""The gpstudy command: one run outside Snakemake, on the same paths and defaults."""

import json
from pathlib import Path

import yaml

from gpstudy.cli import main

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
    manifest.write_text(json.dumps({"dataset": "airline", "protocol": "random",
                                    "sha256": {"2008.csv.bz2": "ab" * 32, "plane-data.csv": "cd" * 32}}))
    main(["datasets"])
    lines = capsys.readouterr().out.splitlines()
    line = next(line for line in lines if line.startswith("  2008.csv.bz2:"))
    assert "recorded at the first fetch in data/raw/airline/files_random.json" in line
    pin = line.split("pin it in the config: ")[1]
    assert yaml.safe_load(pin) == {"dataset_options": {"airline": {"sha256": {"2008.csv.bz2": "ab" * 32}}}}
    assert not any(line.startswith("  data.txt") for line in lines)  # a file files.tsv pins is not listed


def test_train_one_run(tmp_path, monkeypatch, shared_data, capsys):
    monkeypatch.chdir(tmp_path)
    main(["train", "--config", str(REPO / "config.yaml"), str(REPO / "configs/quick.yaml"), "--dataset", "snelson", "--method", "gpnet",
          "--M", "5", "--iterations", "30", "--mirror", str(shared_data)])
    run = tmp_path / "results/cli/snelson/gpnet/M5/split0"
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["status"] == "ok" and metrics["iterations"] == 30 and metrics["device"] == "cpu"
    assert (metrics["dataset"], metrics["method"], metrics["M"], metrics["split"]) == ("snelson", "gpnet", 5, 0)
    assert (run / "learning_curve.csv").exists() and (run / "predictions.csv").exists()
    assert (tmp_path / "data/splits/snelson/random/split0.npz").exists()
    assert "rmse" in capsys.readouterr().out


def test_train_several_splits_as_one_batch(tmp_path, monkeypatch, shared_data, capsys):
    monkeypatch.chdir(tmp_path)
    main(["train", "--config", str(REPO / "config.yaml"), str(REPO / "configs/quick.yaml"), "--dataset", "boston", "--method", "svgp",
          "--M", "10", "--iterations", "20", "--split", "0", "1", "--mirror", str(shared_data)])
    out = tmp_path / "results/cli/boston/svgp/M10/split0-1"
    metrics = [json.loads((out / f"split{s}/metrics.json").read_text()) for s in (0, 1)]
    assert [m["split"] for m in metrics] == [0, 1] and all(m["status"] == "ok" for m in metrics)
    assert all(m["batch_splits"] == [0, 1] for m in metrics) and metrics[0]["rmse"] != metrics[1]["rmse"]
    assert metrics[0]["seconds"] == metrics[1]["seconds"]  # the batch's training time
    assert not (out / "checkpoint.pt").exists() and capsys.readouterr().out.count("metrics.json") == 2
