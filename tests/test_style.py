"""The code's style is kept by a tool: ``ruff format`` leaves every file as it is, and ``ruff check`` (import
order, pyflakes, lines of at most 120 characters: pyproject.toml's [tool.ruff]) finds nothing."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def ruff(*arguments: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *arguments], cwd=cwd, capture_output=True, text=True)


@pytest.mark.parametrize("command", [["format", "--check", "--diff"], ["check", "--output-format", "concise"]])
def test_the_tree_is_as_ruff_leaves_it(command):
    result = ruff(*command, ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_finds_a_planted_disorder(tmp_path):
    """With the repository's settings, an unformatted line and imports out of order are found."""
    (tmp_path / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text())
    (tmp_path / "planted.py").write_text("import sys\nimport os\n\nx = [1,2]\nprint(os, sys, x)\n")
    assert ruff("format", "--check", ".", cwd=tmp_path).returncode == 1
    assert "I001" in ruff("check", "--output-format", "concise", ".", cwd=tmp_path).stdout
