"""Issue 47, item 1: the gpstudy command reads ``--config`` without Snakemake, and starts where Snakemake is not
installed (a GPU node without network). Issue 48, item 1: it reads Hydra's overrides (dotted keys, YAML values),
and the workflow reads Snakemake's entries the same way (rules/common.smk)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpstudy.study import ConfigError, merge, parse_config_entries

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
    ".lr=0.1",
    "training..lr=0.1",
    "training.=0.1",
    "1x.lr=0.1",
    "value=#comment",
    "value=   ",
]


def typed(value: object) -> str:
    """``value`` as ``repr`` writes it: 1, 1.0 and True differ, and so does a key's order."""
    return repr(value)


READINGS = [  # entries -> what the gpstudy commands and the workflow read: a value as a config file's YAML
    (["training.lr=0.1"], {"training": {"lr": 0.1}}),
    (["experiments.uci.methods.svgp=[50,100]"], {"experiments": {"uci": {"methods": {"svgp": [50, 100]}}}}),
    (["seed=3"], {"seed": 3}),
    (["training.lr=1e-3"], {"training": {"lr": 0.001}}),  # a number, though YAML 1.1 reads 1e-3 as a string
    (["training={lr: 0.1, pretrain: true}"], {"training": {"lr": 0.1, "pretrain": True}}),
    (["mirror=null"], {"mirror": None}),
    (["mirror="], {"mirror": None}),
    (["device=cuda:0"], {"device": "cuda:0"}),
    (
        ["dataset_options.boston.methods.gpnet.measurement=box"],
        {"dataset_options": {"boston": {"methods": {"gpnet": {"measurement": "box"}}}}},
    ),
    (
        ["dataset_options.3droad.lr=0.5"],
        {"dataset_options": {"3droad": {"lr": 0.5}}},
    ),  # only the first key an identifier
    (["value='50'"], {"value": 50}),  # quotes around the value dropped, as Snakemake drops them
    (["value=[unclosed"], {"value": "[unclosed"}),  # not YAML: the string
    (["training.lr=0.1", "training.batch_size=20"], {"training": {"lr": 0.1, "batch_size": 20}}),
    (["training.lr=0.1", "training={lr: 0.2}"], {"training": {"lr": 0.2}}),
    (["training={lr: 0.2}", "training.lr=0.1"], {"training": {"lr": 0.1}}),
]


@pytest.mark.parametrize("entries, read", READINGS, ids=[" ".join(entries) for entries, _ in READINGS])
def test_dotted_keys_and_yaml_values_read_as_hydras_overrides(entries, read):
    assert typed(parse_config_entries(entries)) == typed(read)


@pytest.mark.parametrize("entries", [[entry] for entry in VALUES] + SEQUENCES, ids=str)
def test_the_workflow_reads_snakemakes_entries_as_the_commands_read_them(entries):
    """The Snakefile merges ``parse_config_entries`` of its ``--config`` entries over what Snakemake's parser
    read (nested scalars as strings): nothing of Snakemake's reading is left."""
    parse_config = pytest.importorskip("snakemake.cli").parse_config
    config = parse_config(entries)
    merge(config, parse_config_entries(entries))
    assert typed(config) == typed(parse_config_entries(entries))


def test_snakemakes_parser_refuses_a_dotted_key_and_reads_nested_numbers_as_strings():
    """What docs/configuration.md's Sweeps section says of this Snakemake: the workflow never sees a dotted key."""
    parse_config = pytest.importorskip("snakemake.cli").parse_config
    with pytest.raises(ValueError, match="Config entry must start with a valid identifier"):
        parse_config(["training.lr=0.1"])
    assert parse_config(["training={lr: 0.1}"]) == {"training": {"lr": "0.1"}}


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
