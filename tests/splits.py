"""Splits the training and provenance tests share: a small random regression split."""

import numpy as np

from gpstudy.data import Split


def small_split(seed: int = 0) -> Split:
    """8 training and 4 test points of 2 inputs, standard normal (``seed``), already standardized."""
    rng = np.random.default_rng(seed)
    return Split(
        x_train=rng.normal(size=(8, 2)),
        y_train=rng.normal(size=8),
        x_test=rng.normal(size=(4, 2)),
        y_test=rng.normal(size=4),
        x_mean=np.zeros(2),
        x_std=np.ones(2),
        y_mean=0.0,
        y_std=1.0,
    )
