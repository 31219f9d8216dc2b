"""The gpstudy command: one run outside Snakemake, on the same paths and defaults."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import gpstudy
from gpstudy.cli import REFUSED, SETTINGS, command_line, main
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


@pytest.mark.parametrize("threads", [None, 2])
def test_train_runs_with_its_threads_and_records_them(tmp_path, monkeypatch, shared_data, caplog, request, threads):
    """``gpstudy train`` trains with ``--threads`` torch CPU threads (a pipeline job's DEFAULT_THREADS when not
    given), says so, records them in metrics.json, and leaves the caller's count as it was."""
    import torch

    from gpstudy.runtime.environment import DEFAULT_THREADS

    before = torch.get_num_threads()
    request.addfinalizer(lambda: torch.set_num_threads(before))
    torch.set_num_threads(3)
    monkeypatch.chdir(tmp_path)
    flag = [] if threads is None else ["--threads", str(threads)]
    caplog.set_level("INFO", logger="gpstudy.cli")
    main(
        ["train", "--dataset", "boston", "--method", "svgp", "--M", "5", "--iterations", "3"]
        + ["--mirror", str(shared_data), "--config", "device=cpu", *flag]
    )
    expected = DEFAULT_THREADS if threads is None else threads
    metrics = json.loads((tmp_path / "results/cli/boston/svgp/M5/split0/metrics.json").read_text())
    assert (metrics["status"], metrics["threads"], torch.get_num_threads()) == ("ok", expected, 3)
    assert f"torch CPU threads: {expected} (--threads)" in caplog.messages


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


def test_a_sweep_of_two_learning_rates_from_the_command_line_gives_two_runs_recording_them(
    tmp_path, monkeypatch, shared_data, capsys
):
    """Issue 48, item 1: a Hydra-style override per run (``--config training.lr=...``), one run folder each."""
    monkeypatch.chdir(tmp_path)
    rates = {"0.1": 0.1, "0.003": 0.003}
    for text in rates:
        main(
            [
                *["train", "--configfile", str(REPO / "configs/quick.yaml"), "--dataset", "snelson"],
                *["--method", "svgp", "--M", "5", "--iterations", "20", "--mirror", str(shared_data)],
                *[
                    "--out",
                    f"sweep/lr{text}",
                    "--config",
                    f"training.lr={text}",
                    "dataset_options.snelson.pretrain=false",
                ],
            ]
        )
    runs = {text: tmp_path / f"sweep/lr{text}" for text in rates}
    settings = {text: json.loads((run / SETTINGS).read_text()) for text, run in runs.items()}
    assert {text: recorded["lr"] for text, recorded in settings.items()} == rates
    assert all(recorded["pretrain"] is False and recorded["iterations"] == 20 for recorded in settings.values())
    metrics = [json.loads((run / "metrics.json").read_text()) for run in runs.values()]
    assert all(m["status"] == "ok" for m in metrics) and metrics[0]["rmse"] != metrics[1]["rmse"]
    assert capsys.readouterr().out.count("metrics.json") == 2


@pytest.mark.parametrize("entry", ["training.lr=0.1", "training={lr: 0.1}"])
def test_settings_names_a_command_line_override_as_the_layer_that_set_it(tmp_path, monkeypatch, capsys, entry):
    """Issue 48, item 1: the dotted override and Snakemake's nested form are one setting, a number, from --config."""
    monkeypatch.chdir(tmp_path)
    main(["settings", "--dataset", "boston", "--method", "svgp", "--M", "50", "--config", entry, "seed=3"])
    printed = capsys.readouterr().out
    assert re.search(r"^lr = 0\.1 +--config: training\.lr$", printed, re.M), printed
    assert re.search(r"^seed = 3 +--config: seed$", printed, re.M), printed


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
def test_a_missing_or_bad_config_is_one_line_naming_it(tmp_path, monkeypatch, capsys, command, words, message):
    """Issue 36: every command that reads the config ends a bad one with one line (no traceback) naming it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "list.yaml").write_text("- iterations: 5\n")
    (tmp_path / "broken.yaml").write_text("datasets: [boston\n")
    assert re.fullmatch(
        f"gpstudy {command}: {message}.*", refused(capsys, [command, "--dataset", "boston", *COMMANDS[command], *words])
    )


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


def refused(capsys: pytest.CaptureFixture, words: list[str]) -> str:
    """The one line on stderr with which ``gpstudy *words`` refuses its input, exit status REFUSED (2)."""
    with pytest.raises(SystemExit) as exit:
        main(words)
    captured = capsys.readouterr()
    assert exit.value.code == REFUSED, captured
    assert len(captured.err.splitlines()) == 1 and "Traceback" not in captured.err + captured.out, captured
    return captured.err.strip()


RUN = ["--dataset", "boston", "--method", "svgp", "--M", "5"]  # a good run's arguments
BAD = {  # command -> (its words with one bad value, what its line must name), every argument of every command
    "": [(["frob"], "invalid choice: 'frob'"), (["--verbose", "datasets"], "unrecognized arguments: --verbose")],
    "datasets": [(["datasets", "boston"], "unrecognized arguments: boston")],
    "prepare": [
        (["prepare"], "the following arguments are required: --dataset"),
        (["prepare", "--dataset", "bostn"], "unknown data set 'bostn'; did you mean 'boston'?"),
        (["prepare", "--dataset", "boston", "--splits", "99"], "split 99: boston has splits 0 to 19"),
        (["prepare", "--dataset", "boston", "--splits", "0", "99"], "split 99"),  # none prepared before it
        (["prepare", "--dataset", "boston", "--splits", "-1"], "--splits: -1 is less than 0"),
        (["prepare", "--dataset", "boston", "--splits", "one"], "--splits: 'one' is not an integer"),
        (["prepare", "--dataset", "boston", "--configfile", "nowhere.yaml"], "config file nowhere.yaml: no such"),
        (["prepare", "--dataset", "boston", "--config", "splits=0"], "$.splits: 0 is less than the minimum"),
        (["prepare", "--dataset", "boston", "--mirror", "/nowhere"], "mirror '/nowhere'"),
        # issue 48: a mirror that holds none of the data set's files is the wrong folder
        (["prepare", "--dataset", "boston", "--mirror", str(REPO)], "holds none of the files to fetch (no "),
        # issue 49: another host's file:// URL was read as this machine's /tmp
        (["prepare", "--dataset", "boston", "--mirror", "file://otherhost/tmp"], "not files of host 'otherhost'"),
    ],
    "train": [
        (["train", "--dataset", "boston", "--method", "svgp"], "required: --M"),
        (["train", *RUN[2:], "--dataset", "bostn"], "unknown data set 'bostn'; did you mean 'boston'?"),
        (["train", *RUN, "--method", "svpg"], "unknown method 'svpg'; did you mean 'svgp'"),
        (["train", *RUN, "--M", "0"], "--M: 0 is less than 1"),
        (["train", *RUN, "--M", "5.5"], "--M: '5.5' is not an integer"),
        (["train", *RUN, "--split", "99"], "split 99: boston has splits 0 to 19"),
        (["train", *RUN, "--split", "-1"], "--split: -1 is less than 0"),
        (["train", *RUN, "--iterations", "0"], "--iterations: 0 is less than 1"),
        (["train", *RUN, "--device", "cuda:x"], "$.device: 'cuda:x' does not match"),
        (["train", *RUN, "--threads", "0"], "--threads: 0 is less than 1"),
        (["train", *RUN, "--configfile", "nowhere.yaml"], "config file nowhere.yaml: no such"),
        (["train", *RUN, "--config", "training.lr=nan"], "training.lr"),
        (["train", *RUN, "--mirror", "/nowhere"], "mirror '/nowhere'"),
        (["train", *RUN, "--out"], "--out: expected one argument"),
        # issue 49: under a file, or a file itself (a traceback after the data were prepared)
        (["train", *RUN, "--out", f"{os.devnull}/run"], f"--out {os.devnull}/run: {os.devnull} is a file, not a"),
        (["train", *RUN, "--out", os.devnull], f"--out {os.devnull}: {os.devnull} is a file, not a folder"),
    ],
    "settings": [
        (["settings", "--dataset", "bostn", *RUN[2:]], "unknown data set 'bostn'; did you mean 'boston'?"),
        (["settings", *RUN, "--method", "gpnte"], "unknown method 'gpnte'; did you mean 'gpnet'"),
        (["settings", *RUN, "--M", "-1"], "--M: -1 is less than 1"),
        (["settings", *RUN, "--configfile", "nowhere.yaml"], "config file nowhere.yaml: no such"),
        (["settings", *RUN, "--config", "seed=-1"], "$.seed: -1 is less than the minimum"),
        # issue 48: a dotted path into a key that does not exist, refused as a config file's unknown key
        (
            ["settings", *RUN, "--config", "training.lrr=0.1"],
            "$.training: Additional properties are not allowed ('lrr'",
        ),
        (["settings", *RUN, "--config", "trainin.lr=0.1"], "$: Additional properties are not allowed ('trainin'"),
        (["settings", *RUN, "--config", "training.lr=-0.1"], "$.training.lr: -0.1 is less than or equal to"),
        (["settings", *RUN, "--config", "mirror=/nowhere"], "$.mirror: mirror '/nowhere': /nowhere is not a directory"),
    ],
    "compare": [
        (["compare", "nowhere", "."], "nowhere: no such folder"),
        (["compare", ".", "nowhere"], ".: no runs.csv in it"),
        (["compare", ".", ".", "--se", "-1"], "se=-1.0"),
        (["compare", ".", ".", "--relative", "much"], "--relative: invalid float value: 'much'"),
        (["compare", ".", ".", "--partial", "yes"], "unrecognized arguments: yes"),
    ],
}


def test_every_command_is_driven_with_bad_input():
    assert set(BAD) - {""} == set(command_line()._subparsers._group_actions[0].choices)


CASES = [case for cases in BAD.values() for case in cases]


def test_every_out_option_is_driven_with_a_folder_under_a_file():
    """Issue 49: each command that takes --out has a case above whose --out lies under a file."""
    commands = command_line()._subparsers._group_actions[0].choices
    taking = {name for name, parser in commands.items() if "--out" in parser._option_string_actions}
    driven = {words[0] for words, _ in CASES if f"{os.devnull}/run" in words}
    assert taking == driven == {"train"}


def test_an_out_folder_on_a_read_only_file_system_is_one_line(tmp_path):
    """Issue 49: --out in a read-only folder (a read-only tmpfs in a mount namespace of its own, so that even
    root cannot write there; skipped where no such namespace can be made): one line naming it, exit status 2."""
    folder = tmp_path / "readonly"
    folder.mkdir()
    probe = shutil.which("unshare") and subprocess.run(["unshare", "-rm", "true"], capture_output=True)  # util-linux
    if not probe or probe.returncode != 0:
        pytest.skip(f"no user and mount namespace here: {probe and probe.stderr.decode().strip()}")
    gpstudy = Path(sys.executable).with_name("gpstudy")
    script = f"mount -t tmpfs -o ro tmpfs {folder} && cd {tmp_path} && exec {gpstudy} train {' '.join(RUN)} --out"
    run = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"{script} {folder}/run"], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == REFUSED and run.stdout == "", run
    assert run.stderr == (
        f"gpstudy train: --out {folder}/run: cannot write in {folder} (its permissions or a read-only file system)\n"
    )
    assert list(tmp_path.iterdir()) == [folder] and list(folder.iterdir()) == []


@pytest.mark.parametrize("words, named", CASES, ids=[" ".join(words) for words, _ in CASES])
def test_bad_input_is_one_line_naming_it_with_exit_status_2(tmp_path, monkeypatch, capsys, words, named):
    """Issue 49: every command refuses a bad value of each of its arguments with one line on stderr naming it,
    exit status 2, no traceback, before any file is written."""
    monkeypatch.chdir(tmp_path)
    assert named in refused(capsys, words)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("reader", ["head -1", "true"])  # true closes the pipe before the first line
@pytest.mark.parametrize("command", ["datasets", "settings --dataset boston --method svgp --M 5"])
def test_output_cut_short_by_its_reader_ends_quietly(command, reader):
    """Issue 48: ``gpstudy datasets | head -1`` ends with no BrokenPipeError; ``python -m gpstudy`` runs it."""
    run = subprocess.run(
        f"{sys.executable} -m gpstudy {command} | {reader}",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert len(run.stdout.splitlines()) == (reader == "head -1") and run.stderr == "", run.stderr
