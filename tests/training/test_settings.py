"""Run settings: config defaults, then data set, then method, then the command line."""

from pathlib import Path

import numpy as np
import yaml

from gpstudy.training import run_settings

CONFIG = yaml.safe_load((Path(__file__).resolve().parents[2] / "config.yaml").read_text())


def test_precedence():
    boston = run_settings(CONFIG, "boston", method="gpnet", M=100)
    assert boston.pretrain and boston.measurement == "noisy" and boston.iterations == 10000
    assert boston.seed == CONFIG["seed"]  # split s draws from seed + s
    assert not run_settings(CONFIG, "boston", method="svgp", M=100).pretrain  # method over data set
    power = run_settings(CONFIG, "power", method="gpnet", M=500, iterations=7, device=None)
    assert (power.beta0, power.xi, power.online_hyperparameters, power.iterations) == (0.01, 0.1, True, 7)
    assert power.device == "auto"  # None from the command line keeps the config's


def test_box_moves_to_standardized_inputs():
    settings = run_settings(CONFIG, "snelson", method="gpnet", M=5)
    config = settings.method_config(100, x_mean=np.array([3.0]), x_std=np.array([2.0]))
    assert config.box == ((-2.0,), (2.0,)) and config.M == 5 and config.n_train == 100
    batch = settings.method_config(100, x_mean=np.array([[3.0], [1.0]]), x_std=np.array([[2.0], [4.0]]))
    np.testing.assert_allclose(batch.box, [[[-2.0], [-0.5]], [[2.0], [1.5]]])  # (low, high), each [split, D]
