"""environment.yml (conda) and pyproject.toml list the same dependencies."""

import re
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CONDA_NAMES = {"pytorch": "torch"}  # conda-forge name -> PyPI name
NOT_IN_PYPROJECT = {"python", "pip"}


def requirement(text: str) -> tuple[str, str]:
    name, spec = re.match(r"^([A-Za-z0-9_.-]+)\s*(.*)$", text.strip()).groups()
    return CONDA_NAMES.get(name.lower(), name.lower()), spec.replace(" ", "")


def test_environment_and_pyproject_agree():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pip_side = dict(map(requirement, project["dependencies"] + project["optional-dependencies"]["test"]))
    conda = yaml.safe_load((REPO / "environment.yml").read_text())["dependencies"]
    conda_side = dict(requirement(d) for d in conda if isinstance(d, str))
    conda_side = {k: v for k, v in conda_side.items() if k not in NOT_IN_PYPROJECT}
    assert conda_side == pip_side
