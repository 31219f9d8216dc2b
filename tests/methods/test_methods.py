"""Every registered method passes the same battery: loss, gradients, predictions, checkpoints."""

import copy
import re

import pytest
import torch

from gpstudy import numerics
from gpstudy.kernels import RBF
from gpstudy.likelihoods import GaussianLikelihood
from gpstudy.methods import METHODS, Method, MethodConfig, build_method
from gpstudy.optim import optimizer_step

DTYPE = numerics.DEFAULT_DTYPE
N, D, BATCH = 40, 2, 10
OPTIONS = {"hidden_units": 15, "measurement": "noisy"}  # for the methods that have these options
NAMES = sorted(METHODS)


@pytest.fixture(scope="module")
def data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(N, D, generator=generator, dtype=DTYPE)
    return x, torch.sin(2 * x[:, 0]) + 0.1 * torch.randn(N, generator=generator, dtype=DTYPE)


def make(method_config, name: str, data, seed: int = 0, n_train: int = N) -> Method:
    x, y = data
    config = method_config(name, 6, n_train, **{k: v for k, v in OPTIONS.items() if k in METHODS[name].options_schema})
    kernel, likelihood = RBF(D, lengthscale=[0.8, 1.2], variance=1.1), GaussianLikelihood(0.1)
    return build_method(name, x, y, kernel, likelihood, config, torch.Generator().manual_seed(seed))


def train(method: Method, data, steps: range, optimizer: torch.optim.Optimizer, generator) -> list[float]:
    """A minimal driver: one Adam step per iteration on consecutive batches."""
    x, y = data
    losses = []
    for step in steps:
        batch = slice((step * BATCH) % N, (step * BATCH) % N + BATCH)
        loss = optimizer_step(optimizer, lambda: method.loss(x[batch], y[batch], step, generator), generator,
                              method.natural_update)
        losses.append(loss.item())
    return losses


def test_every_method_is_registered_under_its_name_with_its_defaults_in_the_config(study_config):
    assert all(METHODS[name].name == name and re.fullmatch("[a-z][a-z0-9_]*", name) for name in METHODS)
    assert set(study_config["methods"]) == set(METHODS)  # config.yaml holds every method's options


def test_unknown_method_names_the_known_ones(data):
    with pytest.raises(ValueError, match="autogp, exact, fbnn, gpnet, odvgp, svgp"):
        build_method("vfe", *data, RBF(D), GaussianLikelihood(0.1), MethodConfig(M=6, n_train=N), torch.Generator())


def test_config_n_train_must_match_the_data(data, method_config):
    with pytest.raises(ValueError, match="n_train"):
        make(method_config, "exact", data, n_train=N + 1)


@pytest.mark.parametrize("name", NAMES)
def test_loss_is_a_finite_scalar_and_reaches_every_trainable_parameter(name, data, method_config):
    method = make(method_config, name, data)
    generator = torch.Generator().manual_seed(1)
    train(method, data, range(1, 3), torch.optim.Adam(method.parameters(), lr=0.01), generator)  # leave q = p
    method.zero_grad()
    x, y = data
    loss = method.loss(x[:BATCH], y[:BATCH], 3, generator)
    assert loss.shape == () and torch.isfinite(loss)
    loss.backward()
    trainable = [(key, p) for key, p in method.named_parameters() if p.requires_grad]
    assert trainable
    for key, parameter in trainable:
        assert parameter.grad is not None and torch.isfinite(parameter.grad).all(), key
        assert parameter.grad.abs().sum() > 0, key


@pytest.mark.parametrize("name", NAMES)
def test_predictions_have_the_right_shape_and_positive_variance(name, data, method_config):
    method = make(method_config, name, data)
    x_test = torch.linspace(-3, 3, 17, dtype=DTYPE).unsqueeze(-1).expand(17, D)
    mean, var = method.predict(x_test)
    assert mean.shape == (17,) and var.shape == (17,)
    assert (var > 0).all() and torch.isfinite(mean).all()
    latent_mean, latent_var = method.predict_f(x_test)
    torch.testing.assert_close(latent_mean, mean)
    torch.testing.assert_close(var - latent_var, method.likelihood.noise_variance.expand(17))


@pytest.mark.parametrize("name", NAMES)
def test_training_lowers_the_loss_on_a_fixed_batch(name, data, method_config):
    method = make(method_config, name, data)
    x, y = data
    optimizer = torch.optim.Adam(method.parameters(), lr=0.02)
    losses = []
    for step in range(1, 31):
        optimizer.zero_grad()
        loss = method.loss(x, y, step, torch.Generator().manual_seed(7))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("name", NAMES)
def test_loss_is_reproducible_from_the_generators(name, data, method_config):
    x, y = data
    first = make(method_config, name, data, seed=3).loss(x[:BATCH], y[:BATCH], 2, torch.Generator().manual_seed(4))
    again = make(method_config, name, data, seed=3).loss(x[:BATCH], y[:BATCH], 2, torch.Generator().manual_seed(4))
    assert torch.equal(first, again)


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_round_trip_resumes_bit_identically(name, data, method_config):
    method = make(method_config, name, data, seed=0)
    optimizer = torch.optim.Adam(method.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(11)
    train(method, data, range(1, 4), optimizer, generator)
    checkpoint = copy.deepcopy(
        {"method": method.state_dict(), "optimizer": optimizer.state_dict(), "rng": generator.get_state()}
    )
    uninterrupted = train(method, data, range(4, 6), optimizer, generator)

    resumed = make(method_config, name, data, seed=99)  # a different initialization, overwritten by the checkpoint
    resumed.load_state_dict(checkpoint["method"])
    x_test = torch.randn(9, D, generator=torch.Generator().manual_seed(5), dtype=DTYPE)
    resumed_optimizer = torch.optim.Adam(resumed.parameters(), lr=0.01)
    resumed_optimizer.load_state_dict(checkpoint["optimizer"])
    resumed_generator = torch.Generator()
    resumed_generator.set_state(checkpoint["rng"])
    assert train(resumed, data, range(4, 6), resumed_optimizer, resumed_generator) == uninterrupted
    for expected, got in zip(method.predict(x_test), resumed.predict(x_test)):
        assert torch.equal(expected, got)
