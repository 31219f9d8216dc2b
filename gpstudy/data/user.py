"""A user's own data set, defined by the config alone: one table file, its format, target and task."""

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np
import pandas as pd

from gpstudy import paths
from gpstudy.data.dataset import DataError, Table, checked_table, excerpt, excerpts, read_frame
from gpstudy.data.fetch import FileSpec, Source

READERS = {  # format -> pandas options
    "csv": {"header": 0},  # comma-separated, a header row naming the columns
    "whitespace": {"header": None, "sep": r"\s+"},  # numbers separated by blanks, no header
}


def file_spec(options: dict[str, Any]) -> FileSpec:
    """The one file of a user data set from its ``source``: ``url`` (optional when the file is in the
    mirror), ``file`` (default: the URL's last part) and ``sha256`` (required).

    Raises:
        ValueError: neither a URL nor a file name, or a URL whose last part is no file name (``/..``)."""
    source = options["source"]
    if "file" not in source and "url" not in source:
        raise ValueError("a user data set's source needs a `url` or a `file` name (looked up in the mirror)")
    name = source.get("file") or Path(unquote(urlparse(source["url"]).path)).name
    if "file" not in source and not paths.FILE_NAME.allows(name):  # a file's own name: the config's schema
        raise ValueError(
            f"url {source['url']!r} ends in {name!r}, no file name ({paths.FILE_NAME.words}); name it in `file`"
        )
    return FileSpec(path=name, sha256=source["sha256"], sources=(Source(source["url"]),) if "url" in source else ())


def read_user_table(raw: Path, *, path: str, format: str, target: int | str, task: str) -> Table:
    """Read a user's table: the ``target`` column (an index, negative from the end, or a csv header
    name) is y, every other column a feature. Classification labels, numbers or strings, become
    0..C-1 in sorted order."""
    source = raw / path
    try:
        frame = read_frame(pd.read_csv, source, **READERS[format])
    except DataError as error:
        if isinstance(error.__cause__, UnicodeDecodeError):  # e.g. a spreadsheet (.xlsx: a zip archive)
            raise DataError(
                f"{error}; the file is not text: format {format!r} reads text only, "
                f"{' or '.join(map(repr, READERS))} (save a spreadsheet as csv)"
            ) from error
        raise
    if format == "csv":  # pandas renames a repeated header name (y, y.1): a copy of the target would be a feature
        header = list(read_frame(pd.read_csv, source, header=None, nrows=1).iloc[0])
        for index, name in enumerate(header):
            if name in header[:index]:
                raise DataError(
                    f"{source}: the header names column {excerpt(name)} twice (columns {header.index(name)} and "
                    f"{index}, 0-based); name each column once"
                )
    columns = list(frame.columns)
    if isinstance(target, int):
        if not -len(columns) <= target < len(columns):
            raise DataError(f"{source}: target column {target} is out of range; the file has {len(columns)} columns")
        target = columns[target]
    elif target not in columns:
        raise DataError(f"{source}: no target column {excerpt(target)}; the file has {excerpts(columns)}")
    classes = None
    if task == "classification":
        classes, labels = np.unique(frame[target].astype(str), return_inverse=True)
        if len(classes) < 2:
            raise DataError(
                f"{source}: target column {excerpt(target)} holds {len(classes)} class(es) "
                f"({', '.join(map(excerpt, classes))}); a classification task needs at least two"
            )
        frame = frame.assign(**{str(target): labels})
        frame.columns = columns
        classes = tuple(map(str, classes))
    return replace(checked_table(frame, target, source), target=str(target), classes=classes)


def user_reader(options: dict[str, Any], path: str) -> partial:
    """The reader of a user data set whose file is ``path`` in its raw folder (raw folder -> table)."""
    return partial(read_user_table, path=path, format=options["format"], target=options["target"], task=options["task"])
