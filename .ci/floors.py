"""Print pyproject.toml's dependency floors as exact pins, one a line (``name==floor``): the runtime
dependencies and the extras named as arguments (e.g. ``test slurm``). A requirement without a ``>=``
floor is an error: .ci/floors.sh installs exactly these to prove the floors (docs/installation.md)."""

import re
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def floor_pins(extras: list[str]) -> list[str]:
    """``name==version`` for each requirement of the runtime dependencies and ``extras``."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    requirements = project["dependencies"] + [r for extra in extras for r in project["optional-dependencies"][extra]]
    pins = []
    for requirement in requirements:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9A-Za-z.]*)", requirement.strip())
        if match is None:
            sys.exit(f"{PYPROJECT}: requirement {requirement!r} has no '>=' floor to pin")
        pins.append(f"{match[1]}=={match[2]}")
    return pins


if __name__ == "__main__":
    print("\n".join(floor_pins(sys.argv[1:])))
