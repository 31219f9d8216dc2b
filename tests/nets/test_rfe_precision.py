"""Mixed precision (``training.dtype: mixed``): the RFE network's feature products in float32, the rest
(its Gram too) float64; at Snelson's sizes and a UCI size GPNet's and FBNN's loss, KL and gradient are
float64's to 1e-4 and 1e-3; trained for 200 steps on real UCI rows they give float64's metrics to 1e-3, and
GPNet trained 500 steps on Snelson to 1e-4. The NTK network's trunk, head and factor in float32 give its
outputs, and GPNet's step on MNIST images, to the RFE's tolerances."""

import numpy as np
import pytest
import torch

from gpstudy.data import Split, get_dataset, make_split, read_table, split_rows
from gpstudy.kernels.cnngp import CNNGP
from gpstudy.methods import METHODS, Problem, build_method
from gpstudy.methods.base import InferenceNetworkMethod, function_space_kl
from gpstudy.metrics import task_metrics
from gpstudy.nets import NTK, RFE
from gpstudy.numerics import DTYPES
from gpstudy.study import run_settings
from gpstudy.training import fit
from gpstudy.training.pretrain import pretrain_hyperparameters
from gpstudy.training.run import initial_kernel, initial_likelihood, method_config, predict

DATASETS = ("boston", "concrete", "energy")
N_TRAIN, N_TEST = 200, 100  # rows of split 0, so that 200 steps take a second or two
SMALL = {"hidden_units": 50, "batch_size": 50, "iterations": 200}  # F = 100 features, Z = 50 + M points
M, TOLERANCE = 20, 1e-3  # relative, on test RMSE and test log-likelihood
LOSS_TOLERANCE = 1e-4  # relative, on one batch's loss and KL (seen: 7e-6; a float32 Gram: up to 1.3 at Snelson's)
GRADIENT_TOLERANCE = 1e-3  # relative (norm), on its gradient (seen: 5e-5; a float32 Gram: up to 0.76)
SNELSON_STEPS = 500  # a short Snelson run of GPNet at Snelson's largest M ...
SNELSON_TOLERANCE = 1e-4  # ... gives float64's test metrics to this (seen: 4e-6; a float32 Gram: 1e-3 to 2e-3)
UCI_M = 100  # a UCI size: M = 100, B = 500, H = 1000 (config.yaml's training), D = 8 (kin8nm)


def uci_rows(shared_data, name: str, n_train: int = N_TRAIN) -> tuple[torch.Tensor, ...]:
    """The first ``n_train`` training and N_TEST test rows of split 0, standardized by the training rows."""
    folder = shared_data / name
    data = np.loadtxt(folder / "data.txt")
    features = np.loadtxt(folder / "index_features.txt", dtype=int)
    target = int(np.loadtxt(folder / "index_target.txt"))
    train = np.loadtxt(folder / "index_train_0.txt", dtype=int)[:n_train]
    test = np.loadtxt(folder / "index_test_0.txt", dtype=int)[:N_TEST]
    x, y = data[:, features], data[:, target]
    x_mean, x_std = x[train].mean(0), x[train].std(0) + 1e-12  # energy has near-constant columns
    y_mean, y_std = y[train].mean(), y[train].std()
    x, y = (x - x_mean) / x_std, (y - y_mean) / y_std
    as_tensor = lambda a: torch.as_tensor(a, dtype=torch.float64)  # noqa: E731
    return as_tensor(x[train]), as_tensor(y[train]), as_tensor(x[test]), as_tensor(y[test]), y_std


def snelson_split(study_config, shared_data) -> Split:
    """Snelson's split as the study makes it (config.yaml's seed and train_size), standardized."""
    table = read_table(get_dataset("snelson"), "random", shared_data / "snelson")
    train, test = split_rows(
        table,
        "random",
        0,
        seed=study_config["seed"],
        train_size=study_config["dataset_options"]["snelson"]["train_size"],
    )
    return make_split(table, train, test, standardize=True, info={"dataset": "snelson"})


def network_method(
    settings, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator, split: Split | None = None
) -> InferenceNetworkMethod:
    """``settings.method`` on ``x``, ``y`` as a run builds it: hyperparameters pretrained where the settings
    say so, a box c(x) standardized by ``split``'s statistics."""
    kernel, likelihood = initial_kernel(settings, x.shape[-1]), initial_likelihood(settings)
    if settings.pretrain:
        pretrain_hyperparameters(
            x,
            y,
            kernel,
            likelihood,
            subset_size=settings.pretrain_subset,
            iterations=settings.pretrain_iterations,
            lr=settings.pretrain_lr,
            generators=generator,
        )
    statistics = (split.x_mean, split.x_std) if split is not None else ()
    return build_method(
        settings.method, Problem(x, y, kernel, likelihood, generator), method_config(settings, x.shape[-2], *statistics)
    )


def train_and_evaluate(settings, rows, split: Split | None = None) -> dict[str, float]:
    """``settings.method`` trained ``settings.iterations`` steps as a run does; its test metrics."""
    x, y, x_test, y_test, y_std = rows
    generator = torch.Generator().manual_seed(0)
    model = network_method(settings, x, y, generator, split)
    fit(
        model,
        x,
        y,
        iterations=settings.iterations,
        batch_size=settings.batch_size,
        lr=settings.lr,
        generators=generator,
        evaluate=dict,
        eval_every=10**9,
    )
    with torch.no_grad():
        metrics = task_metrics(model.likelihood, *predict(model, x_test), y_test, y_std)
    return {name: value.item() for name, value in metrics.items()}


def test_mixed_settings_reach_the_network(settings_for):
    """One flag: training.dtype mixed -> float64 data and parameters, a float32 network's products."""
    settings = settings_for("fbnn", M, dtype="mixed", hidden_units=5)
    assert DTYPES[settings.dtype] == (torch.float64, torch.float32)
    kernel, likelihood = initial_kernel(settings, 2), initial_likelihood(settings)
    x = torch.randn(30, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    model = build_method(
        "fbnn", Problem(x, x.sum(-1), kernel, likelihood, torch.Generator()), method_config(settings, 30)
    )
    assert model.network.feature_dtype == torch.float32
    assert method_config(settings_for("fbnn", M), 30).feature_dtype == torch.float64  # float64 by default


def test_mixed_network_computes_in_float32_and_returns_float64(settings_for):
    """The outputs and gradients are float64, equal to float64's to float32 precision but not exactly."""
    settings = settings_for("fbnn", M, hidden_units=20)
    x = torch.randn(15, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    networks = {}
    for dtype in (None, torch.float32):
        networks[dtype] = RFE.build(
            initial_kernel(settings, 2),
            torch.Generator().manual_seed(1),
            latent_dim=1,
            hidden_units=20,
            live_variance=False,
            options={},
            feature_dtype=dtype,
        )
    outputs = {dtype: network.mean_and_covariance(x) for dtype, network in networks.items()}
    for exact, mixed in zip(outputs[None], outputs[torch.float32]):
        assert mixed.dtype == torch.float64
        torch.testing.assert_close(mixed, exact, rtol=1e-5, atol=1e-6)
        assert not torch.equal(mixed, exact)  # float32 really was used
    for dtype, (mean, cov) in outputs.items():
        (mean.sum() + cov.sum()).backward()
    for exact, mixed in zip(networks[None].parameters(), networks[torch.float32].parameters()):
        assert mixed.grad.dtype == torch.float64
        torch.testing.assert_close(mixed.grad, exact.grad, rtol=1e-4, atol=1e-5)


def test_mixed_ntk_computes_in_float32_and_returns_float64():
    """The NTK's trunk (the paper's six residual blocks, narrower), heads and factor J sigma in float32 under
    ``mixed``: outputs and gradients float64 and float64's to the RFE's tolerances, but not exactly."""
    shape, generator = (1, 12, 12), torch.Generator().manual_seed(0)
    x = torch.rand(6, 144, dtype=torch.float64, generator=generator) * 2 - 1  # pixels in [-1, 1], as MNIST's
    networks = {
        dtype: NTK.build(
            CNNGP(144, image_shape=shape),
            torch.Generator().manual_seed(1),
            latent_dim=3,
            hidden_units=8,
            live_variance=False,
            feature_dtype=dtype,
            options={"filters": [4, 4, 8, 8, 8, 8], "dense_units": 16},
        )
        for dtype in (None, torch.float32)
    }
    assert networks[torch.float32].features(x).dtype == torch.float32
    outputs = {dtype: (*network.mean_and_covariance(x), network.marginals(x)[1]) for dtype, network in networks.items()}
    for exact, mixed in zip(outputs[None], outputs[torch.float32]):
        assert mixed.dtype == torch.float64
        torch.testing.assert_close(mixed, exact, rtol=1e-5, atol=1e-6)
        assert not torch.equal(mixed, exact)  # float32 really was used
    for mean, cov, variance in outputs.values():
        (mean.sum() + cov.sum() + variance.sum()).backward()
    for (name, exact), mixed in zip(networks[None].named_parameters(), networks[torch.float32].parameters()):
        assert mixed.grad.dtype == torch.float64
        torch.testing.assert_close(mixed.grad, exact.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_mixed_ntk_step_is_float64_s_on_mnist_images(shared_data, study_config):
    """GPNet with the NTK and a softmax as the study trains MNIST (CNN-GP prior, ELBO objective, measurement
    points from the training images), with a narrower trunk and fewer points: loss, KL and gradient within
    the RFE's step tolerances."""
    table = read_table(get_dataset("mnist"), "given", shared_data / "mnist")
    x, y = (torch.as_tensor(values[:64], dtype=torch.float64) for values in (table.x, table.y))
    settings = run_settings(
        study_config,
        "mnist",
        method="gpnet",
        M=8,
        batch_size=16,
        dtype="mixed",
        hidden_units=8,
        network_options={"filters": [4, 4, 8, 8, 8, 8], "dense_units": 16},
    )
    model = network_method(settings, x, y, torch.Generator().manual_seed(0))
    assert model.network.feature_dtype == torch.float32 and isinstance(model.network, NTK)
    for batch in range(2):
        assert_within_tolerance(step_errors(model, x, y, settings.batch_size, batch), f"batch {batch}")


def test_mixed_fbnn_gradient_is_float64_s_to_float32_rounding(shared_data, settings_for):
    """FBNN's first gradient on real rows, where S_q^-1 (small eigenvalues near the jitter) amplifies any
    float32 rounding after the Gram: seen 5e-7 relative; jitter added before the cast back gives 8e-5."""
    x, y = uci_rows(shared_data, "boston")[:2]
    gradients = []
    for dtype in ("float64", "mixed"):
        settings = settings_for("fbnn", M, dtype=dtype, **SMALL)
        problem = Problem(
            x, y, initial_kernel(settings, x.shape[-1]), initial_likelihood(settings), torch.Generator().manual_seed(0)
        )
        model = build_method("fbnn", problem, method_config(settings, x.shape[-2]))
        model.loss(x[:50], y[:50], 1, torch.Generator().manual_seed(3)).backward()
        gradients.append(torch.cat([parameter.grad.flatten() for parameter in model.network.parameters()]))
    exact, mixed = gradients
    assert (mixed - exact).norm() <= 1e-5 * exact.norm()


@pytest.mark.parametrize(
    "method", [name for name, method in METHODS.items() if issubclass(method, InferenceNetworkMethod)]
)
@pytest.mark.parametrize("dataset", DATASETS)
def test_mixed_precision_gives_float64_metrics(shared_data, settings_for, method, dataset):
    rows = uci_rows(shared_data, dataset)
    exact, mixed = (
        train_and_evaluate(settings_for(method, M, dtype=dtype, **SMALL), rows) for dtype in ("float64", "mixed")
    )
    for name, value in exact.items():
        assert abs(mixed[name] - value) <= TOLERANCE * abs(value), (name, value, mixed[name])


def step_errors(
    model: InferenceNetworkMethod, x: torch.Tensor, y: torch.Tensor, batch_size: int, batch: int
) -> dict[str, float]:
    """Relative errors of mixed against float64 (the same parameters, batch and draws): the loss, the
    network's KL[q(f_Z) || p(f_Z)] (the largest of several latents') and the gradient (norm) of every parameter,
    on minibatch ``batch``."""
    rows = torch.randperm(x.shape[-2], generator=torch.Generator().manual_seed(batch))[:batch_size]
    results = {}
    for dtype in (torch.float64, torch.float32):
        model.network.feature_dtype = dtype
        model.zero_grad()
        loss = model.loss(x[rows], y[rows], 1, torch.Generator().manual_seed(batch))
        loss.backward()
        gradient = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        with torch.no_grad():
            inputs = model.measurement_set(x[rows], torch.Generator().manual_seed(batch))
            mean, cov = model.network.mean_and_covariance(inputs)
            kl = function_space_kl(mean, cov, torch.zeros_like(mean), model.prior_covariance(inputs), 1)
        results[dtype] = loss.detach(), kl, gradient
    (loss, kl, gradient), (mixed_loss, mixed_kl, mixed_gradient) = results.values()
    return {
        "loss": ((mixed_loss - loss).abs() / loss.abs()).item(),
        "kl": ((mixed_kl - kl).abs() / kl.abs()).max().item(),
        "gradient": ((mixed_gradient - gradient).norm() / gradient.norm()).item(),
    }


def assert_within_tolerance(errors: dict[str, float], where: str) -> None:
    assert errors["loss"] <= LOSS_TOLERANCE and errors["kl"] <= LOSS_TOLERANCE, (where, errors)
    assert errors["gradient"] <= GRADIENT_TOLERANCE, (where, errors)


@pytest.mark.parametrize("method", ["gpnet", "fbnn"])
def test_mixed_step_is_float64_s_at_snelson_sizes(shared_data, study_config, method):
    """Snelson as the study trains it (100 points, B = 20, H = 20, box c(x), pretrained hyperparameters) at
    each M: there F F^T is nearly singular, and a Gram formed in float32 went indefinite beyond the jitter
    in up to 20 of 20 batches, its KL up to 1.3x off."""
    split = snelson_split(study_config, shared_data)
    x, y = torch.as_tensor(split.x_train), torch.as_tensor(split.y_train)
    for M in study_config["experiments"]["snelson"]["methods"][method]:
        settings = run_settings(study_config, "snelson", method=method, M=M, dtype="mixed")
        model = network_method(settings, x, y, torch.Generator().manual_seed(0), split)
        for batch in range(5):
            assert_within_tolerance(step_errors(model, x, y, settings.batch_size, batch), f"M = {M}, batch {batch}")


@pytest.mark.parametrize("method", ["gpnet", "fbnn"])
def test_mixed_step_is_float64_s_at_a_uci_size(shared_data, settings_for, method):
    """kin8nm's rows at M = 100, B = 500, H = 1000 (config.yaml's training), the prior at its start: a Gram far
    from singular, where float32's was good too (seen 3e-6)."""
    settings = settings_for(method, UCI_M, dtype="mixed")
    x, y = uci_rows(shared_data, "kin8nm", settings.batch_size)[:2]
    assert settings.options["hidden_units"] == 1000 and x.shape == (settings.batch_size, 8)  # the sizes claimed
    model = network_method(settings, x, y, torch.Generator().manual_seed(0))
    assert_within_tolerance(step_errors(model, x, y, settings.batch_size, 0), "kin8nm")


def test_mixed_precision_gives_float64_metrics_on_snelson(shared_data, study_config):
    """GPNet on Snelson as the study trains it, at its largest M, SNELSON_STEPS steps: mixed's test RMSE and
    log-likelihood are float64's (a float32 Gram: 2e-3 off in test LL after 500 steps, 1.4e-2 after 2000)."""
    split = snelson_split(study_config, shared_data)
    rows = (*(torch.as_tensor(a) for a in (split.x_train, split.y_train, split.x_test, split.y_test)), split.y_std)
    M = max(study_config["experiments"]["snelson"]["methods"]["gpnet"])
    exact, mixed = (
        train_and_evaluate(
            run_settings(study_config, "snelson", method="gpnet", M=M, dtype=dtype, iterations=SNELSON_STEPS),
            rows,
            split,
        )
        for dtype in ("float64", "mixed")
    )
    for name, value in exact.items():
        assert abs(mixed[name] - value) <= SNELSON_TOLERANCE * abs(value), (name, value, mixed[name])
