"""The measurement samplers c(x): support, distribution, reproducibility and state."""

import math

import pytest
import torch

from gpstudy import numerics
from gpstudy.methods.measurement import SAMPLERS, build_measurement_sampler

DTYPE = numerics.DEFAULT_DTYPE
NOISE_STD = torch.tensor([0.5, 2.0], dtype=DTYPE)
BOX = ((-1.0, 0.0), (1.0, 4.0))


@pytest.fixture
def x_train() -> torch.Tensor:
    return torch.randn(50, 2, generator=torch.Generator().manual_seed(0), dtype=DTYPE)


def test_train_draws_distinct_training_inputs(x_train):
    sampler = build_measurement_sampler("train", x_train, NOISE_STD)
    points = sampler(20, torch.Generator().manual_seed(1))
    assert points.shape == (20, 2)
    matches = (points.unsqueeze(1) == x_train.unsqueeze(0)).all(-1)  # [20, 50]
    assert (matches.sum(-1) == 1).all() and (matches.sum(0) <= 1).all()


def test_train_with_more_points_than_data_gives_all_training_inputs(x_train):
    points = build_measurement_sampler("train", x_train, NOISE_STD)(80, torch.Generator().manual_seed(1))
    assert points.shape == (50, 2)
    torch.testing.assert_close(points[torch.argsort(points[:, 0])], x_train[torch.argsort(x_train[:, 0])])


def test_noisy_adds_gaussian_noise_of_the_given_std():
    x_train = torch.zeros(4000, 2, dtype=DTYPE)  # the draws are then the noise itself
    sampler = build_measurement_sampler("noisy", x_train, NOISE_STD)
    noise = sampler(4000, torch.Generator().manual_seed(1))
    torch.testing.assert_close(noise.std(0), NOISE_STD, rtol=0.05, atol=0)
    assert noise.mean(0).abs().max() < 0.1


def test_box_is_uniform_on_the_box(x_train):
    sampler = build_measurement_sampler("box", x_train, NOISE_STD, box=BOX)
    points = sampler(4000, torch.Generator().manual_seed(1))
    low, high = (torch.tensor(corner, dtype=DTYPE) for corner in BOX)
    assert points.shape == (4000, 2) and (points >= low).all() and (points <= high).all()
    torch.testing.assert_close(points.mean(0), (low + high) / 2, rtol=0, atol=0.05 * (high - low).max().item())
    torch.testing.assert_close(points.std(0), (high - low) / math.sqrt(12), rtol=0.05, atol=0)


def test_box_needs_a_box_and_unknown_names_are_refused(x_train):
    with pytest.raises(ValueError, match="box"):
        build_measurement_sampler("box", x_train, NOISE_STD)
    with pytest.raises(ValueError, match="noisy"):
        build_measurement_sampler("uniform", x_train, NOISE_STD)


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_draws_are_reproducible_from_the_generator(name, x_train):
    sampler = build_measurement_sampler(name, x_train, NOISE_STD, box=BOX)
    first = sampler(10, torch.Generator().manual_seed(5))
    assert torch.equal(first, sampler(10, torch.Generator().manual_seed(5)))
    assert not torch.equal(first, sampler(10, torch.Generator().manual_seed(6)))


def test_state_holds_the_fixed_lengthscales_but_not_the_data(x_train):
    state = build_measurement_sampler("noisy", x_train, NOISE_STD).state_dict()
    assert set(state) == {"noise_std"}
