"""Checksummed downloads: a local mirror first, then each source URL in order.

Every file of a data set is described by a :class:`FileSpec`: its path inside the data set's folder
(the same layout as the study's mirror, ``<mirror>/<dataset>/<path>``), the sha256 of the file as it
is stored, and an ordered list of sources (canonical first, public mirrors after). The transfer
itself is pooch's; a file reaches its final path only after its checksum matched.
"""

import bz2
import gzip
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

import pooch
from pooch.downloaders import choose_downloader

from gpstudy.io import atomic_path

log = logging.getLogger(__name__)

DECOMPRESSORS = {"gzip": gzip.open, "bz2": bz2.open}  # how a source may be packed
MAGIC = {".bz2": b"BZh", ".gz": b"\x1f\x8b"}  # the first bytes of a stored file, by the end of its name
WEB_PAGE = (b"<!doctype html", b"<html", b"<?xml")  # how an error or landing page served for a file begins


@dataclass(frozen=True)
class Source:
    """One place a file can be fetched from."""

    url: str
    compression: str | None = None  # "gzip" when the source serves a packed copy of the file


@dataclass(frozen=True)
class FileSpec:
    """A file of a data set: where it lives, what it must hash to, where to get it."""

    path: str  # relative to the data set's folder, as laid out in the mirror
    sha256: str | None  # of the stored (unpacked) file; None only where no trusted hash is known
    sources: tuple[Source, ...] = field(metadata={"locates": True})  # where, not what: no rerun when they change


class ChecksumError(ValueError):
    """A fetched file does not have the sha256 its spec pins."""


class ImplausibleFileError(ValueError):
    """A fetched copy of a file without a trusted sha256 that cannot be the file (a web page, no magic bytes)."""


class FetchError(RuntimeError):
    """No source gave a file with the right checksum."""


def mirror_path(mirror: str) -> Path:
    """The directory a mirror setting (a directory or a ``file://`` URL of this machine) names, unchecked.

    Raises:
        FetchError: a URL of another kind, or a ``file://`` URL naming another host (it would be read here).
    """
    parsed = urlparse(mirror)
    if parsed.scheme and parsed.scheme != "file":
        raise FetchError(f"mirror {mirror!r}: give a local directory or a file:// URL")
    if parsed.scheme and parsed.netloc not in ("", "localhost"):
        raise FetchError(
            f"mirror {mirror!r}: a file:// URL names this machine's files (file:///path or file://localhost/path), "
            f"not files of host {parsed.netloc!r}; mount that host's folder and give its local path"
        )
    return Path(unquote(parsed.path)) if parsed.scheme else Path(mirror)


def mirror_root(mirror: str | None) -> Path | None:
    """Turn a mirror setting (a directory or a ``file://`` URL) into the directory it names.

    Raises:
        FetchError: the mirror is a URL of another kind, or names no directory (once, naming it).
    """
    if not mirror:
        return None
    root = mirror_path(mirror)
    if not root.is_dir():
        raise FetchError(
            f"mirror {mirror!r}: {root} is not a directory"
            + (" (it is a file)" if root.exists() else " (it does not exist)")
        )
    return root


def sha256_of(path: Path) -> str:
    """The sha256 hex digest of a file."""
    return pooch.file_hash(str(path), alg="sha256")


def fetch_file(dataset: str, spec: FileSpec, dest_dir: Path, mirror: str | None = None) -> Path:
    """Make ``dest_dir / spec.path`` hold the right file, fetching it if needed.

    Tries the mirror copy (``<mirror>/<dataset>/<spec.path>``) first, then each source URL. A copy
    whose sha256 differs from the spec is discarded and the next source tried.

    Raises:
        FetchError: no source gave the file; the message lists every attempt and its reason.
    """
    target = dest_dir / spec.path
    if target.exists() and (spec.sha256 is None or sha256_of(target) == spec.sha256):
        return target
    attempts: list[str] = []
    root = mirror_root(mirror)
    candidates: list[tuple[str, Source | None]] = []
    if root is not None:
        candidates.append((str(root / dataset / spec.path), None))
    candidates += [(source.url, source) for source in spec.sources]
    for where, source in candidates:
        try:
            with atomic_path(target) as tmp:
                _transfer(where, source, tmp)
                _check(tmp, spec, where)
            if spec.sha256 is None:
                log.warning(
                    "%s/%s is not pinned by a checksum; fetched from %s, sha256 %s",
                    dataset,
                    spec.path,
                    where,
                    sha256_of(target),
                )
            log.info("fetched %s/%s from %s", dataset, spec.path, where)
            return target
        except Exception as error:  # every failure is reported below, with its source
            attempts.append(f"  {where}: {type(error).__name__}: {error}")
    hint = (
        ""
        if root is not None
        else "\nOffline? Set `mirror` (config key or --mirror) to a directory laid out like "
        f"<mirror>/{dataset}/{spec.path}."
    )
    raise FetchError(f"could not fetch {dataset}/{spec.path}; tried:\n" + "\n".join(attempts) + hint)


def _transfer(where: str, source: Source | None, tmp: Path) -> None:
    """Copy a mirror file or download a URL into ``tmp``, unpacking it if the source is packed."""
    if source is None:
        if not Path(where).is_file():
            raise FileNotFoundError("not in the mirror")
        shutil.copyfile(where, tmp)
        return
    if source.compression is None:
        choose_downloader(source.url, progressbar=False)(source.url, str(tmp), None)
        return
    packed = tmp.with_name(tmp.name + ".packed")
    try:
        choose_downloader(source.url, progressbar=False)(source.url, str(packed), None)
        with DECOMPRESSORS[source.compression](packed, "rb") as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst)
    finally:
        packed.unlink(missing_ok=True)


def _check(path: Path, spec: FileSpec, where: str) -> None:
    """Raise :class:`ChecksumError` unless ``path`` (a fetched copy of ``spec``'s file) hashes to its sha256;
    without a trusted hash, :class:`ImplausibleFileError` for a copy that cannot be the file (``_check_plausible``)."""
    expected = spec.sha256
    if expected is None:
        _check_plausible(path, Path(spec.path).name, where)
        return
    observed = sha256_of(path)
    if observed != expected:
        raise ChecksumError(f"sha256 mismatch for {where}: expected {expected}, observed {observed}")


def _check_plausible(path: Path, name: str, where: str) -> None:
    """For a file no trusted sha256 pins (its first fetch records whatever came): refuse a web page served
    in its place (a host's "not found" or landing page) and a packed file without its format's magic bytes."""
    with open(path, "rb") as stream:
        head = stream.read(512)
    suffix, magic = next(((suffix, magic) for suffix, magic in MAGIC.items() if name.endswith(suffix)), ("", None))
    if head.lstrip().lower().startswith(WEB_PAGE):
        raise ImplausibleFileError(f"{where} served a web page, not the file")
    if magic is not None and not head.startswith(magic):
        raise ImplausibleFileError(f"{where} served no {suffix} file (it does not begin with {magic!r})")
