"""Every dotted ``gpstudy.x.y`` name in the docs, the README and the code's docstrings and comments names a real
module or object: a module moved or a function renamed leaves no stale name behind."""

import importlib
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NAME = re.compile(r"(?<![\w./-])gpstudy(?:\.[A-Za-z_]\w*)+")  # gpstudy.x.y, not a path or a file's suffix
SCANNED = (
    "README.md",
    "docs/",
    "gpstudy/",
    "scripts/",
    "benchmarks/",
    "rules/",
    "Snakefile",
    "config.yaml",
    "configs/",
)  # the tests make up names of their own


def resolves(name: str) -> bool:
    """Whether ``name`` is an importable module, or an attribute path from the longest importable prefix."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def stale_names(text: str, where: str) -> list[str]:
    """``where:line name`` for each dotted gpstudy name in ``text`` that does not resolve."""
    return [
        f"{where}:{number} {name}"
        for number, line in enumerate(text.splitlines(), 1)
        for name in NAME.findall(line)
        if not resolves(name)
    ]


def scanned_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", *SCANNED],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [REPO / name for name in listed if name.endswith((".md", ".py", ".smk", ".yaml")) or name == "Snakefile"]


def test_a_stale_name_is_found_and_a_live_one_is_not():
    text = (
        "the factor (``gpstudy.blocked.cholesky_ex``), see gpstudy.linalg.blocked.cholesky_ex\n"
        "and gpstudy.runtime.host_sync.deliberate; a path gpstudy/blocked.py is no name\n"
        "gpstudy.linalg.no_such_function"
    )
    assert stale_names(text, "page.md") == [
        "page.md:1 gpstudy.blocked.cholesky_ex",
        "page.md:3 gpstudy.linalg.no_such_function",
    ]


def test_the_scan_reads_the_docs_and_the_package():
    files = {path.relative_to(REPO).as_posix() for path in scanned_files()}
    assert {"README.md", "docs/gpus.md", "gpstudy/linalg/factor.py", "rules/common.smk"} <= files


def test_every_dotted_name_in_the_docs_and_docstrings_resolves():
    stale = [
        entry for path in scanned_files() for entry in stale_names(path.read_text(), path.relative_to(REPO).as_posix())
    ]
    assert stale == []
