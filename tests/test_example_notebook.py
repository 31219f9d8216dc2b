"""docs/examples/snelson.ipynb runs top to bottom in a Jupyter kernel (nbclient, the test extra) and shows what it
says: the three fits' seconds, a table of predictions and a figure of the three posteriors."""

import ast
import base64
import importlib.util
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="nbformat (the test extra) is not installed")
nbclient = pytest.importorskip("nbclient", reason="nbclient (the test extra) is not installed")
if importlib.util.find_spec("ipykernel") is None:  # looked up, not imported: in this process it would mean a kernel
    pytest.skip("ipykernel (the test extra) is not installed: no kernel to run in", allow_module_level=True)

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "examples" / "snelson.ipynb"
TIMEOUT = 300  # seconds a cell may take; the three fits take 15-40 s on a shared 2-core machine
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def executed(shared_data, tmp_path_factory) -> list:
    """The notebook's code cells after a run in an empty folder, the study's data copy as GPSTUDY_MIRROR and
    one thread (two on a busy 2-core machine wait on each other)."""
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert not any(cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code")  # stored clean
    folder = tmp_path_factory.mktemp("example")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GPSTUDY_MIRROR", str(shared_data))
        patch.setenv("OMP_NUM_THREADS", "1")
        nbclient.NotebookClient(
            notebook, timeout=TIMEOUT, kernel_name="python3", resources={"metadata": {"path": str(folder)}}
        ).execute()
    assert (folder / "data" / "raw" / "snelson").is_dir()  # the data fetched into the run's folder
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def test_the_notebook_fits_predicts_and_plots_three_methods(executed):
    fits, table, figure = executed
    seconds = ast.literal_eval(fits.outputs[-1]["data"]["text/plain"])  # {'svgp': '2.3 s', ...}
    assert list(seconds) == ["svgp", "gpnet", "fbnn"]
    assert table.outputs[0]["data"]["text/plain"].splitlines()[0].split() == ["x", "mean", "var_f", "var_y"]
    assert len(table.outputs[0]["data"]["text/plain"].splitlines()) == 4  # a header and three points
    (image,) = [output["data"]["image/png"] for output in figure.outputs if "image/png" in output.get("data", {})]
    assert base64.b64decode(image).startswith(PNG_SIGNATURE)
