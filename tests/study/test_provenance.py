"""`gpstudy settings`: every resolved setting of a run with the file and key path it came from (issue #28, item 2)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from snakemake.cli import parse_config

from gpstudy.cli import main
from gpstudy.study import DEFAULT_CONFIG, RunSettings, load_config, run_settings, training_keys
from gpstudy.study.files import Sources, key_lines, merge

REPO = Path(__file__).resolve().parents[2]
OVERLAY = {  # one key won at each layer, lowest precedence first
    "training": {"lr": 0.1, "batch_size": 7, "eval_every": 3},
    "methods": {"gpnet": {"lr": 0.2, "xi": 0.5}},
    "dataset_options": {"boston": {"xi": 0.6, "batch_size": 9, "methods": {"gpnet": {"xi": 0.7, "beta0": 0.3}}}},
    "variants": {"fastnet": {"method": "gpnet", "beta0": 0.4, "iterations": 11}},
    "iterations": 13,
}
LATER = {"methods": {"gpnet": {"lr": 0.25}}}  # a later --configfile wins at the same key
EXPECTED = {  # key -> (value as printed, source)
    "eval_every": ("3", "overlay.yaml: training.eval_every"),
    "lr": ("0.25", "later.yaml: methods.gpnet.lr"),
    "batch_size": ("9", "overlay.yaml: dataset_options.boston.batch_size"),
    "xi": ("0.7", "overlay.yaml: dataset_options.boston.methods.gpnet.xi"),
    "beta0": ("0.4", "overlay.yaml: variants.fastnet.beta0"),
    "iterations": ("13", "overlay.yaml: iterations"),
    "measurement": ("noisy", "config.yaml: dataset_options.boston.measurement"),
    "hidden_units": ("1000", "config.yaml: methods.gpnet.hidden_units"),
    "method": ("gpnet", "overlay.yaml: variants.fastnet.method"),
    "M": ("5", "the command line"),
    "seed": ("0", "config.yaml: seed"),
    "kernel_options": ("{}", "config.yaml: training.kernel_options"),
    "box": ("null", "config.yaml: methods.gpnet.box"),
}


def printed_settings(capsys, arguments: list[str], dataset: str, method: str, M: int) -> dict[str, tuple[str, str]]:
    """``gpstudy settings``' lines after its header (given ``arguments``), key -> (value, source)."""
    main(["settings", "--dataset", dataset, "--method", method, "--M", str(M), *arguments])
    lines = capsys.readouterr().out.splitlines()[1:]
    matches = [re.fullmatch(r"(\w+) = (.*?)\s{3,}(.*)", line) for line in lines]
    return {match[1]: (match[2], match[3]) for match in matches}


def shown_values(settings: RunSettings) -> dict[str, str]:
    """Every value of ``settings`` as `gpstudy settings` prints it."""
    values = {
        "method": settings.method,
        "M": settings.M,
        "seed": settings.seed,
        **settings.options,
        **{key: getattr(settings, key) for key in training_keys()},
    }
    return {key: value if isinstance(value, str) else json.dumps(value) for key, value in values.items()}


def test_each_layer_wins_where_it_should_and_is_named(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the files as the command line names them; no config.yaml here: the packaged one
    (tmp_path / "overlay.yaml").write_text(yaml.safe_dump(OVERLAY))
    (tmp_path / "later.yaml").write_text(yaml.safe_dump(LATER))
    files = [DEFAULT_CONFIG, Path("overlay.yaml"), Path("later.yaml")]
    printed = printed_settings(capsys, ["--configfile", "overlay.yaml", "later.yaml"], "boston", "fastnet", 5)
    shown = {key: (value, re.sub(r"^([^:]+):\d+: ", r"\1: ", source)) for key, (value, source) in printed.items()}
    assert {key: shown[key] for key in EXPECTED} == EXPECTED
    line = int(re.match(r"config\.yaml:(\d+): ", printed["measurement"][1])[1])  # the line of the key, in the file
    assert DEFAULT_CONFIG.read_text().splitlines()[line - 1].strip().startswith("measurement: noisy")
    device, source = shown["device"]  # "auto", resolved in this process
    assert device in ("cpu", "cuda") and source == "config.yaml: training.device (auto, resolved here)"
    settings = run_settings(load_config(*files), "boston", method="fastnet", M=5)  # what the jobs train with
    assert {key: value for key, (value, _) in shown.items()} == shown_values(settings)


def test_the_origin_of_a_mapping_names_every_file_that_changed_it():
    config, sources = {}, Sources()
    merge(config, {"training": {"kernel_options": {"a": 1}, "lr": 1.0}}, sources.set_by, "one.yaml")
    merge(config, {"training": {"kernel_options": {"b": 2}}}, sources.set_by, "two.yaml")
    assert sources.of(("training", "kernel_options")) == "one.yaml + two.yaml"
    assert sources.of(("training", "kernel_options", "b")) == "two.yaml"
    assert sources.of(("training", "lr")) == "one.yaml"
    merge(config, {"training": {"kernel_options": None}}, sources.set_by, "three.yaml")  # replaced whole: one source
    assert sources.of(("training", "kernel_options")) == "three.yaml"
    assert config == {"training": {"kernel_options": None, "lr": 1.0}}


def test_a_key_merged_from_an_anchor_is_on_the_anchors_line():
    text = """methods:
  gpnet:
    <<: &shared
      hidden_units: 1000
      network: rfe
    xi: 1.0
  fbnn:
    <<: *shared
    network: ntk
"""
    lines = key_lines(text)
    assert lines[("methods", "fbnn", "hidden_units")] == 4  # written under gpnet, reached through the anchor
    assert lines[("methods", "fbnn", "network")] == 9  # its own key wins over the merged one
    assert lines[("methods", "gpnet", "xi")] == 6 and lines[("methods", "fbnn")] == 7
    assert ("methods", "fbnn", "<<") not in lines and ("methods", "gpnet", "<<") not in lines


def test_the_docs_excerpt_is_what_the_command_prints(capsys, monkeypatch):
    page = (REPO / "docs/configuration.md").read_text()
    block = r"```bash\n\.venv/bin/gpstudy (settings [^\n]*)\n```\n\n```text\n(.*?)```"  # the command, then its excerpt
    command, excerpt = re.search(block, page, re.S).groups()
    monkeypatch.chdir(REPO)
    main(command.split())
    printed = capsys.readouterr().out.splitlines()
    assert len(excerpt.splitlines()) > 3 and set(excerpt.splitlines()) <= set(printed)


def test_the_overrides_of_a_snakemake_command_line_show_what_its_jobs_train_with(capsys, monkeypatch):
    """Issue 35, item 10: a study started with ``--configfile configs/quick.yaml --config iterations=50
    'datasets=[boston]'`` trains 50 iterations; `gpstudy settings` takes the same words and says so."""
    monkeypatch.chdir(REPO)
    entries = ["iterations=50", "datasets=[boston]", "device=cpu"]
    printed = printed_settings(
        capsys, ["--configfile", "configs/quick.yaml", "--config", *entries], "boston", "gpnet", 100
    )
    assert printed["iterations"] == ("50", "--config: iterations")
    assert printed["hidden_units"][1].startswith("configs/quick.yaml:")
    jobs = run_settings(
        load_config("config.yaml", "configs/quick.yaml", overrides=parse_config(entries)),
        "boston",
        method="gpnet",
        M=100,
    )  # the config Snakemake's jobs resolve theirs from
    assert jobs.iterations == 50 and {key: value for key, (value, _) in printed.items()} == shown_values(jobs)


@pytest.mark.parametrize(
    "words, named",
    [
        (["--configfile", "nowhere.yaml"], "nowhere.yaml"),
        (["--config", "iterations=50", "nowhere.yaml"], "nowhere.yaml"),  # Snakemake's own refusal of a non-entry
    ],
)
def test_a_missing_config_file_or_a_bad_entry_is_one_line_naming_it(tmp_path, words, named):
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "from gpstudy.cli import main; main()",
            "settings",
            "--dataset",
            "boston",
            "--method",
            "svgp",
            "--M",
            "5",
            *words,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert run.returncode == 2 and run.stdout == ""
    assert len(run.stderr.splitlines()) == 1 and named in run.stderr, run.stderr
