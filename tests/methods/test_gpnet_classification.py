"""Non-conjugate GPNet (section 3.2) with a softmax and the NTK network (section 5.3): the layouts,
L_t summed over classes against a hand computation, training through ``fit``, and the refusals."""

import copy
import math

import pytest
import torch
from torch.distributions import MultivariateNormal
from torch.distributions import kl_divergence as torch_kl

from gpstudy import numerics
from gpstudy.gaussian import tempered_prior
from gpstudy.kernels import RBF
from gpstudy.kernels.cnngp import CNNGP
from gpstudy.likelihoods import LIKELIHOODS, Bernoulli, GaussianLikelihood, Softmax
from gpstudy.linalg import add_jitter
from gpstudy.methods import FBNN, GPNet, Problem
from gpstudy.metrics import task_metrics
from gpstudy.training.fit import fit

DTYPE = numerics.DEFAULT_DTYPE
SHAPE = (1, 4, 4)  # tiny single-channel images
D, CLASSES, N, BATCH, M = 16, 3, 48, 8, 6
TINY_NTK = {
    "network": "ntk",
    "hidden_units": 8,
    "measurement": "train",
    "network_options": {"filters": [4, 4], "strides": [1, 2], "dense_units": 16},
}


def images(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Flat 4x4 images in [-1, 1] whose class (0, 1, 2) lights up a row (0, 1 or 2), with noise."""
    generator = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % CLASSES
    x = -torch.ones(n, *SHAPE[1:], dtype=DTYPE)
    x[torch.arange(n), y] = 1.0
    x = (x + 0.3 * torch.randn(x.shape, generator=generator, dtype=DTYPE)).clamp(-1, 1)
    return x.reshape(n, D), y.to(DTYPE)


@pytest.fixture(scope="module")
def data() -> tuple[torch.Tensor, torch.Tensor]:
    return images(N, seed=0)


def build(method_config, data, method=GPNet, likelihood=None, generators=None, **options):
    """GPNet (or FBNN) with a CNN-GP prior, the tiny NTK and a 3-class softmax."""
    x, y = data
    defaults = {**TINY_NTK, **({"objective": "elbo", "beta0": 0.5, "xi": 0.0} if method is GPNet else {})}
    config = method_config(method.name, M, x.shape[-2], **(defaults | options))
    kernel = CNNGP(D, image_shape=SHAPE, batch_shape=x.shape[:-2])
    likelihood = Softmax(CLASSES) if likelihood is None else likelihood
    return method(Problem(x, y, kernel, likelihood, generators or torch.Generator().manual_seed(0)), config)


def perturb(method) -> None:
    """Move the heads off their initialization, so that the classes differ and q_t differs from p."""
    generator = torch.Generator().manual_seed(9)
    with torch.no_grad():
        for parameter in [*method.network.mean.values(), *method.network.log_std.values()]:
            parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator, dtype=DTYPE))


def softmax_expectation(method, y, mean, var, generator) -> torch.Tensor:
    """sum_b log softmax(f_b)_y_b with one sample per point and class, f = mean + sqrt(var) eps, written
    out from per-class moments ``[C, n]``: eps ``[1, n, C]`` as the likelihood draws it."""
    eps = torch.randn((1, y.shape[-1], CLASSES), generator=generator, dtype=DTYPE)[0]
    f = mean.T + var.sqrt().T * eps  # [n, C]
    return f.log_softmax(-1)[torch.arange(y.shape[-1]), y.long()].sum()


def test_shapes_of_loss_and_predictions(data, method_config):
    method = build(method_config, data)
    x, y = data
    loss = method.loss(x[:BATCH], y[:BATCH], 1, torch.Generator().manual_seed(1))
    assert loss.shape == () and torch.isfinite(loss)
    mean, var = method.predict_f(x[:5])
    assert mean.shape == var.shape == (5, CLASSES) and (var > 0).all()
    network_mean, network_var = method.network.marginals(x[:5])
    assert network_mean.shape == (CLASSES, 5)
    torch.testing.assert_close(mean, network_mean.T)
    torch.testing.assert_close(var, network_var.T)


def test_a_batch_of_one_split_has_a_leading_split_dimension(data, method_config):
    x, y = data
    method = build(method_config, (x[None], y[None]), generators=[torch.Generator().manual_seed(0)])
    loss = method.loss(x[None, :BATCH], y[None, :BATCH], 1, [torch.Generator().manual_seed(1)])
    assert loss.shape == (1,) and torch.isfinite(loss)
    mean, var = method.predict_f(x[None, :5])
    assert mean.shape == var.shape == (1, 5, CLASSES)
    alone = build(method_config, data)  # the same draws and parameters: the same numbers
    torch.testing.assert_close(loss[0], alone.loss(x[:BATCH], y[:BATCH], 1, torch.Generator().manual_seed(1)))
    torch.testing.assert_close(mean[0], alone.predict_f(x[:5])[0])


def test_elbo_is_the_sum_over_classes_of_per_class_terms(data, method_config):
    """-L_t = -beta (N/n) sum_B E_q log softmax(f_b)_y + sum_c KL[q_c || p^beta q_t,c^(1-beta)] (eq. 8-9 per
    class, K_ZZ shared), and its gradient is that of the paper's L_t with beta KL[q_c || p] +
    (1 - beta) KL[q_c || q_t,c] summed over the classes."""
    method = build(method_config, data)
    perturb(method)
    frozen = copy.deepcopy(method.network).requires_grad_(False)
    x, y = data
    step, beta = 2, 0.5
    generator = torch.Generator().manual_seed(1)
    loss = method.loss(x[:BATCH], y[:BATCH], step, generator)
    loss.backward()
    gradients = [parameter.grad.clone() for parameter in method.network.parameters()]
    method.zero_grad()

    generator = torch.Generator().manual_seed(1)  # the same draws: X_M first, then the likelihood's eps
    inputs = method.measurement_set(x[:BATCH], generator)
    mean, cov = method.network.mean_and_covariance(inputs)  # [C, z], [C, z, z]
    assert mean.shape == (CLASSES, BATCH + M) and cov.shape == (CLASSES, BATCH + M, BATCH + M)
    with torch.no_grad():
        previous_mean, previous_cov = frozen.mean_and_covariance(inputs)
    prior_cov = add_jitter(method.kernel(inputs))  # [z, z], one for every class
    variance = cov.diagonal(dim1=-2, dim2=-1)
    expected = softmax_expectation(method, y[:BATCH], mean[:, :BATCH], variance[:, :BATCH], generator)
    tempered_kls, paper_kls = [], []
    prior = MultivariateNormal(torch.zeros(BATCH + M, dtype=DTYPE), prior_cov)
    for c in range(CLASSES):  # C single-class terms
        q = MultivariateNormal(mean[c], cov[c])
        tempered = MultivariateNormal(*tempered_prior(prior_cov, previous_mean[c], previous_cov[c], beta))
        tempered_kls.append(torch_kl(q, tempered))
        paper_kls.append(
            beta * torch_kl(q, prior) + (1 - beta) * torch_kl(q, MultivariateNormal(previous_mean[c], previous_cov[c]))
        )
    data_term = beta * N / BATCH * expected
    torch.testing.assert_close(loss, -(data_term - sum(tempered_kls)))
    (-(data_term - sum(paper_kls))).backward()
    for got, reference in zip(gradients, [parameter.grad for parameter in method.network.parameters()]):
        torch.testing.assert_close(got, reference)


def test_fbnn_sums_its_kl_over_classes(data, method_config):
    method = build(method_config, data, method=FBNN)
    perturb(method)
    x, y = data
    loss = method.loss(x[:BATCH], y[:BATCH], 1, torch.Generator().manual_seed(1))
    generator = torch.Generator().manual_seed(1)
    inputs = method.measurement_set(x[:BATCH], generator)
    mean, cov = method.network.mean_and_covariance(inputs)
    expected = softmax_expectation(
        method, y[:BATCH], mean[:, :BATCH], cov.diagonal(dim1=-2, dim2=-1)[:, :BATCH], generator
    )
    prior = MultivariateNormal(torch.zeros(BATCH + M, dtype=DTYPE), add_jitter(method.kernel(inputs)))
    kl = sum(torch_kl(MultivariateNormal(mean[c], cov[c]), prior) for c in range(CLASSES))
    torch.testing.assert_close(loss, -(expected - kl))
    assert method.predict_f(x[:5])[0].shape == (5, CLASSES)


def test_fit_lowers_the_loss_and_gives_finite_metrics(method_config):
    """40 Adam steps on the toy problem: the objective falls, the test metrics beat chance (3 classes)."""
    x, y = images(60, seed=0)
    x_test, y_test = images(30, seed=1)
    method = build(method_config, (x, y), beta0=0.1)

    def evaluate():
        return task_metrics(method.likelihood, *method.predict_f(x_test), y_test, 1.0, torch.Generator().manual_seed(3))

    curve, _ = fit(
        method,
        x,
        y,
        iterations=40,
        batch_size=BATCH,
        lr=0.01,
        generators=torch.Generator().manual_seed(2),
        evaluate=evaluate,
        eval_every=1,
    )

    def average(key: str, records: list[dict]) -> float:
        return sum(record[key] for record in records) / len(records)

    assert average("objective", curve[-10:]) < average("objective", curve[:10])
    assert all(math.isfinite(record[key]) for record in curve for key in ("objective", "error_rate", "test_ll"))
    assert curve[0]["test_ll"] == pytest.approx(math.log(1 / 3), abs=0.01)  # q starts near f = 0
    assert average("test_ll", curve[-10:]) > math.log(1 / 3) + 0.05
    assert average("error_rate", curve[-10:]) < 1 / 3  # chance: 2/3


def test_one_latent_ntk_has_no_class_dimension(data, method_config):
    x, y = data
    labels = (y > 0).to(DTYPE)
    method = build(method_config, (x, labels), likelihood=Bernoulli())
    assert method.loss(x[:BATCH], labels[:BATCH], 1, torch.Generator().manual_seed(1)).shape == ()
    assert method.predict_f(x[:5])[0].shape == (5,)


@pytest.mark.parametrize("several", [name for name, likelihood in LIKELIHOODS.items() if likelihood.several_latents])
def test_supported_likelihoods_follow_the_network_and_objective(study_config, several):
    options = dict(study_config["methods"]["gpnet"])
    assert several not in GPNet.supported_likelihoods(options | {"objective": "elbo"})  # rfe
    assert several in GPNet.supported_likelihoods(options | {"objective": "elbo", "network": "ntk"})
    assert GPNet.supported_likelihoods(options | {"objective": "conjugate", "network": "ntk"}) == ("gaussian",)
    assert several in FBNN.supported_likelihoods(options | {"network": "ntk"})
    assert several not in FBNN.supported_likelihoods(options)
    with pytest.raises(ValueError, match=f"network 'rfe' outputs one latent function, but likelihood '{several}'"):
        GPNet.check_options(options | {"objective": "elbo"}, several)


def test_refusals_name_the_network(data, method_config):
    x, y = data
    with pytest.raises(ValueError, match="network 'rfe' outputs one latent function, but the likelihood has 3"):
        GPNet(
            Problem(x, y, RBF(D), Softmax(CLASSES), torch.Generator().manual_seed(0)),
            method_config("gpnet", M, N, objective="elbo", hidden_units=5),
        )
    with pytest.raises(ValueError, match=r"network_options of network 'ntk', \$\.filters"):
        build(method_config, data, network_options={"filters": 4})
    with pytest.raises(ValueError, match="network_options of network 'rfe'.*'filters' was unexpected"):
        GPNet(
            Problem(x, y, RBF(D), GaussianLikelihood(0.1), torch.Generator().manual_seed(0)),
            method_config("gpnet", M, N, hidden_units=5, network_options={"filters": [4]}),
        )


def test_a_batch_of_several_splits_is_refused(data, method_config):
    x, y = data
    with pytest.raises(ValueError, match="not batched over splits; train one split per job"):
        build(
            method_config,
            (torch.stack([x, x]), torch.stack([y, y])),
            generators=[torch.Generator().manual_seed(s) for s in range(2)],
        )


def test_prediction_goes_in_chunks_of_the_networks_size(method_config, data, monkeypatch):
    """The NTK's trunk holds megabytes per image: ``predict`` passes at most the network's ``predict_chunk``
    images at a time (not the default's 4096), and the chunks give the whole's numbers."""
    from gpstudy.nets.ntk import NTK
    from gpstudy.training.run import predict

    method = build(method_config, data)
    perturb(method)
    assert method.predict_chunk == NTK.predict_chunk < numerics.PREDICT_CHUNK
    whole = method.predict_f(data[0])
    monkeypatch.setattr(method.network, "predict_chunk", 5)
    sizes, marginals = [], method.network.marginals
    monkeypatch.setattr(method.network, "marginals", lambda x: sizes.append(x.shape[-2]) or marginals(x))
    chunked = predict(method, data[0])
    assert sizes == [5] * (N // 5) + [N % 5]
    for a, b in zip(whole, chunked):
        torch.testing.assert_close(a, b)
