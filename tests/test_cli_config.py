"""Issue 47, item 1: the gpstudy command reads ``--config`` as Snakemake does, and starts where Snakemake is not
installed (a GPU node without network)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpstudy.study import ConfigError, parse_config_entries

REPO = Path(__file__).resolve().parents[1]
VALUES = [  # one --config entry each: every kind of value the study's command lines give, and the odd ones
    "iterations=50",
    "iterations=-2",
    "iterations=+3",
    "iterations=1_000",
    "iterations= 7",
    "lr=0.003",
    "lr=1e-3",
    "lr=.5",
    "lr=inf",
    "lr=nan",
    "flag=True",
    "flag=False",
    "flag=true",
    "flag=yes",
    "value=null",
    "value=~",
    "datasets=[boston]",
    "datasets=[boston, concrete]",
    "datasets=[]",
    "datasets=- boston",
    "splits=[0, 1]",
    "device=cuda",
    "device=cuda:0",
    "mirror=/srv/mirror/data",
    "mirror=file:///srv/mirror/data",
    "methods={exact: {device: cuda}}",
    "dataset_options={boston: {iterations: 10, methods: {gpnet: {pretrain: true}}}}",
    "variants={gpnet_online: {method: gpnet, online_hyperparameters: true}}",
    "value=a: b",
    "value=[unclosed",
    "value={}",
    "value='50'",
    'value="quoted string"',
    "value='[boston]'",
    "value=a=b",
    "value=",
    "with-dash_key=1",
    "_private=1",
    "ké=1",
]
SEQUENCES = [  # several entries: later ones win, mappings merge key by key
    ["iterations=2", "iterations=3"],
    ["methods={exact: {device: cuda}}", "methods={svgp: {lr: 0.1}}"],
    ["methods={exact: {device: cuda, dtype: float32}}", "methods={exact: {device: cpu}}"],
    ["methods=5", "methods={exact: {device: cuda}}"],
    ["methods={exact: {device: cuda}}", "methods=5"],
    ["methods={exact: {device: cuda}}", "methods={}"],
    ["datasets=[boston]", "iterations=50", "device=cpu", "mirror="],
]
REFUSED = [  # Snakemake refuses these (ValueError) or fails on them (an AssertionError); here a ConfigError
    "configs/quick.yaml",
    "=5",
    "a=5",
    "1x=5",
    "x-=5",
    "methods.exact.device=cuda",
    "value=#comment",
    "value=   ",
]


def typed(value: object) -> str:
    """``value`` as ``repr`` writes it: 1, 1.0 and True differ, and so does a key's order."""
    return repr(value)


@pytest.mark.parametrize("entries", [[entry] for entry in VALUES] + SEQUENCES, ids=str)
def test_entries_read_as_snakemakes_parser_reads_them(entries):
    parse_config = pytest.importorskip("snakemake.cli").parse_config
    assert typed(parse_config_entries(entries)) == typed(parse_config(entries))


@pytest.mark.parametrize("entry", REFUSED)
def test_entries_snakemake_refuses_are_one_config_error_naming_them(entry):
    parse_config = pytest.importorskip("snakemake.cli").parse_config
    with pytest.raises((ValueError, AssertionError)):
        parse_config([entry])
    with pytest.raises(ConfigError, match=f"^--config: {entry!r}: "):
        parse_config_entries([entry])


def test_the_study_values_read_without_snakemake():
    """The values themselves (this runs without Snakemake too): what a GPU node's command line gives."""
    entries = ["iterations=50", "lr=1e-3", "flag=False", "datasets=[boston]", "methods={exact: {device: cuda}}"]
    assert typed(parse_config_entries(entries)) == typed(
        {"iterations": 50, "lr": 0.001, "flag": False, "datasets": ["boston"], "methods": {"exact": {"device": "cuda"}}}
    )


WITHOUT_SNAKEMAKE = """
import sys
try:
    import snakemake
except ImportError:
    pass
else:
    sys.exit("snakemake is importable")
from gpstudy.cli import main
main(sys.argv[1:])
"""


def gpstudy_without_snakemake(tmp_path: Path, *words: str) -> subprocess.CompletedProcess:
    """``gpstudy *words`` in ``tmp_path`` where ``import snakemake`` fails, as where it is not installed."""
    blocked = tmp_path / "blocked" / "snakemake"
    blocked.mkdir(parents=True, exist_ok=True)
    (blocked / "__init__.py").write_text("raise ImportError('snakemake is not installed here')\n")
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_SNAKEMAKE, *words],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "blocked"), str(REPO)])},
    )


def test_train_starts_and_trains_without_snakemake(tmp_path, shared_data):
    """``gpstudy train --help`` and a two-step run with ``--config`` entries, where Snakemake cannot be imported."""
    helped = gpstudy_without_snakemake(tmp_path, "train", "--help")
    assert helped.returncode == 0 and "--config KEY=VALUE" in helped.stdout, helped.stderr
    run = gpstudy_without_snakemake(
        tmp_path,
        "train",
        "--configfile",
        str(REPO / "configs/quick.yaml"),
        "--dataset",
        "snelson",
        "--method",
        "svgp",
        "--M",
        "5",
        "--config",
        "iterations=2",
        f"mirror={shared_data}",
        "device=cpu",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    metrics = json.loads((tmp_path / "results/cli/snelson/svgp/M5/split0/metrics.json").read_text())
    assert metrics["status"] == "ok" and metrics["iterations"] == 2
    assert (tmp_path / "results/cli/snelson/svgp/M5/split0/pretrained.json").is_file()  # Snelson pretrains
