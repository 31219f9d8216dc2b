"""gpstudy.study's names import their modules on first use, so the data stage's jobs start without torch."""

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import gpstudy.study as study

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
DATA_STAGE_SCRIPTS = ("fetch.py", "tabulate.py", "split.py")  # rules/data.smk's jobs, 157 in the paper's study


def imports_of(script: Path) -> str:
    """The import statements of a script, as source."""
    tree = ast.parse(script.read_text())
    return "\n".join(ast.unparse(node) for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom)))


@pytest.mark.parametrize("script", DATA_STAGE_SCRIPTS)
def test_a_data_stage_script_imports_no_torch(script):
    imports = imports_of(SCRIPTS / script)
    assert "gpstudy.study" in imports  # what it asks of the study is resolved too
    check = f"{imports}\nimport sys\nsys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", check]).returncode == 0, f"{script}'s imports load torch"


def test_every_name_resolves_to_its_modules_object():
    for name in study.__all__:
        assert getattr(study, name) is getattr(importlib.import_module(f"gpstudy.study.{study._MODULE_OF[name]}"), name)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        study.nothing
