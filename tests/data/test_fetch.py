"""Fetching: a real HTTP server on 127.0.0.1, the mirror, checksums, fall-through and errors."""

import bz2
import gzip
import hashlib

import pytest

from gpstudy.data.fetch import FetchError, FileSpec, Source, fetch_file, mirror_root

CONTENT = b"1.0 2.0 3.0\n4.0 5.0 6.0\n"
SHA = hashlib.sha256(CONTENT).hexdigest()


def spec(*urls, compression=None, sha256=SHA):
    return FileSpec("original/table.txt", sha256, tuple(Source(u, compression) for u in urls))


def leftovers(folder):
    return [p.name for p in folder.rglob("*") if p.is_file() and ".part" in p.name]


def test_download_succeeds(http_root, tmp_path):
    served, base = http_root
    (served / "table.txt").write_bytes(CONTENT)
    path = fetch_file("toy", spec(f"{base}/table.txt"), tmp_path / "raw")
    assert path == tmp_path / "raw" / "original" / "table.txt"
    assert path.read_bytes() == CONTENT


def test_404_falls_through_to_next_source(http_root, tmp_path):
    served, base = http_root
    (served / "table.txt").write_bytes(CONTENT)
    path = fetch_file("toy", spec(f"{base}/gone.txt", f"{base}/table.txt"), tmp_path / "raw")
    assert path.read_bytes() == CONTENT


def test_checksum_mismatch_names_hashes_and_url_and_leaves_nothing(http_root, tmp_path):
    served, base = http_root
    corrupt = CONTENT[:-3]
    (served / "table.txt").write_bytes(corrupt)
    url = f"{base}/table.txt"
    with pytest.raises(FetchError) as caught:
        fetch_file("toy", spec(url), tmp_path / "raw")
    message = str(caught.value)
    assert SHA in message and hashlib.sha256(corrupt).hexdigest() in message
    assert url in message and "toy/original/table.txt" in message
    assert not (tmp_path / "raw" / "original" / "table.txt").exists()
    assert leftovers(tmp_path / "raw") == []


def test_corrupt_source_falls_through_to_good_one(http_root, tmp_path):
    served, base = http_root
    (served / "bad.txt").write_bytes(b"garbage")
    (served / "table.txt").write_bytes(CONTENT)
    path = fetch_file("toy", spec(f"{base}/bad.txt", f"{base}/table.txt"), tmp_path / "raw")
    assert path.read_bytes() == CONTENT


def test_gzip_source_is_checked_after_unpacking(http_root, tmp_path):
    served, base = http_root
    (served / "table.txt.gz").write_bytes(gzip.compress(CONTENT))
    path = fetch_file("toy", spec(f"{base}/table.txt.gz", compression="gzip"), tmp_path / "raw")
    assert path.read_bytes() == CONTENT


def test_no_source_lists_every_attempt_and_the_mirror_hint(http_root, tmp_path):
    _, base = http_root
    urls = [f"{base}/a.txt", f"{base}/b.txt"]
    with pytest.raises(FetchError) as caught:
        fetch_file("toy", spec(*urls), tmp_path / "raw")
    message = str(caught.value)
    assert all(url in message for url in urls)
    assert "404" in message and "mirror" in message


@pytest.mark.parametrize("as_url", [False, True])
def test_mirror_is_tried_first(tmp_path, as_url):
    mirror = tmp_path / "mirror"
    (mirror / "toy" / "original").mkdir(parents=True)
    (mirror / "toy" / "original" / "table.txt").write_bytes(CONTENT)
    setting = mirror.as_uri() if as_url else str(mirror)
    # the only URL is unroutable: success proves the mirror was used and the network never reached
    path = fetch_file("toy", spec("http://127.0.0.1:9/never"), tmp_path / "raw", mirror=setting)
    assert path.read_bytes() == CONTENT


def test_corrupt_mirror_copy_falls_through_to_url(http_root, tmp_path):
    served, base = http_root
    (served / "table.txt").write_bytes(CONTENT)
    mirror = tmp_path / "mirror"
    (mirror / "toy" / "original").mkdir(parents=True)
    (mirror / "toy" / "original" / "table.txt").write_bytes(b"truncated")
    path = fetch_file("toy", spec(f"{base}/table.txt"), tmp_path / "raw", mirror=str(mirror))
    assert path.read_bytes() == CONTENT


def test_existing_good_file_is_not_fetched_again(tmp_path):
    target = tmp_path / "raw" / "original" / "table.txt"
    target.parent.mkdir(parents=True)
    target.write_bytes(CONTENT)
    assert fetch_file("toy", spec("http://127.0.0.1:9/never"), tmp_path / "raw") == target


def test_without_a_trusted_hash_a_web_page_or_an_unpacked_file_falls_through(http_root, tmp_path):
    """A host's "not found" page served with status 200, or a file that is not the bz2 its name says,
    is not recorded as the first fetch of a file without a trusted sha256."""
    served, base = http_root
    packed = bz2.compress(CONTENT)
    (served / "moved.html").write_bytes(b"\n <!DOCTYPE html><html><body>This page has moved</body></html>")
    (served / "plain.csv").write_bytes(CONTENT)
    (served / "table.csv.bz2").write_bytes(packed)
    unpinned = FileSpec(
        "table.csv.bz2", None, tuple(Source(f"{base}/{name}") for name in ("moved.html", "plain.csv", "table.csv.bz2"))
    )
    path = fetch_file("toy", unpinned, tmp_path / "raw")
    assert path.read_bytes() == packed
    path.unlink()
    with pytest.raises(FetchError, match=r"moved\.html served a web page.*\n.*plain\.csv served no \.bz2 file"):
        fetch_file("toy", FileSpec("table.csv.bz2", None, unpinned.sources[:2]), tmp_path / "raw")


@pytest.mark.parametrize("host", ["otherhost", "otherhost:22", "user@otherhost"])
def test_a_file_url_of_another_host_is_refused(tmp_path, host):
    """Issue 49: file://otherhost/tmp was read as this machine's /tmp, in the fetch job (the config's mirror is
    refused at validation by the same check, tests/test_cli.py)."""
    with pytest.raises(FetchError, match=f"not files of host '{host}'; mount that host's folder"):
        mirror_root(f"file://{host}{tmp_path}")
    assert mirror_root(f"file://localhost{tmp_path}") == mirror_root(f"file://{tmp_path}") == tmp_path
