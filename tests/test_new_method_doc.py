"""docs/new-method.md's examples run as written, in one session: the method it defines is registered, trains
with the default of the page's config lines, is named by its display name as the tables name it, and passes
the page's test; the page's registry line is the package's, and the files and names it points to exist."""

import contextlib
import io
import re
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch

from gpstudy.methods import METHODS
from gpstudy.report.labels import display_names

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "new-method.md"
NEW_FILES = {"gpstudy/methods/sod.py", "tests/methods/test_sod.py"}  # what the page has a reader write
NAMES_IN = {
    "gpstudy/diagnostics/probes.py": ["PROBES"],
    "tests/methods/test_effective_m.py": ["points_used", "CAPPED"],
    "tests/methods/test_numerics_matrix.py": ["FAILING_VARIANCE_WITH_NOISE"],
}  # what the page says they hold
POINTS = [1.5, 4.5]  # where the page predicts: sin is near 1 and -1, a fit on the first 20 of 100 points misses 4.5
TOLERANCE = 0.1  # |mean - sin(x)|: 0.05 and 0.02 with every 5th point (spread), 1.5 at 4.5 with the first 20


def blocks(language: str) -> list[str]:
    """The page's fenced code blocks of ``language``, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", PAGE.read_text(), re.M | re.S)


@pytest.fixture(scope="module")
def page_run(tmp_path_factory) -> tuple[dict, str]:
    """The page's Python blocks run in order in one namespace, on one thread, in an empty folder holding its
    YAML block as sod.yaml (as the page asks): the namespace and what they printed. ``METHODS`` is restored
    when the module's tests are done, so the page's registration reaches no other test."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as patch, mock.patch.dict(METHODS):
        patch.chdir(tmp_path_factory.mktemp("new_method"))
        Path("sod.yaml").write_text(blocks("yaml")[0])
        namespace, printed = {}, io.StringIO()
        with contextlib.redirect_stdout(printed):
            for block in blocks("python"):
                exec(compile(block, str(PAGE), "exec"), namespace)
        torch.set_num_threads(threads)
        yield namespace, printed.getvalue()


def test_the_method_is_registered_and_named_by_its_display_name_in_plot_order(page_run):
    namespace, printed = page_run
    assert METHODS["sod"] is namespace["SubsetOfData"]
    assert printed.splitlines()[-1] == "SoD 20"  # the page's method_label: its column in the tables and figures
    assert list(display_names({"orth": "ORTH"}))[-2:] == ["sod", "orth"]  # after the registered ones, before variants


def test_it_trains_with_the_default_of_the_pages_config_lines(page_run):
    sod = page_run[0]["sod"]
    assert sod.settings.options == {"subset": "spread"} and sod.method.effective_M == 20
    torch.testing.assert_close(sod.method.x_train[0], torch.as_tensor(sod.split.x_train[::5]))  # every 5th of 100
    means = sod.predict(POINTS)["mean"].to_numpy()
    np.testing.assert_allclose(means, np.sin(POINTS), atol=TOLERANCE)


def test_the_pages_test_passes(page_run):
    page_run[0]["test_sod_is_the_exact_gp_on_the_points_it_keeps"]()


def test_the_registry_line_is_the_packages_with_the_new_method_last():
    source = (REPO / "gpstudy" / "methods" / "__init__.py").read_text()
    registry = re.search(r"^METHODS: .*?\)}$", source, re.M | re.S)[0]
    shown = next(block for block in blocks("text") if block.startswith("METHODS"))
    assert re.sub(r"\s+", "", shown) == re.sub(r"\s+", "", registry).replace(")}", ",SubsetOfData)}")


def test_the_files_and_names_the_page_points_to_exist():
    paths = set(re.findall(r"`((?:gpstudy|tests)/[\w/.]+\.(?:py|yaml)|config\.yaml)`", PAGE.read_text()))
    assert NEW_FILES <= paths and set(NAMES_IN) <= paths
    assert [path for path in paths - NEW_FILES if not (REPO / path).is_file()] == []
    assert [
        (path, name)
        for path, names in NAMES_IN.items()
        for name in names
        if not re.search(rf"\b{name}\b", (REPO / path).read_text())
    ] == []
