"""`snakemake --report` as the README gives it: the project's own dependencies carry what Snakemake's
report needs (not only the test extra's), and the command reports on the study the README ran.
(tests/test_workflow.py renders the report of the quick study.)"""

import re
import shlex
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]


def installed_closure(requirements: list[str]) -> set[str]:
    """The distributions that installing ``requirements`` brings, by the installed packages' metadata
    (extras followed where asked for)."""
    found, pending = set(), [(Requirement(text), "") for text in requirements]
    while pending:
        requirement, extra = pending.pop()
        name = canonicalize_name(requirement.name)
        if requirement.marker and not requirement.marker.evaluate({"extra": extra}):
            continue
        if (name, *sorted(requirement.extras)) in found:
            continue
        found.add((name, *sorted(requirement.extras)))
        for text in metadata.requires(name) or []:
            pending.extend((Requirement(text), wanted) for wanted in ("", *requirement.extras))
    return {name for name, *_ in found}


def readme_commands() -> list[list[str]]:
    """Every snakemake command line of the README, split into words: the two commands' (code blocks) first,
    then those in backticks."""
    text = (REPO / "README.md").read_text()
    lines = [part for line in re.findall(r"^\s*(python3 -m venv .*)$", text, re.M) for part in line.split(" && ")]
    lines += re.findall(r"`((?:\.venv/bin/)?snakemake [^`]*)`", text)
    return [shlex.split(line) for line in lines if "snakemake " in line]


def configfiles(words: list[str]) -> list[str]:
    return [words[i + 1] for i, word in enumerate(words[:-1]) if word == "--configfile"]


def test_the_report_needs_no_package_beyond_the_projects_dependencies():
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    report = [
        text
        for text in metadata.requires("snakemake")
        if Requirement(text).marker
        and Requirement(text).marker.evaluate({"extra": "reports"})
        and not Requirement(text).marker.evaluate({"extra": ""})
    ]  # snakemake's extra for --report
    assert report, "snakemake declares no 'reports' extra: check what its --report needs"
    missing = {canonicalize_name(Requirement(text).name) for text in report} - installed_closure(dependencies)
    assert not missing, f"snakemake --report needs {missing}, which `pip install -e .` does not install"


def test_the_readmes_report_command_names_the_config_of_the_run_it_reports_on():
    commands = readme_commands()
    study = next(words for words in commands if "--cores" in words and "--configfile" in words)  # command 1
    report = next(words for words in commands if "--report" in words)
    assert configfiles(report) == configfiles(study) == ["configs/quick.yaml"]
