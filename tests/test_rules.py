"""The rules wire files together, their params filled in by named helpers (rules/common.smk), and the scripts
build from those params, not from the config."""

import ast
import io
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RULE_FILES = [REPO / "Snakefile", *sorted((REPO / "rules").glob("*.smk"))]
SCRIPTS = sorted((REPO / "scripts").glob("*.py"))
# the data stage's, for the data set (dataset_of) and the mirror: where its files are found reruns nothing
CONFIG_READERS = {"fetch.py", "tabulate.py", "split.py"}


def lambdas(source: str) -> list[int]:
    """The lines of a Snakefile's lambdas (comments and strings aside)."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [token.start[0] for token in tokens if token.type == tokenize.NAME and token.string == "lambda"]


def config_reads(source: str) -> list[int]:
    """The lines where a script reads ``snakemake.config``."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and node.attr == "config"
        and isinstance(node.value, ast.Name)
        and node.value.id == "snakemake"
    ]


def test_the_checks_find_a_planted_lambda_and_config_read():
    assert lambdas('rule a:\n    params:\n        x=lambda wildcards: 1,  # lambda\n    shell: "lambda"\n') == [3]
    assert config_reads('import x\nsnakemake.params.config\nm = snakemake.config["mirror"]\n') == [3]


def test_no_rule_has_a_lambda():
    found = {path.name: lines for path in RULE_FILES if (lines := lambdas(path.read_text()))}
    assert not found, f"name a helper in rules/common.smk instead: {found}"


def test_scripts_build_from_their_params():
    found = {path.name for path in SCRIPTS if config_reads(path.read_text())}
    assert found <= CONFIG_READERS, f"give the script what it needs in its rule's params: {found - CONFIG_READERS}"
