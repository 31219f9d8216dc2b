"""Every registered method passes the same battery: loss, gradients, predictions, checkpoints."""

import copy
import itertools
import re

import pytest
import torch

from gpstudy import numerics
from gpstudy.kernels import KERNELS, RBF, build_kernel
from gpstudy.likelihoods import LIKELIHOODS, Bernoulli, GaussianLikelihood, build_likelihood
from gpstudy.methods import METHODS, Method, MethodConfig, Problem, build_method, pairing_problems
from gpstudy.training.optim import optimizer_step

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
    return build_method(name, Problem(x, y, kernel, likelihood, torch.Generator().manual_seed(seed)), config)


def train(method: Method, data, steps: range, optimizer: torch.optim.Optimizer, generator) -> list[float]:
    """A minimal driver: one Adam step per iteration on consecutive batches."""
    x, y = data
    losses = []
    for step in steps:
        batch = slice((step * BATCH) % N, (step * BATCH) % N + BATCH)
        loss = optimizer_step(
            optimizer, lambda: method.loss(x[batch], y[batch], step, generator), generator, method.natural_update
        )
        losses.append(loss.item())
    return losses


def test_every_method_is_registered_under_its_name_with_its_defaults_in_the_config(study_config):
    assert all(METHODS[name].name == name and re.fullmatch("[a-z][a-z0-9_]*", name) for name in METHODS)
    assert set(study_config["methods"]) == set(METHODS)  # config.yaml holds every method's options


def test_every_method_declares_a_display_name_of_its_own():
    """Its own, not a base class's: a subclass of SVGP inheriting "SVGP" would take SVGP's name in the tables."""
    names = [vars(method).get("display_name") for method in METHODS.values()]
    assert all(isinstance(name, str) and name.strip() for name in names), dict(zip(METHODS, names))
    assert len(set(names)) == len(names), names


def test_unknown_method_names_the_known_ones(data):
    with pytest.raises(ValueError, match=", ".join(NAMES)):
        build_method(
            "vfe", Problem(*data, RBF(D), GaussianLikelihood(0.1), torch.Generator()), MethodConfig(M=6, n_train=N)
        )


PAIRED_KERNELS = [*((name, {}) for name in KERNELS), ("arccos", {"depth": 2})]  # each kernel, one without features
TINY_NETWORKS = {"ntk": {"filters": [2], "strides": [1], "dense_units": 3}}  # network_options that build fast


def option_choices(name: str) -> list[dict]:
    """The method's choices that change what it can pair with: each network and objective it has."""
    schema = METHODS[name].options_schema
    choices = {key: schema[key]["enum"] for key in ("network", "objective") if key in schema}
    return [dict(zip(choices, values)) for values in itertools.product(*choices.values())]


@pytest.mark.parametrize("name", NAMES)
def test_declared_pairings_are_what_building_does(name, settings_for):
    """Over every kernel, likelihood and network of the registries: where ``pairing_problems`` (what
    validation asks of every job) finds nothing, the method builds; where the method declares that it
    cannot use the kernel, building fails, and the declaration names the kernel and the network."""
    x = torch.randn(12, 4, generator=torch.Generator().manual_seed(0), dtype=DTYPE)
    fitted, refused = 0, 0
    for choice, (kernel, kernel_options), likelihood in itertools.product(
        option_choices(name), PAIRED_KERNELS, LIKELIHOODS
    ):
        network = (
            {"hidden_units": 4, "measurement": "train", "network_options": TINY_NETWORKS.get(choice["network"], {})}
            if "network" in choice
            else {}
        )
        options = settings_for(name, 3, **choice, **network).options
        likelihood_options = {"classes": 3} if "classes" in LIKELIHOODS[likelihood].options_schema["properties"] else {}
        built_likelihood = build_likelihood(likelihood, likelihood_options)
        y = torch.arange(12).remainder(2).to(DTYPE) if built_likelihood.task == "classification" else x[:, 0]
        problem = Problem(x, y, build_kernel(kernel, 4, kernel_options), built_likelihood, torch.Generator())
        problems = pairing_problems(name, options, kernel, kernel_options, likelihood)
        kernel_problems = METHODS[name].kernel_problems(options, kernel, kernel_options)
        if not problems:
            build_method(name, problem, MethodConfig(M=3, n_train=12, options=options))
            fitted += 1
        if kernel_problems:
            assert all(repr(kernel) in text and repr(choice["network"]) in text for text in kernel_problems)
            with pytest.raises(ValueError):
                build_method(name, problem, MethodConfig(M=3, n_train=12, options=options))
            refused += 1
    assert fitted > 0 and (refused > 0) == ("network" in METHODS[name].options_schema)  # rfe: cnngp; ntk: rbf


def test_methods_that_need_the_gaussian_likelihood_say_so(data, method_config):
    x, y = data
    for name, changes in (("exact", {}), ("gpnet", {"objective": "conjugate"})):
        with pytest.raises(ValueError, match=f"method '{name}'.* needs the gaussian likelihood .*not Bernoulli"):
            build_method(
                name,
                Problem(x, (y > 0).to(DTYPE), RBF(D), Bernoulli(), torch.Generator()),
                method_config(name, 6, N, **changes),
            )


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
