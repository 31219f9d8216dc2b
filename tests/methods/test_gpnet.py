"""GPNet: the beta schedule, the frozen target, both objectives, online hyperparameters, exactness."""

import copy

import pytest
import torch
from torch.distributions import MultivariateNormal
from torch.distributions import kl_divergence as torch_kl

from gpstudy import numerics
from gpstudy.gaussian import kl_divergence, tempered_target
from gpstudy.kernels import RBF
from gpstudy.likelihoods import GaussianLikelihood
from gpstudy.linalg import add_jitter, cholesky
from gpstudy.methods import ExactGP, GPNet, Problem
from gpstudy.methods.gpnet import beta_schedule

DTYPE = numerics.DEFAULT_DTYPE
N, BATCH = 30, 8


@pytest.fixture(scope="module")
def data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(N, 2, generator=generator, dtype=DTYPE)
    return x, torch.sin(2 * x[:, 0]) * x[:, 1] + 0.1 * torch.randn(N, generator=generator, dtype=DTYPE)


def build(method_config, data, seed: int = 0, **options) -> GPNet:
    x, y = data
    kernel, likelihood = RBF(2, lengthscale=[0.8, 1.3], variance=1.2), GaussianLikelihood(0.1)
    config = method_config("gpnet", 5, x.shape[0], **({"beta0": 0.5, "xi": 0.0, "hidden_units": 12} | options))
    return GPNet(Problem(x, y, kernel, likelihood, torch.Generator().manual_seed(seed)), config)


def perturb(method: GPNet) -> None:
    """Move the network off its initialization so that every term has a gradient."""
    generator = torch.Generator().manual_seed(9)
    with torch.no_grad():
        for parameter in method.network.parameters():
            parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator, dtype=DTYPE))


def network_gradients(method: GPNet) -> list[torch.Tensor]:
    return [parameter.grad.clone() for parameter in method.network.parameters()]


def test_beta_schedule():
    assert beta_schedule(1, 0.1, 1.0, "sqrt_t_minus_1") == 0.1  # the authors' code starts at beta0
    assert beta_schedule(5, 1.0, 1.0, "sqrt_t_minus_1") == pytest.approx(1 / 3)
    assert beta_schedule(10, 1.0, 0.1, "sqrt_t_minus_1") == pytest.approx(1 / 1.3)
    assert beta_schedule(1, 0.1, 1.0, "sqrt_t") == pytest.approx(0.05)  # the paper: beta0 / (1 + xi sqrt(t))
    assert beta_schedule(4, 1.0, 1.0, "sqrt_t") == pytest.approx(1 / 3)
    assert beta_schedule(1000, 0.01, 0.0, "sqrt_t") == 0.01


def test_unknown_objective_is_refused(data, method_config):
    with pytest.raises(ValueError, match="conjugate"):
        build(method_config, data, objective="natural")


def test_network_starts_from_the_kernel_and_hyperparameters_are_frozen(data, method_config):
    method = build(method_config, data)
    torch.testing.assert_close(method.network.lengthscale, method.kernel.lengthscale)
    torch.testing.assert_close(method.network.variance, method.kernel.variance)
    x, y = data
    method.loss(x[:BATCH], y[:BATCH], 1, torch.Generator().manual_seed(1)).backward()
    for parameter in [*method.kernel.parameters(), *method.likelihood.parameters()]:
        assert not parameter.requires_grad and parameter.grad is None


def test_conjugate_loss_is_the_kl_to_a_target_built_by_a_frozen_copy(data, method_config):
    method = build(method_config, data)
    perturb(method)
    frozen = copy.deepcopy(method.network).requires_grad_(False)
    x, y = data
    step, beta = 3, 0.5
    loss = method.loss(x[:BATCH], y[:BATCH], step, torch.Generator().manual_seed(1))
    loss.backward()
    gradients = network_gradients(method)

    method.zero_grad()
    inputs = method.measurement_set(x[:BATCH], torch.Generator().manual_seed(1))
    mean, cov = method.network.mean_and_covariance(inputs)
    previous_mean, previous_cov = frozen.mean_and_covariance(inputs)
    prior_cov = add_jitter(method.kernel(inputs))
    noise = method.likelihood.noise_variance
    target_mean, target_cov = tempered_target(prior_cov, previous_mean, previous_cov, y[:BATCH], noise, beta, N)
    assert not target_mean.requires_grad and not target_cov.requires_grad
    reference = kl_divergence(mean[BATCH:], cholesky(cov[BATCH:, BATCH:]), target_mean, cholesky(target_cov))
    reference.backward()
    torch.testing.assert_close(loss, reference)
    for got, expected in zip(gradients, network_gradients(method)):
        torch.testing.assert_close(got, expected)
    assert all(parameter.grad is None for parameter in frozen.parameters())


def test_elbo_objective_has_the_gradient_of_the_papers_lower_bound(data, method_config):
    method = build(method_config, data, objective="elbo")
    perturb(method)
    frozen = copy.deepcopy(method.network).requires_grad_(False)
    x, y = data
    step, beta = 2, 0.5
    method.loss(x[:BATCH], y[:BATCH], step, torch.Generator().manual_seed(1)).backward()
    gradients = network_gradients(method)

    method.zero_grad()  # L_t of section 3.2, literally, with torch.distributions
    inputs = method.measurement_set(x[:BATCH], torch.Generator().manual_seed(1))
    q = MultivariateNormal(*method.network.mean_and_covariance(inputs))
    previous = MultivariateNormal(*frozen.mean_and_covariance(inputs))
    prior = MultivariateNormal(torch.zeros(inputs.shape[0], dtype=DTYPE), add_jitter(method.kernel(inputs)))
    variance = q.covariance_matrix.diagonal()[:BATCH]
    expected = method.likelihood.expected_log_prob(y[:BATCH], q.mean[:BATCH], variance).sum()
    bound = beta * N / BATCH * expected - beta * torch_kl(q, prior) - (1 - beta) * torch_kl(q, previous)
    (-bound).backward()
    for got, reference in zip(gradients, network_gradients(method)):
        torch.testing.assert_close(got, reference)


def test_online_hyperparameters_learn_from_the_minibatch_bound_only(data, method_config):
    x, y = data
    fixed, online = build(method_config, data), build(method_config, data, online_hyperparameters=True)
    perturb(fixed)
    perturb(online)
    fixed.loss(x[:BATCH], y[:BATCH], 2, torch.Generator().manual_seed(1)).backward()
    online.loss(x[:BATCH], y[:BATCH], 2, torch.Generator().manual_seed(1)).backward()
    for got, expected in zip(network_gradients(online), network_gradients(fixed)):
        torch.testing.assert_close(got, expected)  # the bound does not touch the network
    hyperparameters = [*online.kernel.parameters(), *online.likelihood.parameters()]
    gradients = [parameter.grad.clone() for parameter in hyperparameters]

    online.zero_grad()  # sum_B E_{q_t} log p(y_b | f_b) - KL[q_t(f_B) || p(f_B)], q_t fixed
    with torch.no_grad():
        mean, cov = online.network.mean_and_covariance(x[:BATCH])
    prior = MultivariateNormal(torch.zeros(BATCH, dtype=DTYPE), add_jitter(online.kernel(x[:BATCH])))
    expected = online.likelihood.expected_log_prob(y[:BATCH], mean, cov.diagonal()).sum()
    (-(expected - torch_kl(MultivariateNormal(mean, cov), prior))).backward()
    for got, parameter in zip(gradients, hyperparameters):
        torch.testing.assert_close(got, parameter.grad)


def test_predictions_are_the_network_marginals_plus_noise(data, method_config):
    method = build(method_config, data)
    x, _ = data
    mean, var = method.predict(x)
    network_mean, network_cov = method.network.mean_and_covariance(x)
    torch.testing.assert_close(mean, network_mean)
    torch.testing.assert_close(var, network_cov.diagonal() + method.likelihood.noise_variance)


def test_full_batch_beta_one_reaches_the_exact_posterior(method_config):
    n = 20
    x = torch.linspace(-4, 4, n, dtype=DTYPE).unsqueeze(-1)
    y = torch.sin(1.5 * x[:, 0]) + 0.1 * torch.randn(n, generator=torch.Generator().manual_seed(0), dtype=DTYPE)
    kernel, likelihood = RBF(1, lengthscale=0.5), GaussianLikelihood(0.1)
    config = method_config("gpnet", n, n, beta0=1.0, xi=0.0, hidden_units=50, measurement="train")
    method = GPNet(Problem(x, y, kernel, likelihood, torch.Generator().manual_seed(1)), config)
    optimizer = torch.optim.Adam(method.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(2)
    for step in range(1, 1001):
        optimizer.zero_grad()
        method.loss(x, y, step, generator).backward()
        optimizer.step()
    with torch.no_grad():
        exact_mean, exact_var = ExactGP(Problem(x, y, kernel, likelihood, generator), config).predict_f(x)
        mean, var = method.predict_f(x)
    torch.testing.assert_close(mean, exact_mean, rtol=0, atol=0.02)
    torch.testing.assert_close(var, exact_var, rtol=0.1, atol=0)
