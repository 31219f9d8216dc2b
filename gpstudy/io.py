"""Atomic file output: every file gpstudy writes appears whole or not at all."""

import contextlib
import errno
import functools
import glob
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas

PACKAGE = Path(__file__).parent  # the gpstudy package this process imported
SOURCE_SUFFIXES = (".py", ".yaml", ".tsv")  # the package files whose content is the code of a run
REMAKE = "delete it and rerun to make it again"  # what to do with a damaged file of the pipeline's own
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)  # errors of a full disk or a full quota
PARTIAL = ".part"  # what the temporary file of an atomic write carries before its suffix

UMASK = os.umask(0o022)  # the process's umask, read (and restored) once at import
os.umask(UMASK)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it onto ``path`` only if the block succeeds.

    A block that fails leaves ``path`` as it was and no temporary file.

    Args:
        path: the final destination; its parent folder is created.
        suffix: extension the temporary file carries (some writers, e.g. ``numpy.savez``, need it).

    Raises:
        OSError: errno ENOSPC, "No space left on device" naming ``path``, when the block failed on a full
            disk or quota (:func:`no_space`: the write's own error names at most the temporary file,
            and writers such as ``torch.save`` bury it under their own).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=PARTIAL + suffix)
    os.close(handle)
    tmp = Path(tmp_name)
    os.chmod(tmp, 0o666 & ~UMASK)  # mkstemp makes 0600; give the final file the usual permissions
    try:
        yield tmp
        os.replace(tmp, path)
    except Exception as error:
        if no_space(error):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path)) from error
        raise
    finally:
        tmp.unlink(missing_ok=True)


def partial_writes(path: str | Path) -> list[Path]:
    """The temporary files of :func:`atomic_path` writes to ``path`` that a kill cut short, beside it
    (``.{name}.{random}.part{suffix}``); only their owner may remove them, before it writes again."""
    path = Path(path)
    return sorted(path.parent.glob(f"{glob.escape('.' + path.name)}.*{PARTIAL}*"))


def no_space(error: BaseException) -> bool:
    """Whether ``error``, or an error it was raised from or during, is a full disk or quota (``NO_SPACE``)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, OSError) and error.errno in NO_SPACE:
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` in UTF-8, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | os.PathLike, data: Any) -> None:
    """Write ``data`` as indented JSON, atomically."""
    write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


class UnreadableFileError(ValueError):
    """A file the pipeline made cannot be parsed (truncated, edited): the message names it."""


def read_json(path: str | os.PathLike, remake: str = REMAKE) -> Any:
    """The data of a JSON file.

    Args:
        remake: what makes the file again, for the error (``REMAKE`` suits a file that is a rule's output).

    Raises:
        UnreadableFileError: the file is not valid JSON (the message names it and ``remake``).
    """
    try:
        return json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UnreadableFileError(f"{path}: not valid JSON ({error}); {remake}") from error


def write_csv(path: str | os.PathLike, frame: "pandas.DataFrame") -> None:
    """Write a data frame as CSV without its index, atomically."""
    with atomic_path(path, suffix=".csv") as tmp:
        frame.to_csv(tmp, index=False)


@functools.cache
def source_digest(package: Path = PACKAGE) -> str:
    """The sha256 of a gpstudy package's source (every ``SOURCE_SUFFIXES`` file, by path; default: the one
    this process imported), read once per process: the code version a checkpoint records, and what tells
    two copies of the code apart (``gpstudy.runtime.job.check_same_code``)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in package.rglob("*") if p.suffix in SOURCE_SUFFIXES):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()
