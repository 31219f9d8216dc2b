"""docs/python.md's examples run as written, and fit Snelson: the means they print are finite and near the
exact GP's under the same (pretrained, fixed) hyperparameters."""

import contextlib
import io
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from gpstudy.methods import ExactGP, MethodConfig, Problem
from gpstudy.notebook import Fitted
from gpstudy.numerics import DTYPES

PAGE = Path(__file__).resolve().parents[1] / "docs" / "python.md"
POINTS = [1.5, 2.5, 5.5]  # where the page prints the means: inside the data, where the exact mean is far from 0
TOLERANCE = 0.1  # in y's units; 500 steps come within 0.035, a fit at the prior mean is 0.3-1.8 off


def python_blocks(text: str) -> list[str]:
    """The page's fenced ```python code blocks, in order."""
    return re.findall(r"^```python\n(.*?)^```", text, re.M | re.S)


def exact_gp(model: Fitted) -> Fitted:
    """The exact GP on the model's data under the model's kernel and noise, predicting as the model does."""
    split = model.split
    dtype = DTYPES[model.settings.dtype][0]
    x, y = (torch.as_tensor(values, dtype=dtype)[None] for values in (split.x_train, split.y_train))
    exact = ExactGP(
        Problem(x, y, model.method.kernel, model.method.likelihood, torch.Generator()),
        MethodConfig(M=0, n_train=len(split.y_train)),
    )
    return Fitted(exact, model.settings, split, [], 0.0, model.threads)


@pytest.fixture(scope="module")
def page_run(shared_data, tmp_path_factory) -> tuple[dict, str]:
    """The page's blocks run in order in one namespace (a session), in an empty folder, with the study's
    data copy as GPSTUDY_MIRROR, on one thread (the page's "a few seconds each on a CPU core"; two threads
    on a busy 2-core machine wait on each other): the namespace and what they printed."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path_factory.mktemp("notebook"))
        patch.setenv("GPSTUDY_MIRROR", str(shared_data))
        namespace, printed = {}, io.StringIO()
        with contextlib.redirect_stdout(printed):
            for block in python_blocks(PAGE.read_text()):
                exec(compile(block, str(PAGE), "exec"), namespace)
    torch.set_num_threads(threads)
    return namespace, printed.getvalue()


def test_the_page_has_its_three_examples_each_under_15_lines():
    blocks = python_blocks(PAGE.read_text())
    assert len(blocks) == 3 and all(len(block.splitlines()) < 15 for block in blocks)


def test_the_examples_print_finite_numbers(page_run):
    _, printed = page_run
    numbers = [float(value) for value in re.findall(r"-?\d+\.\d+(?:e-?\d+)?|nan|inf", printed)]
    assert len(numbers) == 2 * 4 * len(POINTS) + 3 * 4, printed  # two tables of x, mean, var_f, var_y; 3 x 4 means
    assert np.isfinite(numbers).all(), printed


@pytest.mark.parametrize("name", ["svgp", "gpnet", "fbnn"])
def test_each_fit_is_near_the_exact_gp(page_run, name):
    model = page_run[0][name]
    assert model.settings.method == name and not model.settings.options["online_hyperparameters"]
    exact = exact_gp(model).predict(POINTS)["mean"].to_numpy()
    assert np.abs(exact).max() > 1.5  # the check could catch a fit at the prior mean
    np.testing.assert_allclose(model.predict(POINTS)["mean"], exact, atol=TOLERANCE)
