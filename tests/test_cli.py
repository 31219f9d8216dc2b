"""The gpstudy command: one run outside Snakemake, on the same paths and defaults."""

import json
from pathlib import Path

from gpstudy.cli import main

REPO = Path(__file__).resolve().parents[1]


def test_datasets_lists_the_registry(capsys):
    main(["datasets"])
    out = capsys.readouterr().out
    assert "boston" in out and "cifar10" in out and "classification" in out


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
