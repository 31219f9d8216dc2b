"""Shared fixtures: the study's data copies beside the repo, and a local HTTP server."""

import functools
import http.server
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real data sets (``../shared/data`` beside the repository), laid out as a mirror."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"the study's data copies are not at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture
def http_root(tmp_path, monkeypatch):
    """A folder served over HTTP on 127.0.0.1; yields (folder, base URL)."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    root = tmp_path / "served"
    root.mkdir()
    handler = functools.partial(QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """A static file handler that does not print each request."""

    def log_message(self, *args) -> None:
        pass
