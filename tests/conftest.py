"""Shared fixtures: the study's config (every default), the data copies beside the repo, a local HTTP server,
a venv outside the checkout with gpstudy installed from a wheel, an HTML page's table as text, a seeded generator."""

import functools
import html.parser
import http.server
import importlib.util
import itertools
import os
import shutil
import signal
import site
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from gpstudy.kernels import KERNELS, feature_map_problem
from gpstudy.methods import MethodConfig
from gpstudy.study import RunSettings, load_config, run_settings

REPO = Path(__file__).resolve().parents[1]
if "PYTEST_XDIST_WORKER" in os.environ:  # one torch thread per worker: n workers on n cores, none spin-waiting
    torch.set_num_threads(1)  # for a core another worker or a Snakemake job holds


def enumerated_options(name: str) -> list[dict]:
    """Kernel ``name``'s options at every combination of the values its schema enumerates (arccos: each
    degree), the rest at their defaults."""
    enums = {key: spec["enum"] for key, spec in KERNELS[name].options_schema["properties"].items() if "enum" in spec}
    return [dict(zip(enums, values)) for values in itertools.product(*enums.values())]


KERNELS_WITH_FEATURES = {  # every kernel with a random-feature map: test id -> (registry name, options)
    name + "".join(str(value) for value in options.values()): (name, options)
    for name in KERNELS
    for options in enumerated_options(name)
    if feature_map_problem(name, options) is None
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test taking ``kernel_with_features`` runs for each kernel with a feature map: (name, options)."""
    if "kernel_with_features" in metafunc.fixturenames:
        metafunc.parametrize(
            "kernel_with_features", list(KERNELS_WITH_FEATURES.values()), ids=list(KERNELS_WITH_FEATURES)
        )


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


def copy_package(folder: Path, changed: bool) -> Path:
    """A copy of the checkout's gpstudy package (config.yaml's link followed, as a wheel has it) in
    ``folder``, with one line added to a module when ``changed``; the folder to put on a job's path."""
    copy = folder / "gpstudy"
    shutil.copytree(REPO / "gpstudy", copy, ignore=shutil.ignore_patterns("__pycache__"))
    if changed:
        with open(copy / "metrics.py", "a") as module:
            module.write("# a line the checkout does not have\n")
    return folder


@pytest.fixture
def package_copy():
    """:func:`copy_package`, for the tests of one copy of the code (tests/runtime/test_job.py, tests/test_wheel.py)."""
    return copy_package


@pytest.fixture(scope="session")
def outside_env() -> dict[str, str]:
    """The environment of a process that must not see the checkout's gpstudy: this one's without PYTHONPATH."""
    return {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}


def copy_checkout(folder: Path) -> Path:
    """``folder`` holding a copy of the checkout's files as git sees them now, tracked and untracked (not
    ignored), links as links: a build's output stays out of the checkout."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for name in filter(None, set(listed.split("\0"))):
        if (REPO / name).is_file() or (REPO / name).is_symlink():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, folder / name, follow_symlinks=False)  # gpstudy/config.yaml: a link
    return folder


@pytest.fixture(scope="session")
def checkout_copy():
    """:func:`copy_checkout`, for the tests that build the package (the wheel here, tests/test_wheel.py its sdist)."""
    return copy_checkout


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory, outside_env) -> Path:
    """The bin folder of a fresh venv outside the checkout with gpstudy installed from a wheel built of this
    checkout (its tracked and untracked files, as they are now); run its programs with ``env=outside_env``.

    The venv sees this interpreter's site-packages through a ``.pth`` line, its dependencies without
    installing them; that folder's own ``.pth`` files are not processed, so its gpstudy (an editable
    install's finder) stays invisible: checked before the wheel goes in.
    """
    if importlib.util.find_spec("setuptools") is None:  # a build without network needs pyproject's backend here
        pytest.skip("building the wheel offline needs setuptools in this environment (pip install 'setuptools>=77')")
    root = tmp_path_factory.mktemp("wheel")  # a system temporary folder: outside the checkout
    source, wheels, venv = copy_checkout(root / "source"), root / "wheels", root / "venv"
    run = functools.partial(subprocess.run, cwd=root, env=outside_env, check=True)  # `python -c` and `-m` look in
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--quiet",
            "-w",
            str(wheels),
            str(source),
        ]
    )  # their working directory first: not the checkout
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    own = run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True
    ).stdout.strip()
    Path(own, "dependencies.pth").write_text("".join(f"{folder}\n" for folder in site.getsitepackages()))
    hidden = run([python, "-c", "import gpstudy"], capture_output=True, text=True, check=False)
    assert hidden.returncode != 0 and "No module named 'gpstudy'" in hidden.stderr, hidden.stderr
    (wheel,) = wheels.glob("gpstudy-*.whl")
    run([python, "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", "--quiet", str(wheel)])
    return venv / "bin"


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


class TableText(html.parser.HTMLParser):
    """The text of an HTML page's table: its caption and each row's cells (header and data), as parsed."""

    def __init__(self):
        super().__init__()
        self.caption, self.rows, self._cell = "", [], None

    def handle_starttag(self, tag, attrs) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th", "caption"):
            self._cell = ""

    def handle_endtag(self, tag) -> None:
        if tag == "caption":
            self.caption = self._cell
        elif tag in ("td", "th"):
            self.rows[-1].append(self._cell)
        if tag in ("td", "th", "caption"):
            self._cell = None

    def handle_data(self, data) -> None:
        if self._cell is not None:
            self._cell += data


@pytest.fixture
def html_table():
    """``html_table(path)``: the caption and the rows of cells of the table of the HTML page at ``path``."""

    def read(path: Path) -> tuple[str, list[list[str]]]:
        parser = TableText()
        parser.feed(Path(path).read_text(encoding="utf-8"))
        parser.close()
        return parser.caption, parser.rows

    return read


@pytest.fixture
def recorded_signals() -> list[int]:
    """The signals a test's own SIGTERM and SIGUSR1 handlers receive: a test of ``gpstudy.training.stopping`` that
    raises them in the test run's process, were they not caught, finds them here instead of killing the run."""
    received = []
    before = {
        number: signal.signal(number, lambda number, frame: received.append(number))
        for number in (signal.SIGTERM, signal.SIGUSR1)
    }
    yield received
    for number, handler in before.items():
        signal.signal(number, handler)


@pytest.fixture
def pretraining_steps(monkeypatch):
    """``pretraining_steps(sigterm_at=None)``: a list that counts pretraining's optimizer steps from now on;
    SIGTERM is raised in this process during step ``sigterm_at`` (use with ``recorded_signals``)."""
    import gpstudy.training.optim
    import gpstudy.training.pretrain

    def count(sigterm_at: int | None = None) -> list[int]:
        steps = []

        def step(*args, **kwargs):
            steps.append(len(steps) + 1)
            if len(steps) == sigterm_at:
                signal.raise_signal(signal.SIGTERM)
            return gpstudy.training.optim.optimizer_step(*args, **kwargs)

        monkeypatch.setattr(gpstudy.training.pretrain, "optimizer_step", step)
        return steps

    return count


@pytest.fixture
def generator() -> torch.Generator:
    """A generator seeded 0."""
    return torch.Generator().manual_seed(0)
