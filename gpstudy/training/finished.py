"""A finished job's outputs, kept beside its checkpoint so that a rerun of the same job rewrites them
instead of training again.

Snakemake accepts a job's output only after the job has ended; stopped in between (Ctrl-C, ``kill``),
it marks the job's folder incomplete, and ``--rerun-incomplete`` deletes the folder and runs the job
again. The job's checkpoint is gone by then (it is removed when the job finishes), so without this
record the rerun would train from iteration 0.
"""

import json
import logging
from collections.abc import Iterable
from pathlib import Path

from gpstudy.io import read_json, write_json, write_text

log = logging.getLogger(__name__)

SUFFIX = ".finished.json"  # replaces the checkpoint's: splits0-1.checkpoint.pt -> splits0-1.checkpoint.finished.json


def finished_path(checkpoint: Path) -> Path:
    """Where the outputs of the job whose checkpoint is ``checkpoint`` are kept once it finished."""
    return checkpoint.with_suffix(SUFFIX)


def keep_outputs(record: Path, identity: str, folders: dict[int, Path], names: Iterable[str]) -> None:
    """Keep the text of the files ``names`` in each split's folder (those that exist) in ``record``,
    under ``identity`` (what the job is: its settings, data, start, code and labels)."""
    names = list(names)
    files = {
        str(s): {name: (folder / name).read_text() for name in names if (folder / name).is_file()}
        for s, folder in folders.items()
    }
    write_json(record, {"identity": identity, "files": files})


def restore_outputs(record: Path, identity: str, folders: dict[int, Path]) -> bool:
    """Rewrite each split's folder from ``record`` when it holds the outputs of this job (``identity``);
    whether it did. A record of another job (other settings, data, start or code) is left to be replaced.

    Raises:
        UnreadableFileError: the record is damaged (the message says to delete it).
    """
    if not record.is_file():
        return False
    kept = read_json(record, remake="delete it and rerun (the job then trains afresh)")
    if kept.get("identity") != identity or set(kept.get("files", {})) != {str(s) for s in folders}:
        log.info(
            "%s holds the outputs of another run of this job (other settings, data, start or code): training", record
        )
        return False
    for s, folder in folders.items():
        for name, text in kept["files"][str(s)].items():
            write_text(folder / name, text)
    log.info(
        "this job finished before (its outputs kept in %s): its outputs rewritten from there, nothing trained;"
        " delete that file to train afresh",
        record,
    )
    return True


def job_identity(fingerprint: str, labels: dict[int, dict]) -> str:
    """What a finished job's outputs belong to: the run's fingerprint and the labels its files carry."""
    return json.dumps(
        {"run": fingerprint, "labels": {str(s): label for s, label in labels.items()}}, sort_keys=True, default=str
    )
