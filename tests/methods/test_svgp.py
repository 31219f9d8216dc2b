"""SVGP: k-means and training-point initialization, the starting q, exactness with Z = X and the optimal q,
several latents (softmax) as independent per-class q sharing Z, and the factor of a fixed K_ZZ (kept, and checked
where it is first made inside a step's deferred checks and fails)."""

import logging
import math

import pytest
import torch

from gpstudy import numerics
from gpstudy.kernels import RBF
from gpstudy.likelihoods import GaussianLikelihood, Likelihood, RobustMax, Softmax
from gpstudy.linalg import add_jitter, blocked, cholesky, deferred_factor_checks, inverse_positive
from gpstudy.methods import SVGP, ExactGP, Problem
from gpstudy.methods import svgp as svgp_module
from gpstudy.methods.exact_gp import log_marginal_likelihood
from gpstudy.methods.inducing import kmeans_centres, training_points
from gpstudy.methods.svgp import sums_variances
from gpstudy.metrics import task_metrics
from gpstudy.training.fit import fit
from gpstudy.training.optim import adam, optimizer_step

DTYPE = numerics.DEFAULT_DTYPE
N = 20


@pytest.fixture
def data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = 8 * torch.rand(N, 1, generator=generator, dtype=DTYPE) - 4
    return x, torch.sin(3 * x[:, 0]) + 0.1 * torch.randn(N, generator=generator, dtype=DTYPE)


def build(method_config, x: torch.Tensor, y: torch.Tensor, num_inducing: int, seed: int = 0) -> SVGP:
    kernel, likelihood = RBF(1, lengthscale=0.4, variance=1.2), GaussianLikelihood(0.1)
    config = method_config("svgp", num_inducing, x.shape[0])
    return SVGP(Problem(x, y, kernel, likelihood, torch.Generator().manual_seed(seed)), config)


def test_kmeans_finds_the_cluster_centres():
    generator = torch.Generator().manual_seed(1)
    centres = torch.tensor([[-5.0, 0.0], [0.0, 5.0], [5.0, 0.0]], dtype=DTYPE)
    x = (centres.unsqueeze(1) + 0.1 * torch.randn(3, 30, 2, generator=generator, dtype=DTYPE)).reshape(90, 2)
    found = kmeans_centres(x, 3, torch.Generator().manual_seed(2))
    found = found[torch.argsort(found[:, 0] + 0.1 * found[:, 1])]
    torch.testing.assert_close(found, centres, rtol=0, atol=0.1)


def test_kmeans_is_seeded_by_the_generator_and_caps_at_n(data, caplog):
    x, _ = data
    first = kmeans_centres(x, 5, torch.Generator().manual_seed(3))
    assert torch.equal(first, kmeans_centres(x, 5, torch.Generator().manual_seed(3)))
    with caplog.at_level(logging.WARNING):
        assert kmeans_centres(x, N + 5, torch.Generator().manual_seed(3)).shape == (N, 1)
    assert "only 20 training points" in caplog.text


def test_q_starts_at_the_prior(data, method_config):
    x, y = data
    method = build(method_config, x, y, 5)
    assert method.inducing_inputs.shape == (5, 1)
    assert torch.equal(method.q_mean, torch.zeros(5, dtype=DTYPE))
    torch.testing.assert_close(method.q_scale_tril, torch.eye(5, dtype=DTYPE))
    mean, var = method.predict_f(x)  # q(f) = p(f) when q(u) = p(u)
    torch.testing.assert_close(mean, torch.zeros(N, dtype=DTYPE))
    torch.testing.assert_close(var, method.kernel(x, diag=True))


def set_optimal_q(method: SVGP, x: torch.Tensor, y: torch.Tensor) -> None:
    """The optimal q(u) for fixed Z (Titsias 2009), whitened, with explicit inverses."""
    k_uu = method.kernel(method.inducing_inputs) + numerics.JITTER * torch.eye(N, dtype=DTYPE)
    k_uf = method.kernel(method.inducing_inputs, x)
    noise = method.likelihood.noise_variance
    middle = torch.linalg.inv(k_uu + k_uf @ k_uf.mT / noise)
    mean_u = k_uu @ middle @ k_uf @ y / noise
    cov_u = k_uu @ middle @ k_uu
    chol_uu = torch.linalg.cholesky(k_uu)
    whiten = torch.linalg.inv(chol_uu)
    scale = torch.linalg.cholesky(whiten @ cov_u @ whiten.mT)
    with torch.no_grad():
        method.q_mean.copy_(whiten @ mean_u)
        method.raw_q_scale.copy_(scale.tril(-1) + torch.diag_embed(inverse_positive(scale.diagonal())))


def test_optimal_q_with_z_at_the_data_recovers_the_exact_gp(data, method_config):
    x, y = data
    method = build(method_config, x, y, N)
    with torch.no_grad():
        method.inducing_inputs.copy_(x)
        set_optimal_q(method, x, y)
        elbo = -method.loss(x, y, 1, torch.Generator())  # the full batch: N/n = 1
        exact = log_marginal_likelihood(x, y, method.kernel, method.likelihood)
        torch.testing.assert_close(elbo, exact, rtol=0, atol=1e-4)
        x_test = torch.linspace(-5, 5, 13, dtype=DTYPE).unsqueeze(-1)
        reference = ExactGP(Problem(x, y, method.kernel, method.likelihood, torch.Generator()), method.config)
        for got, expected in zip(method.predict(x_test), reference.predict(x_test)):
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-4)


def test_elbo_is_a_lower_bound_scaled_by_n_over_batch(data, method_config):
    x, y = data
    method = build(method_config, x, y, 6)
    with torch.no_grad():
        exact = log_marginal_likelihood(x, y, method.kernel, method.likelihood)
        assert -method.loss(x, y, 1, torch.Generator()) < exact
        mean, var = method.predict_f(x[:5])
        expected_log_prob = method.likelihood.expected_log_prob(y[:5], mean, var).sum()
        torch.testing.assert_close(-method.loss(x[:5], y[:5], 1, torch.Generator()), N / 5 * expected_log_prob)


def test_the_summed_variances_give_the_per_point_loss_and_gradients(method_config):
    """A Gaussian likelihood's loss from the batch's summed variances (``summed_moments``) against the
    per-point marginals' (``marginals``), q off the prior, two splits, M = 7 < 0.4 n: value and every gradient."""
    generator = torch.Generator().manual_seed(4)
    x = torch.randn(2, 40, 3, generator=generator, dtype=DTYPE)
    y = torch.sin(x.sum(-1))
    kernel = RBF(3, lengthscale=[0.7, 1.3, 2.0], variance=1.5, batch_shape=(2,))
    problem = Problem(
        x,
        y,
        kernel,
        GaussianLikelihood(0.2, batch_shape=(2,)),
        [torch.Generator().manual_seed(seed) for seed in (1, 2)],
    )
    method = SVGP(problem, method_config("svgp", 7, 40))
    perturb_q(method)
    x_batch, y_batch = x[:, 5:30], y[:, 5:30]
    prior = method.prior_at(x_batch)
    mean, variance = method.marginals(x_batch, *prior, method.q_scale_tril)
    summed_mean, variance_sum = method.summed_moments(x_batch, *prior, method.q_scale_tril)
    torch.testing.assert_close(summed_mean, mean, rtol=1e-10, atol=0)
    torch.testing.assert_close(variance_sum, variance.sum(-1), rtol=1e-10, atol=0)

    per_point = -(
        40 / 25 * method.likelihood.expected_log_prob(y_batch, mean, variance).sum(-1)
        - method.kl_divergence(method.q_scale_tril)
    )
    assert sums_variances(7, 25, torch.empty(0, dtype=DTYPE))
    loss = method.loss(x_batch, y_batch, 1, [torch.Generator(), torch.Generator()])
    torch.testing.assert_close(loss, per_point, rtol=1e-10, atol=0)
    parameters = [p for p in method.parameters() if p.requires_grad]
    for got, expected in zip(
        torch.autograd.grad(loss.sum(), parameters), torch.autograd.grad(per_point.sum(), parameters)
    ):
        torch.testing.assert_close(got, expected, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("summed", [False, True])
def test_a_loss_forms_q_s_scale_once_for_its_moments_and_its_kl(data, method_config, monkeypatch, summed):
    """S = scale_tril(raw) is formed once a loss, its gradient summed in it (forming it for the moments and
    again for the KL made two passes forward, two backward and their sum: at M = 1000, 1.1 GB a step)."""
    x, y = data
    method = build(method_config, x, y, 7)
    perturb_q(method)
    monkeypatch.setattr(svgp_module, "sums_variances", lambda *args: summed)
    real, formed = svgp_module.scale_tril, []
    monkeypatch.setattr(svgp_module, "scale_tril", lambda raw: formed.append(1) or real(raw))
    method.loss(x[:10], y[:10], 1, torch.Generator()).backward()
    assert len(formed) == 1
    assert method.raw_q_scale.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "num_inducing, batch_size, dtype, summed",
    [
        (100, 500, torch.float64, True),
        (199, 500, torch.float64, True),
        (200, 500, torch.float64, False),
        (500, 500, torch.float64, False),
        (1000, 500, torch.float64, False),
        (100, 500, torch.float32, False),
        (500, 500, torch.float32, False),
        (5, 20, torch.float64, True),
        (20, 20, torch.float64, False),
    ],
)
def test_the_variances_are_summed_only_below_m_of_0_4_b_in_float64(num_inducing, batch_size, dtype, summed):
    """The study's sizes (UCI: M = 100, 500, 1000 at B = 500; Snelson: M = 5, 20 at B = 20) and the edge, on a
    CPU; off a CPU (``meta``, where ``benchmarks/gpu_estimate.py`` counts a GPU's calls) never."""
    assert sums_variances(num_inducing, batch_size, torch.empty(0, dtype=dtype)) == summed
    assert not sums_variances(num_inducing, batch_size, torch.empty(0, dtype=dtype, device="meta"))


def test_off_a_cpu_the_loss_takes_each_points_variances(method_config, monkeypatch):
    """SVGP-100 at B = 500 in float64, the summed form's case on a CPU: off it (``library_device`` false, as
    on CUDA) the loss goes through ``marginals`` only, with the same value and gradients to 1e-10."""
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(600, 3, generator=generator, dtype=DTYPE)
    y = torch.sin(x.sum(-1))
    problem = Problem(x, y, RBF(3).to(DTYPE), GaussianLikelihood(0.2).to(DTYPE), torch.Generator().manual_seed(1))
    method = SVGP(problem, method_config("svgp", 100, 600))
    perturb_q(method)
    calls = []
    real = SVGP.summed_moments
    monkeypatch.setattr(SVGP, "summed_moments", lambda self, *args: calls.append(1) or real(self, *args))
    summed_loss = method.loss(x[:500], y[:500], 1, torch.Generator())
    assert calls == [1]
    parameters = [p for p in method.parameters() if p.requires_grad]
    summed_grads = torch.autograd.grad(summed_loss.sum(), parameters)
    monkeypatch.setattr(blocked, "library_device", lambda tensor: False)
    loss = method.loss(x[:500], y[:500], 1, torch.Generator())
    assert calls == [1]
    torch.testing.assert_close(loss, summed_loss, rtol=1e-10, atol=0)
    for got, expected in zip(torch.autograd.grad(loss.sum(), parameters), summed_grads):  # to 1e-9 of the largest
        torch.testing.assert_close(got, expected, rtol=1e-8, atol=1e-9 * expected.abs().max().item())


@pytest.mark.parametrize(
    "batch_size, dtype, summed", [(25, torch.float64, True), (12, torch.float64, False), (25, torch.float32, False)]
)
def test_the_loss_takes_the_chosen_form(method_config, monkeypatch, batch_size, dtype, summed):
    """M = 7: the loss goes through ``summed_moments`` exactly where ``sums_variances`` says."""
    calls = []
    real = SVGP.summed_moments
    monkeypatch.setattr(SVGP, "summed_moments", lambda self, *args: calls.append(1) or real(self, *args))
    generator = torch.Generator().manual_seed(4)
    x = torch.randn(40, 3, generator=generator, dtype=dtype)
    method = SVGP(
        Problem(
            x,
            torch.sin(x.sum(-1)),
            RBF(3).to(dtype),
            GaussianLikelihood(0.2).to(dtype),
            torch.Generator().manual_seed(1),
        ),
        method_config("svgp", 7, 40),
    )
    assert torch.isfinite(method.loss(x[:batch_size], torch.sin(x[:batch_size].sum(-1)), 1, torch.Generator()))
    assert len(calls) == summed


def test_float32_at_m_500_b_500_keeps_the_loss_and_variances_of_float64(method_config):
    """The UCI SVGP-500 step in float32, q off the prior: the loss and the sum of the batch's variances it
    takes within 1e-4 relative of the same model's in float64 (the per-point form: ~1e-6; the summed
    form, whose solves of L_Z^-1 K_Zx K_xZ L_Z^-T lose float32's digits, had the variances' sum 1.9% off)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(1000, 8, generator=generator, dtype=DTYPE)
    y = torch.sin(x.sum(-1)) + 0.1 * torch.randn(1000, generator=generator, dtype=DTYPE)
    problem = Problem(x, y, RBF(8, lengthscale=3.0), GaussianLikelihood(0.1), torch.Generator().manual_seed(0))
    method = SVGP(problem, method_config("svgp", 500, 1000, inducing_init="training_points"))
    with torch.no_grad():  # q off the prior, S near I
        method.q_mean.add_(torch.randn(method.q_mean.shape, generator=generator, dtype=DTYPE))
        method.raw_q_scale.add_(0.1 * torch.randn(method.raw_q_scale.shape, generator=generator, dtype=DTYPE).tril())
    x_batch, y_batch = x[:500], y[:500]
    with torch.no_grad():
        expected_loss = method.loss(x_batch, y_batch, 1, torch.Generator())
        expected_variance = method.marginals(x_batch, *method.prior_at(x_batch), method.q_scale_tril)[1].sum()
        method.to(torch.float32)
        x_batch, y_batch = x_batch.float(), y_batch.float()
        loss = method.loss(x_batch, y_batch, 1, torch.Generator())
        variance = method.batch_moments(x_batch, method.q_scale_tril)[1].sum()
    torch.testing.assert_close(variance.double(), expected_variance, rtol=1e-4, atol=0)
    torch.testing.assert_close(loss.double(), expected_loss, rtol=1e-4, atol=0)


CLASSES = 3


def blobs(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Three well separated 2-D Gaussian blobs, labels 0, 1, 2 in turn."""
    generator = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % CLASSES
    centres = torch.tensor([[-2.0, 0.0], [2.0, 0.0], [0.0, 3.0]], dtype=DTYPE)
    return centres[y] + 0.5 * torch.randn(n, 2, generator=generator, dtype=DTYPE), y.to(DTYPE)


def build_softmax(
    method_config,
    x: torch.Tensor,
    y: torch.Tensor,
    num_inducing: int,
    generators=None,
    likelihood: Likelihood | None = None,
    **options,
) -> SVGP:
    """SVGP with an RBF kernel and a 3-class softmax (or another ``likelihood``) on ``x`` ``[*batch, n, 2]``."""
    batch_shape = x.shape[:-2]
    kernel = RBF(2, lengthscale=1.5, variance=2.0, batch_shape=batch_shape)
    config = method_config("svgp", num_inducing, x.shape[-2], **options)
    generators = torch.Generator().manual_seed(0) if generators is None else generators
    return SVGP(Problem(x, y, kernel, Softmax(CLASSES) if likelihood is None else likelihood, generators), config)


def perturb_q(method: SVGP, seed: int = 5) -> None:
    """Move every class's q(v) off the prior, each differently."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        method.q_mean.add_(torch.randn(method.q_mean.shape, generator=generator, dtype=DTYPE))
        method.raw_q_scale.add_(0.3 * torch.randn(method.raw_q_scale.shape, generator=generator, dtype=DTYPE))


def test_c_classes_are_c_single_latent_svgps_sharing_z_and_kernel(method_config):
    """Predictions, KL and loss of a softmax SVGP against C one-latent SVGPs with the same Z, kernel and
    per-class q(v_c); the loss's expectation by the softmax with the same draws."""
    x, y = blobs(30, seed=0)
    method = build_softmax(method_config, x, y, 5)
    perturb_q(method)
    assert method.q_mean.shape == (CLASSES, 5) and method.q_scale_tril.shape == (CLASSES, 5, 5)
    x_test = blobs(7, seed=1)[0]
    mean, var = method.predict_f(x_test)
    assert mean.shape == var.shape == (7, CLASSES)
    singles = []
    for c in range(CLASSES):
        single = SVGP(
            Problem(x, y, method.kernel, GaussianLikelihood(0.1), torch.Generator().manual_seed(0)),
            method_config("svgp", 5, 30),
        )
        with torch.no_grad():
            single.inducing_inputs.copy_(method.inducing_inputs)
            single.q_mean.copy_(method.q_mean[c])
            single.raw_q_scale.copy_(method.raw_q_scale[c])
        singles.append(single)
        single_mean, single_var = single.predict_f(x_test)
        torch.testing.assert_close(mean[:, c], single_mean)
        torch.testing.assert_close(var[:, c], single_var)
    torch.testing.assert_close(
        method.kl_divergence(method.q_scale_tril), sum(single.kl_divergence(single.q_scale_tril) for single in singles)
    )

    batch = slice(0, 10)
    loss = method.loss(x[batch], y[batch], 1, torch.Generator().manual_seed(3))
    moments = [torch.stack([single.predict_f(x[batch])[i] for single in singles], -1) for i in (0, 1)]
    expected = method.likelihood.expected_log_prob(y[batch], *moments, torch.Generator().manual_seed(3)).sum()
    torch.testing.assert_close(
        loss, -(30 / 10 * expected - sum(single.kl_divergence(single.q_scale_tril) for single in singles))
    )


def test_a_softmax_split_in_a_batch_equals_the_split_alone(method_config):
    x, y = blobs(24, seed=0)
    xs, ys = torch.stack([x.flip(0), x]), torch.stack([y.flip(0), y])
    seeds = (4, 7)
    batched = build_softmax(method_config, xs, ys, 4, [torch.Generator().manual_seed(s) for s in seeds])
    alone = build_softmax(method_config, x, y, 4, torch.Generator().manual_seed(seeds[1]))
    assert torch.equal(batched.inducing_inputs[1], alone.inducing_inputs)
    perturb_q(alone)
    with torch.no_grad():
        batched.q_mean[1], batched.raw_q_scale[1] = alone.q_mean, alone.raw_q_scale
    loss = batched.loss(xs[:, :8], ys[:, :8], 1, [torch.Generator().manual_seed(s) for s in (1, 2)])
    assert loss.shape == (2,)
    torch.testing.assert_close(loss[1], alone.loss(x[:8], y[:8], 1, torch.Generator().manual_seed(2)))
    torch.testing.assert_close(batched.predict_f(xs[:, :5])[1][1], alone.predict_f(x[:5])[1])


@pytest.mark.parametrize("likelihood", [Softmax, RobustMax])
def test_svgp_learns_separable_classes(method_config, likelihood):
    """100 Adam steps on three blobs, softmax or robust-max: the test error falls from chance (2/3) to near 0."""
    x, y = blobs(60, seed=0)
    x_test, y_test = blobs(30, seed=1)
    method = build_softmax(method_config, x, y, 6, likelihood=likelihood(CLASSES), online_hyperparameters=False)

    def evaluate() -> dict[str, torch.Tensor]:
        return task_metrics(method.likelihood, *method.predict_f(x_test), y_test, 1.0, torch.Generator().manual_seed(3))

    curve, _ = fit(
        method,
        x,
        y,
        iterations=100,
        batch_size=20,
        lr=0.05,
        generators=torch.Generator().manual_seed(2),
        evaluate=evaluate,
        eval_every=50,
    )
    assert curve[-1]["error_rate"] <= 0.1
    assert curve[-1]["test_ll"] > math.log(1 / CLASSES) + 0.3


def test_training_points_are_distinct_rows_drawn_per_split(caplog):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(3, 12, 2, generator=generator, dtype=DTYPE)  # three splits of 12 distinct points
    chosen = training_points(x, 5, [torch.Generator().manual_seed(s) for s in (10, 11, 12)])
    assert chosen.shape == (3, 5, 2)
    for split in range(3):
        rows = [int((x[split] == point).all(-1).nonzero()) for point in chosen[split]]  # each a row of its split
        assert len(set(rows)) == 5
    torch.testing.assert_close(chosen[1], training_points(x[1], 5, torch.Generator().manual_seed(11)), rtol=0, atol=0)
    assert not torch.equal(chosen[0], training_points(x[0], 5, torch.Generator().manual_seed(99)))
    with caplog.at_level(logging.WARNING):
        assert training_points(x[0], 20, torch.Generator().manual_seed(3)).shape == (12, 2)
    assert "only 12 training points" in caplog.text


def fixed_method(method_config, data, seed: int = 0, **options) -> SVGP:
    """SVGP on ``data`` with Z at 6 training inputs, fixed, and fixed hyperparameters (section 5.3's SVGP)."""
    x, y = data
    config = method_config(
        "svgp",
        6,
        x.shape[0],
        **(
            {"inducing_init": "training_points", "learn_inducing_inputs": False, "online_hyperparameters": False}
            | options
        ),
    )
    kernel, likelihood = RBF(1, lengthscale=0.4, variance=1.2), GaussianLikelihood(0.1)
    return SVGP(Problem(x, y, kernel, likelihood, torch.Generator().manual_seed(seed)), config)


def fresh_factor(method: SVGP) -> torch.Tensor:
    return torch.linalg.cholesky(
        method.kernel(method.inducing_inputs)
        + numerics.JITTER
        * torch.eye(
            method.inducing_inputs.shape[-2], dtype=method.inducing_inputs.dtype, device=method.inducing_inputs.device
        )
    )


def test_fixed_z_stays_while_q_trains(data, method_config):
    x, y = data
    method = fixed_method(method_config, data)
    assert {tuple(row.tolist()) for row in method.inducing_inputs} <= {tuple(row.tolist()) for row in x}
    start = {key: value.clone() for key, value in method.state_dict().items()}
    assert {id(p) for p in method.adam_parameters()} == {id(method.q_mean), id(method.raw_q_scale)}
    fit(
        method,
        x,
        y,
        iterations=20,
        batch_size=5,
        lr=0.05,
        generators=torch.Generator().manual_seed(1),
        evaluate=dict,
        eval_every=100,
    )
    after = method.state_dict()
    assert {key for key in start if not torch.equal(after[key], start[key])} == {"q_mean", "raw_q_scale"}
    assert (after["q_mean"] - start["q_mean"]).abs().max() > 0.1
    assert not torch.equal(after["raw_q_scale"], start["raw_q_scale"])


@pytest.mark.parametrize(
    "learned, factorizations",
    [({}, 1), ({"learn_inducing_inputs": True}, 20 + 4), ({"online_hyperparameters": True}, 20 + 4)],
)
def test_a_fixed_factor_is_computed_once(data, method_config, monkeypatch, learned, factorizations):
    """Fixed Z and kernel: L_Z once for 20 steps and 4 evaluations, equal to a fresh factor; anything trained:
    one per call."""
    import gpstudy.linalg.factor as factor_module

    calls = []
    monkeypatch.setattr(factor_module, "cholesky", lambda matrix: calls.append(1) or cholesky(matrix))
    x, y = data
    method = fixed_method(method_config, data, **learned)

    def evaluate() -> dict[str, torch.Tensor]:
        return task_metrics(method.likelihood, *method.predict_f(x), y, 1.0, torch.Generator())

    fit(
        method,
        x,
        y,
        iterations=20,
        batch_size=5,
        lr=0.05,
        generators=torch.Generator().manual_seed(1),
        evaluate=evaluate,
        eval_every=5,
    )
    assert len(calls) == factorizations
    with torch.no_grad():
        torch.testing.assert_close(method.prior_scale_tril(), fresh_factor(method), rtol=1e-12, atol=1e-12)


def test_a_fixed_factor_follows_every_change_of_z_or_kernel(data, method_config):
    """A loaded state (another Z, another kernel), a value set in place and a dtype move: each refactors."""
    method = fixed_method(method_config, data, seed=0)
    other = fixed_method(method_config, data, seed=1)
    with torch.no_grad():
        other.kernel.raw_lengthscale.add_(0.5)
    kept = method.prior_scale_tril()
    torch.testing.assert_close(kept, fresh_factor(method), rtol=1e-12, atol=1e-12)
    assert not torch.allclose(other.prior_scale_tril(), kept)
    method.load_state_dict(other.state_dict())  # as a resumed checkpoint does
    torch.testing.assert_close(method.prior_scale_tril(), other.prior_scale_tril(), rtol=1e-12, atol=1e-12)
    with torch.no_grad():
        method.kernel.raw_variance.sub_(0.3)
    torch.testing.assert_close(method.prior_scale_tril(), fresh_factor(method), rtol=1e-12, atol=1e-12)
    method.to(torch.float32)
    assert method.prior_scale_tril().dtype == torch.float32
    torch.testing.assert_close(method.prior_scale_tril(), fresh_factor(method))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_fixed_factor_moves_with_the_method_to_a_gpu(data, method_config):
    method = fixed_method(method_config, data)
    method.prior_scale_tril()
    method.to("cuda")
    factor = method.prior_scale_tril()
    assert factor.device.type == "cuda"
    torch.testing.assert_close(factor, fresh_factor(method), rtol=1e-12, atol=1e-12)


def failing_fixed_method(method_config, data, dtype: torch.dtype, variance: float) -> SVGP:
    """``fixed_method`` in ``dtype`` with Z's first two inputs equal and the kernel's variance so large that
    K_ZZ + JITTER is not positive definite in that precision, while the jitter of a later try saves it."""
    method = fixed_method(method_config, data).to(dtype)
    with torch.no_grad():
        method.kernel.raw_variance.copy_(inverse_positive(torch.tensor(variance, dtype=dtype)))
        method.inducing_inputs[1] = method.inducing_inputs[0]
    return method


@pytest.mark.parametrize("dtype, variance", [(torch.float64, 1e12), (torch.float32, 1e3)])
def test_a_fixed_factor_made_in_a_training_step_gets_the_jitter_an_eager_one_gets(data, method_config, dtype, variance):
    """L_Z first factored inside a step's deferred checks, where the factor fails: the step reruns checked
    and keeps the jittered factor, as an eager call makes it (not the failed one: NaN, or in float32 a
    finite loss from a factor with a negative diagonal)."""
    x, y = (tensor.to(dtype) for tensor in data)
    eager = failing_fixed_method(method_config, data, dtype, variance)
    assert torch.linalg.cholesky_ex(add_jitter(eager.kernel(eager.inducing_inputs)))[1] > 0  # the base jitter fails
    expected_factor = eager.prior_scale_tril()
    expected_loss = eager.loss(x[:5], y[:5], 1, torch.Generator())
    method = failing_fixed_method(method_config, data, dtype, variance)
    loss = optimizer_step(
        adam(method.adam_parameters(), 0.01, x.device),
        lambda: method.loss(x[:5], y[:5], 1, torch.Generator()),
        torch.Generator(),
    )
    assert torch.isfinite(loss)
    torch.testing.assert_close(loss, expected_loss, rtol=1e-8, atol=0)
    scale = expected_factor.abs().max()
    torch.testing.assert_close(method._fixed_factor[1], expected_factor, rtol=1e-8, atol=1e-8 * scale)


def test_a_kept_factor_reused_inside_deferred_checks_is_checked_with_them(data, method_config, monkeypatch):
    """A failed factor kept by a deferred pass that nobody looked at: the next pass that reuses it records
    its failure again. A good one is reused by the next pass without a factorization (the cheap path)."""
    import gpstudy.linalg.factor as factor_module

    failing, good = failing_fixed_method(method_config, data, DTYPE, 1e12), fixed_method(method_config, data)
    for method in (failing, good):
        with deferred_factor_checks():
            method.prior_scale_tril()
    calls = []
    monkeypatch.setattr(factor_module, "cholesky", lambda matrix: calls.append(1) or cholesky(matrix))
    for method, failed in ((failing, True), (good, False)):
        with deferred_factor_checks() as checks:
            method.prior_scale_tril()
        assert checks.any_failed() == failed
    assert calls == []
