"""The data stage, one function per Snakemake step: fetch a data set, read its table, write a split."""

import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from gpstudy.data.dataset import DataError, Table, excerpt, load_table, save_table
from gpstudy.data.fetch import ChecksumError, FileSpec, fetch_file, sha256_of
from gpstudy.data.registry import Dataset
from gpstudy.data.split import Split, make_split, read_table, save_split, split_rows
from gpstudy.io import read_json, write_json

log = logging.getLogger(__name__)
MAX_FILES_NAMED = 4  # the raw files an error names (index_files has 41: the table and 40 index files)


def fetch_dataset(dataset: Dataset, protocol: str, raw: Path, manifest: Path, mirror: str | None = None) -> None:
    """Fetch every file a data set needs under ``protocol`` into ``raw``; list them in ``manifest``."""
    files = {}
    for spec in dataset.files(protocol):
        path = fetch_file(dataset.name, spec, raw, mirror)
        files[spec.path] = sha256_of(path)
    write_json(manifest, {"dataset": dataset.name, "protocol": protocol, "sha256": files})


def checked_raw_folder(manifest: Path, specs: tuple[FileSpec, ...] = ()) -> Path:
    """The folder of a data set's fetched files, each checked against the sha256 ``manifest`` recorded
    when it was fetched (a file edited or damaged since never reaches a table), and each recorded sha256
    against the one ``specs`` pin, if any (a file fetched before a config pinned it).

    Raises:
        ChecksumError: a file differs from its manifest entry or its pin (the message says how to fetch it again).
        DataError: a file the manifest lists is missing.
    """
    recorded = read_json(manifest)["sha256"]
    for name, expected in recorded.items():
        path = manifest.parent / name
        refetch = f"delete {path} and {manifest} and rerun to fetch it again"
        if not path.is_file():
            raise DataError(f"{path}: listed in {manifest} but missing; {refetch}")
        observed = sha256_of(path)
        if observed != expected:
            raise ChecksumError(
                f"{path}: sha256 {observed} is not the {expected} recorded in {manifest} when it "
                f"was fetched (changed since); {refetch}"
            )
    for spec in specs:
        if spec.sha256 is not None and recorded.get(spec.path, spec.sha256) != spec.sha256:
            path = manifest.parent / spec.path
            raise ChecksumError(
                f"{path}: sha256 {recorded[spec.path]} recorded in {manifest} is not the pinned "
                f"{spec.sha256}; delete {path} and {manifest} and rerun to fetch it again"
            )
    return manifest.parent


def prepare_table(
    dataset: Dataset, protocol: str, manifest: Path, output: Path, classes: Sequence[tuple[int, str]] = ()
) -> None:
    """Read a data set's raw files (those ``manifest`` lists, checked) once into a compact table, its labels
    checked against the ``classes`` the study's likelihoods declare (:func:`check_classes`)."""
    table = read_table(dataset, protocol, checked_raw_folder(manifest, dataset.files(protocol)))
    log.info("%s: table of %d rows x %d features", dataset.name, *table.x.shape)
    if table.classes is not None:
        log.info(
            "%s: labels %s are classes 0..%d",
            dataset.name,
            ", ".join(map(excerpt, table.classes)),
            len(table.classes) - 1,
        )
    check_classes(table, classes, _files(dataset, protocol, manifest))
    save_table(output, table)


def check_classes(table: Table, classes: Sequence[tuple[int, str]], source: str) -> None:
    """Refuse a classification table unless its labels are the classes 0..C-1 of each C in ``classes``:
    (C, the config key that declares it), the number of classes the likelihood of a run on it takes
    (``Likelihood.label_classes``).

    Raises:
        DataError: naming ``source`` (the raw files), the target column, the classes found and the key
            that declares others.
    """
    found = np.unique(table.y)
    count = len(found)
    names = table.classes or tuple(str(label) for label in found)
    for declared, key in classes:
        if declared != count or not np.array_equal(found, np.arange(count)):
            column = "the labels" if table.target is None else f"target column {table.target!r}"
            raise DataError(
                f"{source}: {column} holds {count} classes ({', '.join(map(repr, names))}), but {key} "
                f"declares {declared}: set likelihood_options: {{classes: {count}}} (or likelihood: "
                "bernoulli for two classes) under its data set's dataset_options"
            )


def _files(dataset: Dataset, protocol: str, manifest: Path) -> str:
    """The raw files (the first ``MAX_FILES_NAMED``) a data set's table is read from, for an error message."""
    return ", ".join(str(manifest.parent / spec.path) for spec in dataset.files(protocol)[:MAX_FILES_NAMED])


def prepare_split(
    dataset: Dataset,
    protocol: str,
    split: int,
    table_path: Path,
    manifest: Path,
    output: Path,
    *,
    seed: int = 0,
    train_size: int | None = None,
    test_size: int | None = None,
    drop_features: tuple[int, ...] = (),
    standardize_inputs: bool = False,
) -> None:
    """Write split ``split`` of a data set (:func:`split_of_table`, from the table at ``table_path``; the
    index_files protocol reads the raw files ``manifest`` lists, checked)."""
    raw = None  # only the index_files protocol reads raw files here
    if protocol == "index_files":
        raw = checked_raw_folder(manifest, dataset.files(protocol))
    try:
        made = split_of_table(
            dataset,
            protocol,
            split,
            load_table(table_path),
            raw=raw,
            seed=seed,
            train_size=train_size,
            test_size=test_size,
            drop_features=drop_features,
            standardize_inputs=standardize_inputs,
        )
    except DataError as error:  # named with the files the table was read from
        raise DataError(f"{_files(dataset, protocol, manifest)}: {error}") from None
    save_split(output, made)


def split_of_table(
    dataset: Dataset,
    protocol: str,
    split: int,
    table: Table,
    *,
    raw: Path | None = None,
    seed: int = 0,
    train_size: int | None = None,
    test_size: int | None = None,
    drop_features: tuple[int, ...] = (),
    standardize_inputs: bool = False,
) -> Split:
    """Split ``split`` of a data set's ``table``, standardized with training statistics (a classification data
    set's x only with ``standardize_inputs``), without the feature columns ``drop_features`` (``raw``: the
    folder of the index_files protocol's files)."""
    if drop_features:
        if max(drop_features) >= table.x.shape[1]:
            raise ValueError(
                f"{dataset.name}: drop_features {list(drop_features)} names a column past its "
                f"{table.x.shape[1]} features"
            )
        table = replace(
            table,
            x=np.delete(table.x, list(drop_features), axis=1),
            x_plot=None if table.x_plot is None else np.delete(table.x_plot, list(drop_features), axis=1),
        )
        log.info("%s: features %s left out of the splits", dataset.name, list(drop_features))
    train, test = split_rows(table, protocol, split, seed=seed, train_size=train_size, test_size=test_size, raw=raw)
    info = {
        "dataset": dataset.name,
        "split": split,
        "protocol": protocol,
        "seed": seed,
        "drop_features": list(drop_features),
        "standardize_inputs": standardize_inputs,
    }
    made = make_split(table, train, test, dataset.standardize, info, standardize_inputs=standardize_inputs)
    log.info(
        "%s split %d (%s): %d training and %d test rows x %d features; y mean %.6g, std %.6g (training rows)",
        dataset.name,
        split,
        protocol,
        len(train),
        len(test),
        made.x_train.shape[1],
        made.y_mean,
        made.y_std,
    )
    return made
