"""A user's own data set, by config alone: fetched from a mirror, checked, read, split and trained."""

import contextlib
import hashlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml

from gpstudy.cli import REFUSED, main
from gpstudy.data import DataError, FetchError, get_dataset, load_split, read_table
from gpstudy.data.prepare import fetch_dataset

REPO = Path(__file__).resolve().parents[2]


def write_csv(folder: Path, rows: int = 80, seed: int = 0) -> str:
    """``mydata.csv`` in ``folder``: three features and a target ``y``; returns its sha256."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, size=(rows, 3))
    y = np.sin(x[:, 0]) + 0.5 * x[:, 1] + 0.1 * rng.normal(size=rows)
    lines = ["a,b,c,y", *(",".join(f"{value:.6f}" for value in (*row, target)) for row, target in zip(x, y))]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mydata.csv").write_text("\n".join(lines) + "\n")
    return hashlib.sha256((folder / "mydata.csv").read_bytes()).hexdigest()


def options(sha256: str, **changes) -> dict:
    return {
        "source": {"file": "mydata.csv", "sha256": sha256},
        "format": "csv",
        "target": "y",
        "task": "regression",
    } | changes


def test_a_user_data_set_trains_end_to_end_from_a_csv_in_the_mirror(tmp_path, monkeypatch, capsys):
    mirror = tmp_path / "mirror"
    sha256 = write_csv(mirror / "mydata")
    overlay = tmp_path / "mine.yaml"
    overlay.write_text(
        yaml.safe_dump(
            {
                "datasets": ["mydata"],
                "dataset_options": {"mydata": options(sha256)},
                "experiments": {"uci": {"datasets": ["mydata"], "methods": {"svgp": [5], "gpnet": [5]}}},
            }
        )
    )
    monkeypatch.chdir(tmp_path)
    for method in ("svgp", "gpnet"):
        main(
            [
                "train",
                "--configfile",
                str(overlay),
                "--dataset",
                "mydata",
                "--method",
                method,
                "--M",
                "5",
                "--iterations",
                "20",
                "--mirror",
                str(mirror),
            ]
        )
        metrics = json.loads((tmp_path / f"results/cli/mydata/{method}/M5/split0/metrics.json").read_text())
        assert metrics["status"] == "ok" and np.isfinite(metrics["rmse"]) and metrics["dataset"] == "mydata"
    split = np.load(tmp_path / "data/splits/mydata/random/split0.npz")
    assert split["x_train"].shape == (72, 3) and split["x_test"].shape == (
        8,
        3,
    )  # int(0.9 N) rows, the y column not a feature


def test_a_user_file_with_another_checksum_is_refused(tmp_path):
    mirror = tmp_path / "mirror"
    write_csv(mirror / "mydata")
    dataset = get_dataset("mydata", options("0" * 64))
    with pytest.raises(FetchError, match="sha256 mismatch"):
        fetch_dataset(dataset, "random", tmp_path / "raw", tmp_path / "raw/files.json", mirror=str(mirror))


def test_whitespace_format_with_a_negative_target_index(tmp_path):
    (tmp_path / "table.txt").write_text("1 2 3\n4 5 6\n7 8 9\n")
    dataset = get_dataset(
        "mine",
        {
            "source": {"file": "table.txt", "sha256": "0" * 64},
            "format": "whitespace",
            "target": -1,
            "task": "regression",
        },
    )
    table = read_table(dataset, "random", tmp_path)
    np.testing.assert_array_equal(table.y, [3, 6, 9])
    np.testing.assert_array_equal(table.x, [[1, 2], [4, 5], [7, 8]])


def test_classification_labels_become_class_indices_and_bad_targets_are_named(tmp_path):
    (tmp_path / "t.csv").write_text("f,label\n0.1,yes\n0.2,no\n0.3,yes\n")
    spec = {"source": {"file": "t.csv", "sha256": "0" * 64}, "format": "csv", "task": "classification"}
    table = read_table(get_dataset("mine", spec | {"target": "label"}), "random", tmp_path)
    np.testing.assert_array_equal(table.y, [1, 0, 1])
    with pytest.raises(DataError, match=r"t.csv: no target column 'labels'; the file has \['f', 'label'\]"):
        read_table(get_dataset("mine", spec | {"target": "labels"}), "random", tmp_path)
    with pytest.raises(DataError, match="target column 5 is out of range; the file has 2 columns"):
        read_table(get_dataset("mine", spec | {"target": 5}), "random", tmp_path)


def test_a_classification_target_of_one_class_is_refused_naming_file_column_and_class(tmp_path):
    """One class trained and reported an error rate of 0.0."""
    (tmp_path / "t.csv").write_text("f,label\n" + "".join(f"0.{i},yes\n" for i in range(20)))
    spec = {"source": {"file": "t.csv", "sha256": "0" * 64}, "format": "csv", "task": "classification"}
    with pytest.raises(
        DataError,
        match=r"t.csv: target column 'label' holds 1 class\(es\) \('yes'\); a classification "
        "task needs at least two",
    ):
        read_table(get_dataset("mine", spec | {"target": "label"}), "random", tmp_path)


def test_a_file_too_small_to_split_is_refused_before_training(tmp_path, monkeypatch, capsys):
    """A 3-row file trained on 2 rows and tested on 1: refused in one line, exit status REFUSED."""
    mirror = tmp_path / "mirror"
    overlay = tmp_path / "tiny.yaml"
    overlay.write_text(
        yaml.safe_dump(
            {"datasets": ["mydata"], "dataset_options": {"mydata": options(write_csv(mirror / "mydata", rows=3))}}
        )
    )
    monkeypatch.chdir(tmp_path)
    with refused(
        capsys,
        "dataset 'mydata', protocol 'random', split 0: 2 training and 1 test rows of "
        "the table's 3; a split needs at least 10 training and 2 test rows",
    ):
        main(
            [
                "train",
                "--configfile",
                str(overlay),
                "--dataset",
                "mydata",
                "--method",
                "svgp",
                "--M",
                "5",
                "--iterations",
                "5",
                "--mirror",
                str(mirror),
            ]
        )


def test_a_binary_classification_data_set_trains_with_the_bernoulli_likelihood(tmp_path, monkeypatch, capsys):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(-1.5, 1.0, size=(60, 2)), rng.normal(1.5, 1.0, size=(60, 2))])
    labels = np.repeat(["no", "yes"], 60)
    mirror = tmp_path / "mirror/blobs"
    mirror.mkdir(parents=True)
    (mirror / "blobs.csv").write_text(
        "x1,x2,label\n" + "".join(f"{a:.5f},{b:.5f},{c}\n" for (a, b), c in zip(x, labels))
    )
    sha256 = hashlib.sha256((mirror / "blobs.csv").read_bytes()).hexdigest()
    overlay = tmp_path / "blobs.yaml"
    overlay.write_text(
        yaml.safe_dump(
            {
                "datasets": ["blobs"],
                "dataset_options": {
                    "blobs": {
                        "source": {"file": "blobs.csv", "sha256": sha256},
                        "format": "csv",
                        "target": "label",
                        "task": "classification",
                        "likelihood": "bernoulli",
                        "methods": {"gpnet": {"objective": "elbo"}},
                    }
                },
                "methods": {"gpnet": {"hidden_units": 50}, "fbnn": {"hidden_units": 50}},  # a small network: fast
                "experiments": {"uci": {"datasets": ["blobs"], "methods": {"svgp": [10], "gpnet": [10], "fbnn": [10]}}},
            }
        )
    )
    monkeypatch.chdir(tmp_path)
    for method in ("svgp", "gpnet", "fbnn"):
        main(
            [
                "train",
                "--configfile",
                str(overlay),
                "--dataset",
                "blobs",
                "--method",
                method,
                "--M",
                "10",
                "--iterations",
                "200",
                "--mirror",
                str(tmp_path / "mirror"),
            ]
        )
        metrics = json.loads((tmp_path / f"results/cli/blobs/{method}/M10/split0/metrics.json").read_text())
        assert metrics["status"] == "ok" and "rmse" not in metrics, metrics
        assert metrics["error_rate"] <= 0.25 and -0.7 < metrics["test_ll"] < 0  # chance: 0.5 and log(1/2)
    conjugate = yaml.safe_load(overlay.read_text())
    del conjugate["dataset_options"]["blobs"]["methods"]
    overlay.write_text(yaml.safe_dump(conjugate))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit:
        main(
            [
                "train",
                "--configfile",
                str(overlay),
                "--dataset",
                "blobs",
                "--method",
                "gpnet",
                "--M",
                "10",
                "--iterations",
                "5",
                "--mirror",
                str(tmp_path / "mirror"),
            ]
        )
    assert exit.value.code == 2 and re.match(
        "gpstudy train: .*method 'gpnet' .*cannot train with likelihood 'bernoulli'; it supports gaussian",
        capsys.readouterr().err,
    )


@contextlib.contextmanager
def refused(capsys: pytest.CaptureFixture, pattern: str) -> Iterator[None]:
    """The command inside refuses its input: one line on stderr matching ``pattern``, exit status REFUSED."""
    with pytest.raises(SystemExit) as exit:
        yield
    err = capsys.readouterr().err
    assert exit.value.code == REFUSED and len(err.splitlines()) == 1 and re.search(pattern, err), err


def prepare_csv(tmp_path, monkeypatch, header: str, rows: np.ndarray, **changes) -> None:
    """``gpstudy prepare`` of ``rows`` written as ``mydata.csv`` (exact float reprs) with ``header``, as a user
    data set of ``options(..., **changes)``; every split of the config goes to data/splits/mydata/random."""
    mirror = tmp_path / "mirror/mydata"
    mirror.mkdir(parents=True, exist_ok=True)
    (mirror / "mydata.csv").write_text(
        header + "\n" + "".join(",".join(map(repr, map(float, row))) + "\n" for row in rows)
    )
    overlay = tmp_path / "mine.yaml"
    sha256 = hashlib.sha256((mirror / "mydata.csv").read_bytes()).hexdigest()
    overlay.write_text(
        yaml.safe_dump({"datasets": ["mydata"], "splits": 1, "dataset_options": {"mydata": options(sha256, **changes)}})
    )
    monkeypatch.chdir(tmp_path)
    main(["prepare", "--configfile", str(overlay), "--dataset", "mydata", "--mirror", str(tmp_path / "mirror")])


def test_a_feature_near_1e154_is_standardized_like_the_same_feature_rescaled(tmp_path, monkeypatch):
    """x_std was inf, the column all zeros and the run 'ok' (RMSE 0.994 against 0.684 for the data rescaled)."""
    rng = np.random.default_rng(0)
    rows = rng.uniform(-2, 2, size=(80, 3))
    for scale, folder in ((1.0, tmp_path / "plain"), (1e154, tmp_path / "huge")):
        prepare_csv(folder, monkeypatch, "a,b,y", rows * [scale, 1, 1])
    plain, huge = (
        load_split(folder / "data/splits/mydata/random/split0.npz")
        for folder in (tmp_path / "plain", tmp_path / "huge")
    )
    np.testing.assert_allclose(huge.x_train, plain.x_train, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(huge.x_std, plain.x_std * [1e154, 1], rtol=1e-12)


def test_a_feature_past_float64_once_standardized_is_refused_naming_the_file_and_column(tmp_path, monkeypatch, capsys):
    rng = np.random.default_rng(0)
    rows = rng.uniform(-2, 2, size=(80, 3))
    rows[:, 1] = np.where(np.arange(80) % 8 == 0, -1.7e308, 1.7e308)
    with refused(
        capsys,
        r"data/raw/mydata/mydata.csv: dataset 'mydata', protocol 'random', split 0, "
        r"standardized by its training rows: .* feature column 1",
    ):
        prepare_csv(tmp_path, monkeypatch, "a,b,y", rows)


SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def three_classes(mirror: Path, name: str = "three") -> str:
    """``three.csv`` in ``mirror/name``: two features and labels a, b, c (40 rows each); returns its sha256."""
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(3.0 * c, 1.0, size=(40, 2)) for c in range(3)])
    folder = mirror / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "three.csv").write_text(
        "x1,x2,label\n" + "".join(f"{a:.5f},{b:.5f},{c}\n" for (a, b), c in zip(x, np.repeat(["a", "b", "c"], 40)))
    )
    return hashlib.sha256((folder / "three.csv").read_bytes()).hexdigest()


def three_classes_config(mirror: Path, likelihoods: dict[str, dict]) -> dict:
    """A study of one SVGP per data set ``name`` of ``likelihoods`` (name -> its likelihood options): each
    ``three.csv`` written to ``mirror/name``."""
    return {
        "datasets": list(likelihoods),
        "splits": 1,
        "dataset_options": {
            name: {
                "source": {"file": "three.csv", "sha256": three_classes(mirror, name)},
                "format": "csv",
                "target": "label",
                "task": "classification",
                **likelihood,
            }
            for name, likelihood in likelihoods.items()
        },
        "experiments": {"three": {"datasets": list(likelihoods), "methods": {"svgp": [10]}}},
        "run_experiments": ["three"],
    }


MISDECLARED = {  # a data set of three labels -> its likelihood options, the classes they declare, the key
    "softmax2": ({"likelihood": "softmax", "likelihood_options": {"classes": 2}}, 2, "likelihood_options"),
    "robustmax4": ({"likelihood": "robustmax", "likelihood_options": {"classes": 4}}, 4, "likelihood_options"),
    "bernoulli": ({"likelihood": "bernoulli"}, 2, "likelihood"),
}


def test_labels_of_other_classes_than_the_likelihood_declares_are_refused_before_training(tmp_path):
    """softmax or robustmax with classes: 2 on three labels, or bernoulli on three, trained 'ok' to meaningless
    error rates (0.42) and a test log-likelihood better than the right model's (-0.36 against -0.60).
    Each case a data set of its own, all in one Snakemake run."""
    overlay = tmp_path / "three.yaml"
    overlay.write_text(
        yaml.safe_dump(
            three_classes_config(
                tmp_path / "mirror", {name: likelihood for name, (likelihood, _, _) in MISDECLARED.items()}
            )
        )
    )
    run = subprocess.run(
        [
            SNAKEMAKE,
            "-s",
            str(REPO / "Snakefile"),
            "--directory",
            str(tmp_path),
            "--configfile",
            str(REPO / "config.yaml"),
            str(overlay),
            "--cores",
            "2",
            "--keep-going",
            "--config",
            f"mirror={tmp_path}/mirror",
            "--",
            *(f"data/splits/{name}/random/split0.npz" for name in MISDECLARED),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode != 0 and not (tmp_path / "data/splits").exists(), run.stdout + run.stderr
    for name, (_, declared, key) in MISDECLARED.items():
        log = (tmp_path / f"logs/tabulate/{name}_random.log").read_text()
        assert (
            f"data/raw/{name}/three.csv: target column 'label' holds 3 classes ('a', 'b', 'c'), but "
            f"dataset_options.{name}.{key} declares {declared}"
        ) in log, log


def test_a_label_outside_the_classes_fails_the_run_on_the_device(tmp_path, monkeypatch):
    """`gpstudy train` tabulates without the study's rule: the likelihood's NaN fails the run."""
    overlay = tmp_path / "three.yaml"
    overlay.write_text(
        yaml.safe_dump(
            three_classes_config(
                tmp_path / "mirror", {"three": {"likelihood": "softmax", "likelihood_options": {"classes": 2}}}
            )
        )
    )
    monkeypatch.chdir(tmp_path)
    main(
        [
            "train",
            "--configfile",
            str(overlay),
            "--dataset",
            "three",
            "--method",
            "svgp",
            "--M",
            "10",
            "--iterations",
            "2",
            "--mirror",
            str(tmp_path / "mirror"),
        ]
    )
    metrics = json.loads((tmp_path / "results/cli/three/svgp/M10/split0/metrics.json").read_text())
    assert metrics["status"].startswith("failed: non-finite") and np.isnan(metrics["test_ll"]), metrics


def test_a_user_data_set_named_like_a_built_in_one_is_refused_before_any_job(tmp_path):
    """A user CSV called boston trained as Boston, the tables printing the paper's Boston values beside it."""
    sha256 = write_csv(tmp_path / "mirror/boston")
    overlay = tmp_path / "boston.yaml"
    overlay.write_text(
        yaml.safe_dump(
            {
                "datasets": ["boston"],
                "dataset_options": {
                    "boston": {
                        "source": {"file": "mydata.csv", "sha256": sha256},
                        "format": "csv",
                        "target": "y",
                        "task": "regression",
                    }
                },
            }
        )
    )
    run = subprocess.run(
        [
            SNAKEMAKE,
            "-s",
            str(REPO / "Snakefile"),
            "--directory",
            str(tmp_path),
            "--configfile",
            str(REPO / "config.yaml"),
            str(overlay),
            "-n",
            "--config",
            f"mirror={tmp_path}/mirror",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert (
        run.returncode != 0
        and "config key $.dataset_options.boston.source: 'boston' is a built-in data set" in run.stdout + run.stderr
    ), run.stdout + run.stderr


def test_a_spreadsheet_given_as_csv_is_refused_with_the_formats_read(tmp_path, monkeypatch, capsys):
    """Issue 49: an .xlsx (a zip archive) given as format csv ended in a codec error, with no hint that only
    csv or whitespace-separated text is read."""
    import zipfile

    mirror = tmp_path / "mirror/mydata"
    mirror.mkdir(parents=True)
    with zipfile.ZipFile(mirror / "mydata.xlsx", "w") as book:
        book.writestr("[Content_Types].xml", "<Types/>")
        book.writestr("xl/worksheets/sheet1.xml", "<worksheet>" + "<row/>" * 100 + "</worksheet>")
    sha256 = hashlib.sha256((mirror / "mydata.xlsx").read_bytes()).hexdigest()
    overlay = tmp_path / "mine.yaml"
    mine = options(sha256) | {"source": {"file": "mydata.xlsx", "sha256": sha256}}
    overlay.write_text(yaml.safe_dump({"datasets": ["mydata"], "splits": 1, "dataset_options": {"mydata": mine}}))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit:
        main(["prepare", "--configfile", str(overlay), "--dataset", "mydata", "--mirror", str(tmp_path / "mirror")])
    line = capsys.readouterr().err
    assert exit.value.code == 2 and len(line.splitlines()) == 1, line
    assert "mydata.xlsx: cannot be read as a table: " in line
    assert (
        "the file is not text: format 'csv' reads text only, 'csv' or 'whitespace' (save a spreadsheet as csv)" in line
    )
