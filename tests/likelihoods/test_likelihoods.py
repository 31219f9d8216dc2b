"""Every likelihood of ``LIKELIHOODS`` passes the same schema, shape, gradient, Jensen and batch checks."""

import jsonschema
import pytest
import torch

from gpstudy import numerics
from gpstudy.likelihoods import LIKELIHOODS, Likelihood, build_likelihood

DTYPE = numerics.DEFAULT_DTYPE
N = 5  # points per split
# Options under test. Monte Carlo likelihoods draw as many samples in training as in prediction, so
# that generators seeded alike give both the same samples and Jensen's inequality holds exactly.
OPTIONS = {
    "gaussian": {"noise_variance": 0.3},
    "bernoulli": {},
    "softmax": {"classes": 3, "num_samples": 50, "predictive_samples": 50},
    # enough nodes that the class probabilities sum to 1 at assert_close's float64 tolerance for these variances
    "robustmax": {"classes": 3, "quadrature_points": 100},
}
BATCH_SHAPES = [(), (2,)]


def inputs(likelihood: Likelihood, batch_shape: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    """Targets or labels ``[*batch, n]`` and latent moments ``[*batch, n(, C)]`` that fit the likelihood."""
    generator = torch.Generator().manual_seed(0)
    latent = (*batch_shape, N) + ((likelihood.latent_dim,) if likelihood.latent_dim > 1 else ())
    mean = torch.randn(latent, generator=generator, dtype=DTYPE)
    var = torch.rand(latent, generator=generator, dtype=DTYPE) + 0.1
    if likelihood.task == "regression":
        y = torch.randn((*batch_shape, N), generator=generator, dtype=DTYPE)
    else:
        y = torch.randint(2, (*batch_shape, N), generator=generator)  # 0 and 1 fit every classifier
    return y, mean, var


def generators(batch_shape: tuple[int, ...], seed: int = 1) -> torch.Generator | list[torch.Generator]:
    """One generator, or one per split seeded ``seed + s``."""
    if not batch_shape:
        return torch.Generator().manual_seed(seed)
    return [torch.Generator().manual_seed(seed + s) for s in range(batch_shape[0])]


def one_tensor(predictive: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Class probabilities as they are, predictive moments (mean, var) stacked along a last dimension."""
    return torch.stack(predictive, -1) if isinstance(predictive, tuple) else predictive


def test_every_likelihood_is_tested():
    assert OPTIONS.keys() == LIKELIHOODS.keys()


def test_an_unknown_name_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="unknown likelihood 'probit'; known likelihoods: bernoulli, gaussian"):
        build_likelihood("probit", {}, DTYPE, ())


@pytest.mark.parametrize("name", LIKELIHOODS)
def test_options_fit_the_schema(name):
    likelihood = LIKELIHOODS[name]
    assert likelihood.task in ("regression", "classification")
    jsonschema.Draft202012Validator.check_schema(likelihood.options_schema)
    jsonschema.validate(OPTIONS[name], likelihood.options_schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**OPTIONS[name], "unknown_option": 1}, likelihood.options_schema)


@pytest.mark.parametrize("name", LIKELIHOODS)
def test_the_declared_latents_are_the_built_ones(name):
    """``several_latents``, what validation reads, says what ``latent_dim`` is once built."""
    likelihood = build_likelihood(name, OPTIONS[name], DTYPE, ())
    assert LIKELIHOODS[name].several_latents == (likelihood.latent_dim > 1)


@pytest.mark.parametrize("batch_shape", BATCH_SHAPES)
@pytest.mark.parametrize("name", LIKELIHOODS)
def test_shapes(name, batch_shape):
    likelihood = build_likelihood(name, OPTIONS[name], DTYPE, batch_shape)
    y, mean, var = inputs(likelihood, batch_shape)
    values = (*batch_shape, N)
    assert likelihood.log_prob(y, mean).shape == values
    assert likelihood.expected_log_prob(y, mean, var, generators(batch_shape)).shape == values
    assert likelihood.log_predictive_density(y, mean, var, generators(batch_shape)).shape == values
    predictive = likelihood.predictive(mean, var, generators(batch_shape))
    if likelihood.task == "regression":
        assert [moment.shape for moment in predictive] == [values, values]
    else:
        assert predictive.shape == mean.shape  # P(y = 1) [*batch, n], or [*batch, n, C] probabilities
        assert ((predictive > 0) & (predictive < 1)).all()
        if likelihood.latent_dim > 1:
            torch.testing.assert_close(predictive.sum(-1), torch.ones(values, dtype=DTYPE))


@pytest.mark.parametrize("batch_shape", BATCH_SHAPES)
@pytest.mark.parametrize("name", LIKELIHOODS)
def test_gradients_wrt_mean_and_var_are_finite(name, batch_shape):
    likelihood = build_likelihood(name, OPTIONS[name], DTYPE, batch_shape)
    y, mean, var = inputs(likelihood, batch_shape)
    mean.requires_grad_(), var.requires_grad_()
    objective = (
        likelihood.expected_log_prob(y, mean, var, generators(batch_shape))
        + likelihood.log_predictive_density(y, mean, var, generators(batch_shape))
    ).sum()
    objective.backward()
    for grad in (mean.grad, var.grad):
        assert torch.isfinite(grad).all() and (grad != 0).any()


@pytest.mark.parametrize("batch_shape", BATCH_SHAPES)
@pytest.mark.parametrize("name", LIKELIHOODS)
def test_expected_log_prob_is_below_the_log_predictive_density(name, batch_shape):
    """Jensen: E log p(y | f) <= log E p(y | f), exactly for Monte Carlo on the same samples."""
    likelihood = build_likelihood(name, OPTIONS[name], DTYPE, batch_shape)
    y, mean, var = inputs(likelihood, batch_shape)
    expected = likelihood.expected_log_prob(y, mean, var, generators(batch_shape))
    predictive = likelihood.log_predictive_density(y, mean, var, generators(batch_shape))
    assert (expected < predictive + 1e-12).all()


@pytest.mark.parametrize("name", LIKELIHOODS)
def test_a_batch_of_splits_gives_each_split_its_own_numbers(name):
    """Split s of a batch (its own generator, seeded 1 + s) gets what it gets alone."""
    batched = build_likelihood(name, OPTIONS[name], DTYPE, (2,))
    alone = build_likelihood(name, OPTIONS[name], DTYPE, ())
    y, mean, var = inputs(batched, (2,))
    results = [
        batched.expected_log_prob(y, mean, var, generators((2,))),
        batched.log_predictive_density(y, mean, var, generators((2,))),
        one_tensor(batched.predictive(mean, var, generators((2,)))),
    ]
    for s in range(2):
        own = [
            alone.expected_log_prob(y[s], mean[s], var[s], generators((), 1 + s)),
            alone.log_predictive_density(y[s], mean[s], var[s], generators((), 1 + s)),
            one_tensor(alone.predictive(mean[s], var[s], generators((), 1 + s))),
        ]
        for result, expected in zip(results, own):
            torch.testing.assert_close(result[s], expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", [name for name in LIKELIHOODS if LIKELIHOODS[name].task == "classification"])
def test_a_label_outside_the_classes_makes_nan_not_a_number_read_past_the_class_axis(name):
    """softmax with classes 2 on labels 0, 1, 2 read past the class axis (take_along_dim has no bounds check on
    the CPU) and trained to a better test log-likelihood than the right 3-class model's."""
    likelihood = build_likelihood(name, OPTIONS[name], DTYPE)
    classes = OPTIONS[name].get("classes", 2)
    y, mean, var = inputs(likelihood, ())
    y = y.to(DTYPE)
    y[1], y[3] = classes, -1  # one past the last class, and a -1 of -1/1 labels
    y[4] = 0.5 if name == "bernoulli" else 1.5  # no label at all
    f = mean + var.sqrt()
    for value in (
        likelihood.log_prob(y, f),
        likelihood.expected_log_prob(y, mean, var, generators(())),
        likelihood.log_predictive_density(y, mean, var, generators(())),
    ):
        assert torch.isfinite(value[[0, 2]]).all() and torch.isnan(value[[1, 3, 4]]).all(), value
