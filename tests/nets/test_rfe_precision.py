"""Mixed precision (``training.dtype: mixed``): the RFE network's feature products in float32, the rest
float64; GPNet and FBNN trained for 200 steps on real UCI rows give float64's metrics to 1e-3."""

import numpy as np
import pytest
import torch

from gpstudy.methods import METHODS, Problem, build_method
from gpstudy.methods.base import InferenceNetworkMethod
from gpstudy.metrics import task_metrics
from gpstudy.nets import RFE
from gpstudy.training import fit
from gpstudy.training.run import predict

DATASETS = ("boston", "concrete", "energy")
N_TRAIN, N_TEST = 200, 100  # rows of split 0, so that 200 steps take a second or two
SMALL = {"hidden_units": 50, "batch_size": 50, "iterations": 200}  # F = 100 features, Z = 50 + M points
M, TOLERANCE = 20, 1e-3  # relative, on test RMSE and test log-likelihood


def uci_rows(shared_data, name: str) -> tuple[torch.Tensor, ...]:
    """The first N_TRAIN training and N_TEST test rows of split 0, standardized by the training rows."""
    folder = shared_data / name
    data = np.loadtxt(folder / "data.txt")
    features = np.loadtxt(folder / "index_features.txt", dtype=int)
    target = int(np.loadtxt(folder / "index_target.txt"))
    train = np.loadtxt(folder / "index_train_0.txt", dtype=int)[:N_TRAIN]
    test = np.loadtxt(folder / "index_test_0.txt", dtype=int)[:N_TEST]
    x, y = data[:, features], data[:, target]
    x_mean, x_std = x[train].mean(0), x[train].std(0) + 1e-12  # energy has near-constant columns
    y_mean, y_std = y[train].mean(), y[train].std()
    x, y = (x - x_mean) / x_std, (y - y_mean) / y_std
    as_tensor = lambda a: torch.as_tensor(a, dtype=torch.float64)  # noqa: E731
    return as_tensor(x[train]), as_tensor(y[train]), as_tensor(x[test]), as_tensor(y[test]), y_std


def train_and_evaluate(settings_for, method: str, dtype: str, rows) -> dict[str, float]:
    """``method`` trained SMALL['iterations'] steps in ``dtype`` as a run does; its test metrics."""
    x, y, x_test, y_test, y_std = rows
    settings = settings_for(method, M, dtype=dtype, **SMALL)
    kernel, likelihood = settings.build_kernel(x.shape[-1]), settings.build_likelihood()
    generator = torch.Generator().manual_seed(0)
    model = build_method(method, Problem(x, y, kernel, likelihood, generator), settings.method_config(x.shape[-2]))
    fit(model, x, y, iterations=settings.iterations, batch_size=settings.batch_size, lr=settings.lr,
        generators=generator, evaluate=dict, eval_every=10**9)
    with torch.no_grad():
        metrics = task_metrics(likelihood, *predict(model, x_test), y_test, y_std)
    return {name: value.item() for name, value in metrics.items()}


def test_mixed_settings_reach_the_network(settings_for):
    """One flag: training.dtype mixed -> float64 data and parameters, a float32 network's products."""
    settings = settings_for("fbnn", M, dtype="mixed", hidden_units=5)
    assert settings.torch_dtype() == torch.float64 and settings.feature_dtype() == torch.float32
    kernel, likelihood = settings.build_kernel(2), settings.build_likelihood()
    x = torch.randn(30, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    model = build_method("fbnn", Problem(x, x.sum(-1), kernel, likelihood, torch.Generator()),
                         settings.method_config(30))
    assert model.network.feature_dtype == torch.float32
    assert settings_for("fbnn", M).method_config(30).feature_dtype == torch.float64  # float64 by default


def test_mixed_network_computes_in_float32_and_returns_float64(settings_for):
    """The outputs and gradients are float64, equal to float64's to float32 precision but not exactly."""
    settings = settings_for("fbnn", M, hidden_units=20)
    x = torch.randn(15, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    networks = {}
    for dtype in (None, torch.float32):
        networks[dtype] = RFE.build(settings.build_kernel(2), torch.Generator().manual_seed(1), latent_dim=1,
                                    hidden_units=20, live_variance=False, options={}, feature_dtype=dtype)
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


def test_mixed_fbnn_gradient_is_float64_s_to_float32_rounding(shared_data, settings_for):
    """FBNN's first gradient on real rows, where S_q^-1 (small eigenvalues near the jitter) amplifies any
    float32 rounding after the Gram: seen 5e-7 relative; jitter added before the cast back gives 8e-5."""
    x, y = uci_rows(shared_data, "boston")[:2]
    gradients = []
    for dtype in ("float64", "mixed"):
        settings = settings_for("fbnn", M, dtype=dtype, **SMALL)
        problem = Problem(x, y, settings.build_kernel(x.shape[-1]), settings.build_likelihood(),
                          torch.Generator().manual_seed(0))
        model = build_method("fbnn", problem, settings.method_config(x.shape[-2]))
        model.loss(x[:50], y[:50], 1, torch.Generator().manual_seed(3)).backward()
        gradients.append(torch.cat([parameter.grad.flatten() for parameter in model.network.parameters()]))
    exact, mixed = gradients
    assert (mixed - exact).norm() <= 1e-5 * exact.norm()


@pytest.mark.parametrize("method", [name for name, method in METHODS.items() if issubclass(method, InferenceNetworkMethod)])
@pytest.mark.parametrize("dataset", DATASETS)
def test_mixed_precision_gives_float64_metrics(shared_data, settings_for, method, dataset):
    rows = uci_rows(shared_data, dataset)
    exact = train_and_evaluate(settings_for, method, "float64", rows)
    mixed = train_and_evaluate(settings_for, method, "mixed", rows)
    for name, value in exact.items():
        assert abs(mixed[name] - value) <= TOLERANCE * abs(value), (name, value, mixed[name])
