"""The README and docs/ tell the truth a newcomer can check (issue #25): every page is reachable from the
README, every relative link resolves, every `--configfile` named exists, every config key written as
`key: value` is a key of the schema, and the snakemake commands of the code blocks dry-run as typed.

The dry runs run in a folder that mirrors the repository's top level by symlinks, so the relative
paths of a command (`configs/quick.yaml`, `profiles/slurm`) mean what they mean in a clone; one
Snakemake process per command (a dry run of the full config takes several seconds)."""

import hashlib
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from gpstudy.study import load_schema

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
PAGES = sorted((REPO / "docs").glob("*.md"))
TEXTS = [REPO / "README.md", *PAGES]
SKIPPED = {  # a command's distinctive words -> why it is not dry-run here
    "--workflow-profile profiles/slurm": (
        "needs a SLURM cluster (tests/cluster/check_slurm_profile.py checks it on one)"
    ),
    "--report": "reports on a finished run (tests/test_workflow.py renders the quick study's report)",
    "--lint": "tests/test_workflow.py::test_lint_is_clean runs it",
}
NOT_CONFIG = {  # `key: value` names of the docs that are not config keys
    "retries": "a Snakemake profile setting (profiles/slurm)",
    "gpu": "a Snakemake resource of profiles/default",
    "reproduced": "gpstudy compare's verdict line (docs/reproducibility.md)",
}
PLACEHOLDERS = {"/path/to/mirror": "mirror", "DIR": "mirror"}  # a reader's own folder, here an empty one


def code_blocks(text: str) -> list[str]:
    """The fenced (```) and indented (4 spaces after a blank line) code blocks of a Markdown text."""
    fenced = re.findall(r"^[ \t]*```[^\n]*\n(.*?)^[ \t]*```", text, re.M | re.S)
    outside = re.sub(r"^[ \t]*```.*?^[ \t]*```", "", text, flags=re.M | re.S)
    indented = re.findall(r"(?:^|\n)\n((?: {4}[^\n]*\n?)+)", outside)
    return fenced + indented


def snakemake_commands(text: str, inline: bool = False) -> list[str]:
    """Every snakemake command line of a text's code blocks (also one after `&&` in a chain), and with
    ``inline`` those in backticks too."""
    commands = re.findall(r"`((?:\.venv/bin/)?snakemake [^`]*)`", text) if inline else []
    for block in code_blocks(text):
        for line in block.splitlines():
            for part in line.strip().split(" && "):
                if re.match(r"(\.venv/bin/)?snakemake\b", part.strip()):
                    commands.append(part.strip())
    return commands


def all_commands() -> list[tuple[str, str]]:
    """(page, command) for every snakemake command line of the README's and the docs' code blocks, and
    of the README's backticks (its tour's next steps)."""
    return [
        (path.relative_to(REPO).as_posix(), command)
        for path in TEXTS
        for command in snakemake_commands(path.read_text(), inline=path.name == "README.md")
    ]


def skip_reason(command: str) -> str | None:
    return next((reason for words, reason in SKIPPED.items() if words in command), None)


def links(text: str) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", text)


def test_every_docs_page_is_linked_from_the_readme():
    assert PAGES, "no docs/ pages"
    linked = {(REPO / link.split("#")[0]).resolve() for link in links((REPO / "README.md").read_text())}
    assert [page.name for page in PAGES if page.resolve() not in linked] == []


def test_every_relative_link_resolves():
    broken = [
        (path.name, link)
        for path in TEXTS
        for link in links(path.read_text())
        if not re.match(r"[a-z]+:", link)
        and not link.startswith("#")
        and not (path.parent / link.split("#")[0]).exists()
    ]
    assert broken == []


def test_every_configfile_named_exists():
    named = [(page, word) for page, command in all_commands() for word in re.findall(r"--configfile (\S+)", command)]
    named += [(path.name, word) for path in TEXTS for word in re.findall(r"--configfile (\S+?)[`\s]", path.read_text())]
    assert named
    missing = [(page, word) for page, word in named if word != "mydata.yaml" and not (REPO / word).is_file()]
    assert missing == []  # mydata.yaml is the reader's own (docs/own-dataset.md), written by the dry run below


def schema_keys(node) -> set[str]:
    """Every property name anywhere in a JSON schema."""
    if isinstance(node, list):
        return set().union(*map(schema_keys, node))
    if not isinstance(node, dict):
        return set()
    keys = set(node.get("properties", {})) if isinstance(node.get("properties"), dict) else set()
    return keys.union(*map(schema_keys, node.values()))


def test_every_config_key_written_as_key_value_is_in_the_schema():
    """`key: value` (or `a.b.key: value`) in backticks: its last name is a property of the schema, the
    method fragments included. Only the name is checked, not where it may go nor its value."""
    known = schema_keys(load_schema())
    written = {
        (path.name, match)
        for path in TEXTS
        for match in re.findall(r"`([a-z_][a-z0-9_]*(?:\.[a-z0-9_<>]+)*): [^`]+`", path.read_text())
    }
    assert len(written) > 10
    names = {(page, [name for name in key.split(".") if not name.startswith("<")][-1]) for page, key in written}
    unknown = [(page, name) for page, name in names if name not in known and name not in NOT_CONFIG]
    assert unknown == []


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A folder that looks like a clone of the repository (its top level symlinked), with the reader's
    own files the docs name: `mydata.yaml` (docs/own-dataset.md's YAML, its file's real sha256) and a
    mirror folder holding `mydata/mydata.csv`."""
    root = tmp_path_factory.mktemp("clone")
    for entry in REPO.iterdir():
        if entry.name not in {".snakemake", "data", "results", "logs", ".git"}:
            (root / entry.name).symlink_to(entry)
    csv = root / "mirror" / "mydata" / "mydata.csv"
    csv.parent.mkdir(parents=True)
    csv.write_text("x1,x2,y\n" + "".join(f"{i},{i % 7},{i * 0.5}\n" for i in range(40)))
    page = (REPO / "docs" / "own-dataset.md").read_text()
    yaml = re.search(r"```yaml\n(.*?)```", page, re.S)[1]
    (root / "mydata.yaml").write_text(yaml.replace("<hex>", hashlib.sha256(csv.read_bytes()).hexdigest()))
    return root


def test_the_commands_skipped_are_named():
    skipped = {command for _, command in all_commands() if skip_reason(command)}
    assert any("profiles/slurm" in command for command in skipped)  # the cluster's, in docs/clusters.md


@pytest.mark.parametrize("page, command", [pytest.param(*pc, id=f"{pc[0]}: {pc[1][:60]}") for pc in all_commands()])
def test_the_snakemake_commands_of_the_docs_dry_run_as_typed(clone, page, command):
    if reason := skip_reason(command):
        pytest.skip(reason)
    words = [PLACEHOLDERS.get(word, word) for word in shlex.split(command)]
    words = [re.sub(r"^mirror=(.*)$", lambda m: f"mirror={PLACEHOLDERS.get(m[1], m[1])}", w) for w in words]
    run = subprocess.run([SNAKEMAKE, "-n", *words[1:]], cwd=clone, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"{page}: {command}\n{run.stdout[-3000:]}{run.stderr[-3000:]}"
