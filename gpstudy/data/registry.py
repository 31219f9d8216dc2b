"""The registry of data sets: what to fetch (``files.tsv``), how to read it, how to split it."""

import csv
from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass, replace
from functools import cache, partial
from importlib import resources
from pathlib import Path
from typing import Any

from gpstudy.data import airline, images, uci, user
from gpstudy.data.dataset import Table
from gpstudy.data.fetch import FileSpec, Source

PROTOCOLS = ("random", "index_files", "given", "first_rows")  # how train/test splits are made (see split.py)
ONE_SPLIT_PROTOCOLS = ("given", "first_rows")  # protocols that make split 0 only


@dataclass(frozen=True)
class Dataset:
    """One data set of the study."""

    name: str
    read: Callable[[Path], Table]  # raw folder -> table, for the protocols other than index_files
    task: str = "regression"  # "regression" (x and y standardized) or "classification"
    protocol: str = "random"  # the split protocol when the config names none for this data set
    shape: tuple[int, int] | None = None  # (N, D) of the table, checked after reading
    own_files: tuple[FileSpec, ...] = ()  # a user data set's files (the registry's are in files.tsv)
    pins: tuple[tuple[str, str], ...] = ()  # (path, sha256) a config pins for files files.tsv has no hash of
    reader_options: tuple[str, ...] = ()  # the dataset_options keys its reader takes as keyword arguments (all needed)

    @property
    def standardize(self) -> bool:
        """Whether x and y are standardized with training statistics (regression only)."""
        return self.task == "regression"

    def files(self, protocol: str) -> tuple[FileSpec, ...]:
        """The files a split protocol needs: the originals, or the benchmark table and index files."""
        part = "index_files" if protocol == "index_files" else "original"
        specs = self.own_files if part == "original" and self.own_files else _file_specs().get((self.name, part), ())
        if not specs:
            raise ValueError(f"data set {self.name!r} has no files for the {protocol!r} split protocol")
        pins = dict(self.pins)
        return tuple(spec if spec.path not in pins else replace(spec, sha256=pins[spec.path]) for spec in specs)

    def pinned(self, sha256: dict[str, str]) -> "Dataset":
        """This data set with the sha256 of files that ``files.tsv`` knows no trusted hash for, by path
        (``gpstudy datasets`` prints the hashes recorded at the first fetch).

        Raises:
            ValueError: a path that is none of the data set's files, or one ``files.tsv`` already pins.
        """
        known = {spec.path: spec.sha256 for specs in _file_specs_of(self.name) for spec in specs}
        for path in sha256:
            if path not in known:
                raise ValueError(f"data set {self.name!r} has no file {path!r}; its files: {', '.join(sorted(known))}")
            if known[path] is not None:
                raise ValueError(
                    f"{self.name}/{path} is pinned by gpstudy (sha256 {known[path]}); "
                    "a config pins only files without a trusted hash"
                )
        return replace(self, pins=tuple(sorted(sha256.items())))

    def with_reader_options(self, options: dict[str, Any]) -> "Dataset":
        """This data set with its reader's options (``reader_options``) taken from a config's
        ``dataset_options`` entry for it, bound to the reader (lists as tuples), so ``spec`` holds them.

        Raises:
            ValueError: one of its reader's options missing, or another data set's reader option given.
        """
        missing = [key for key in self.reader_options if key not in options]
        foreign = sorted(key for key in set(options) & READER_OPTIONS if key not in self.reader_options)
        if missing:
            raise ValueError(f"data set {self.name!r} needs {', '.join(missing)} (the default is in config.yaml)")
        if foreign:
            raise ValueError(f"{', '.join(foreign)} is an option of another data set's reader, not of {self.name!r}'s")
        if not self.reader_options:
            return self
        bound = {
            key: tuple(options[key]) if isinstance(options[key], list) else options[key] for key in self.reader_options
        }
        return replace(self, read=partial(self.read, **bound))

    def spec(self) -> dict[str, Any]:
        """Every field of the data set as plain data (``plain``): what its files are, how they are read
        (the reader and its options: a user data set's format, target and task), its task and shape."""
        return plain(self)

    def has_registry_files(self, protocol: str) -> bool:
        """Whether the files the data set reads under ``protocol`` are the registry's (``files.tsv``): the same
        paths with its sha256 where it pins one, the files of the papers' numbers. A user's data set's are
        not, even under a registered name; a registry file without a trusted hash (the airline's) counts."""
        part = "index_files" if protocol == "index_files" else "original"
        registry = {spec.path: spec.sha256 for spec in _file_specs().get((self.name, part), ())}
        ours = {spec.path: spec.sha256 for spec in self.files(protocol)}
        return ours.keys() == registry.keys() and all(registry[path] in (None, ours[path]) for path in ours)

    def unpinned_files(self) -> list[str]:
        """The paths of the data set's files that no trusted sha256 pins (the registry's, then the config's)."""
        pins = dict(self.pins)
        return [
            spec.path
            for specs in _file_specs_of(self.name)
            for spec in specs
            if spec.sha256 is None and spec.path not in pins
        ]


DATASETS: dict[str, Dataset] = {
    d.name: d
    for d in (
        Dataset("boston", uci.read_boston, shape=(506, 13)),
        Dataset("concrete", uci.read_concrete, shape=(1030, 8)),
        Dataset("energy", uci.read_energy, shape=(768, 8)),
        Dataset("kin8nm", uci.read_kin8nm, shape=(8192, 8)),
        Dataset("power", uci.read_power, shape=(9568, 4)),
        Dataset("protein", uci.read_protein, shape=(45730, 9)),
        Dataset("wine_red", uci.read_wine_red, shape=(1599, 11)),
        Dataset("snelson", uci.read_snelson, shape=(200, 1)),
        Dataset("airline", airline.read_airline, reader_options=("months",)),
        Dataset("mnist", images.read_mnist, task="classification", protocol="given", shape=(70000, 784)),
        Dataset("cifar10", images.read_cifar10, task="classification", protocol="given", shape=(60000, 3072)),
    )
}
READER_OPTIONS = {key for dataset in DATASETS.values() for key in dataset.reader_options}  # of any reader
CLASSES = {"mnist": 10, "cifar10": 10}  # the label classes 0..C-1 of each registered classification data set


def plain(value: Any) -> Any:
    """``value`` as plain data (JSON's kinds) that Snakemake can compare between runs: a dataclass field by
    field, except fields marked ``metadata={"locates": True}`` (where a file is found, not what it is); a
    ``functools.partial`` as its function and bound arguments; a function by its qualified name.

    Raises:
        TypeError: a value of another kind (Snakemake would leave it out of a rule's params unseen).
    """
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value) if not f.metadata.get("locates")}
    if isinstance(value, partial):
        return {"function": plain(value.func), "args": plain(value.args), "keywords": plain(value.keywords)}
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{value.__module__}.{value.__qualname__}"
    raise TypeError(f"{value!r} ({type(value).__name__}) has no plain form; give it one in gpstudy.data.registry.plain")


def get_dataset(name: str, options: dict | None = None) -> Dataset:
    """The registered data set ``name``; the error lists the known ones. With ``options`` (a config's
    ``dataset_options`` entry that has a ``source``), the user's own data set of that name."""
    if options is not None:
        spec = user.file_spec(options)
        return Dataset(name, user.user_reader(options, spec.path), task=options["task"], own_files=(spec,))
    try:
        return DATASETS[name]
    except KeyError:
        raise KeyError(f"unknown data set {name!r}; known: {', '.join(sorted(DATASETS))}") from None


def _file_specs_of(name: str) -> list[tuple[FileSpec, ...]]:
    """The file specs of every part (original, index_files) of a registered data set."""
    return [specs for (dataset, _), specs in _file_specs().items() if dataset == name]


@cache
def _file_specs() -> dict[tuple[str, str], tuple[FileSpec, ...]]:
    """Parse ``files.tsv`` into file specs grouped by (data set, part), sources in file order."""
    sources: dict[tuple[str, str, str, str], list[Source]] = {}
    text = resources.files("gpstudy.data").joinpath("files.tsv").read_text()
    rows = csv.DictReader((line for line in text.splitlines() if not line.startswith("#")), delimiter="\t")
    for row in rows:
        key = (row["dataset"], row["part"], row["path"], row["sha256"])
        sources.setdefault(key, []).append(Source(row["url"], row["compression"] or None))
    specs: dict[tuple[str, str], tuple[FileSpec, ...]] = {}
    for (dataset, part, path, sha256), urls in sources.items():
        spec = FileSpec(path=path, sha256=sha256 or None, sources=tuple(urls))
        specs[dataset, part] = (*specs.get((dataset, part), ()), spec)
    return specs
