"""Atomic file output: every file gpstudy writes appears whole or not at all."""

import contextlib
import functools
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SOURCE_SUFFIXES = (".py", ".yaml", ".tsv")  # the package files whose content is the code of a run
REMAKE = "delete it and rerun to make it again"  # what to do with a damaged file of the pipeline's own

UMASK = os.umask(0o022)  # the process's umask, read (and restored) once at import
os.umask(UMASK)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it onto ``path`` only if the block succeeds.

    Args:
        path: the final destination; its parent folder is created.
        suffix: extension the temporary file carries (some writers, e.g. ``numpy.savez``, need it).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part" + suffix)
    os.close(handle)
    tmp = Path(tmp_name)
    os.chmod(tmp, 0o666 & ~UMASK)  # mkstemp makes 0600; give the final file the usual permissions
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_json(path: str | os.PathLike, data: Any) -> None:
    """Write ``data`` as indented JSON, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


class UnreadableFileError(ValueError):
    """A file the pipeline made cannot be parsed (truncated, edited): the message names it."""


def read_json(path: str | os.PathLike) -> Any:
    """The data of a JSON file.

    Raises:
        UnreadableFileError: the file is not valid JSON (the message names it and how to remake it).
    """
    try:
        return json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UnreadableFileError(f"{path}: not valid JSON ({error}); {REMAKE}") from error



def write_csv(path: str | os.PathLike, frame: "pandas.DataFrame") -> None:
    """Write a data frame as CSV without its index, atomically."""
    with atomic_path(path, suffix=".csv") as tmp:
        frame.to_csv(tmp, index=False)


@functools.cache
def source_digest() -> str:
    """The sha256 of the gpstudy package's source (every ``SOURCE_SUFFIXES`` file, by path): the code
    version a checkpoint records."""
    root = Path(__file__).parent
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.suffix in SOURCE_SUFFIXES):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()
