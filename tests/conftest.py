"""Shared fixtures: the study's config (every default), the data copies beside the repo, a local HTTP server."""

import functools
import http.server
import itertools
import threading
from pathlib import Path

import pytest

from gpstudy.kernels import KERNELS, feature_map_problem
from gpstudy.methods import MethodConfig
from gpstudy.study import RunSettings, load_config, run_settings

REPO = Path(__file__).resolve().parents[1]


def enumerated_options(name: str) -> list[dict]:
    """Kernel ``name``'s options at every combination of the values its schema enumerates (arccos: each
    degree), the rest at their defaults."""
    enums = {key: spec["enum"] for key, spec in KERNELS[name].options_schema["properties"].items() if "enum" in spec}
    return [dict(zip(enums, values)) for values in itertools.product(*enums.values())]


KERNELS_WITH_FEATURES = {  # every kernel with a random-feature map: test id -> (registry name, options)
    name + "".join(str(value) for value in options.values()): (name, options)
    for name in KERNELS for options in enumerated_options(name) if feature_map_problem(name, options) is None
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test taking ``kernel_with_features`` runs for each kernel with a feature map: (name, options)."""
    if "kernel_with_features" in metafunc.fixturenames:
        metafunc.parametrize("kernel_with_features", list(KERNELS_WITH_FEATURES.values()),
                             ids=list(KERNELS_WITH_FEATURES))
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def study_config() -> dict:
    """``config.yaml``, validated: where every default lives."""
    return load_config(REPO / "config.yaml")


@pytest.fixture(scope="session")
def settings_for(study_config):
    """``settings_for(method, M, **changes)``: a run's settings, config.yaml's defaults then ``changes``."""
    def make(method: str, M: int, **changes) -> RunSettings:
        return run_settings(study_config, None, method=method, M=M, **changes)
    return make


@pytest.fixture(scope="session")
def method_config(settings_for):
    """``method_config(method, M, n_train, **changes)``: a method's config from config.yaml's defaults
    and ``changes`` (a ``box`` is taken as given, in standardized units)."""
    def make(method: str, M: int, n_train: int, **changes) -> MethodConfig:
        return MethodConfig(M=M, n_train=n_train, options=settings_for(method, M, **changes).options)
    return make


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
