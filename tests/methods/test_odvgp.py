"""ODVGP: the start, SVGP without a mean basis, exactness at the data, the natural step, splits, training."""

import pytest
import torch

from gpstudy import numerics
from gpstudy.kernels import RBF
from gpstudy.likelihoods import GaussianLikelihood
from gpstudy.linalg import add_jitter, inverse_positive
from gpstudy.methods import SVGP, ExactGP, MethodConfig, Problem
from gpstudy.methods.exact_gp import log_marginal_likelihood
from gpstudy.methods.odvgp import ODVGP
from gpstudy.training import fit

DTYPE = numerics.DEFAULT_DTYPE
N = 20


def make_data(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = 8 * torch.rand(N, 1, generator=generator, dtype=DTYPE) - 4
    return x, torch.sin(3 * x[:, 0]) + 0.1 * torch.randn(N, generator=generator, dtype=DTYPE)


@pytest.fixture
def data() -> tuple[torch.Tensor, torch.Tensor]:
    return make_data()


def build(
    x: torch.Tensor,
    y: torch.Tensor,
    num_beta: int,
    mean_basis: int = 0,
    natural_gradient: bool = False,
    natural_step: float = 0.05,
    generators=None,
    batch_shape: tuple[int, ...] = (),
) -> ODVGP:
    kernel = RBF(1, lengthscale=0.4, variance=1.2, batch_shape=batch_shape)
    likelihood = GaussianLikelihood(0.1, batch_shape=batch_shape)
    config = MethodConfig(
        M=num_beta,
        n_train=x.shape[-2],
        options={
            "mean_basis": mean_basis,
            "natural_gradient": natural_gradient,
            "natural_step": natural_step,
            "online_hyperparameters": True,
        },
    )
    generators = torch.Generator().manual_seed(0) if generators is None else generators
    return ODVGP(Problem(x, y, kernel, likelihood, generators), config)


def random_lower(size: int, seed: int) -> torch.Tensor:
    """A lower-triangular matrix with a positive diagonal."""
    raw = 0.3 * torch.randn(size, size, generator=torch.Generator().manual_seed(seed), dtype=DTYPE)
    return raw.tril(-1) + torch.diag_embed(0.5 + raw.diagonal().abs())


def set_q(method, a_gamma: torch.Tensor, a_beta: torch.Tensor, scale: torch.Tensor) -> None:
    with torch.no_grad():
        method.a_gamma.copy_(a_gamma)
        method.a_beta.copy_(a_beta)
        method.raw_scale.copy_(scale.tril(-1) + torch.diag_embed(inverse_positive(scale.diagonal(dim1=-2, dim2=-1))))


def kernel_matrices(method: ODVGP, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """K_beta (with jitter) and K_beta,x."""
    return add_jitter(method.kernel(method.beta)), method.kernel(method.beta, x)


def optimal_q(method: ODVGP, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The optimal q(f(beta)) = N(m, S) for fixed beta and a_gamma (Titsias 2009), explicit inverses:
    S = K (K + K_bx K_xb / s2)^-1 K and m = S K^-1 K_bx (y - c) / s2, c the orthogonal mean part at x."""
    k_bb, k_bx = kernel_matrices(method, x)
    noise = method.likelihood.noise_variance
    gamma_part = method.kernel(x, method.gamma) @ method.a_gamma - k_bx.mT @ torch.linalg.solve(
        k_bb, method.kernel(method.beta, method.gamma) @ method.a_gamma
    )
    cov = k_bb @ torch.linalg.inv(k_bb + k_bx @ k_bx.mT / noise) @ k_bb
    return cov @ torch.linalg.solve(k_bb, k_bx @ (y - gamma_part)) / noise, cov


def test_q_starts_at_zero_mean_and_unit_covariance_and_orthnat_leaves_the_beta_part_to_natural_steps(data):
    x, y = data
    method = build(x, y, 5, mean_basis=3, natural_gradient=True)
    assert method.beta.shape == (5, 1) and method.gamma.shape == (3, 1)
    assert not (method.gamma.unsqueeze(1) == method.beta.unsqueeze(0)).all(-1).any()  # two k-means, distinct
    assert not method.a_gamma.any() and not method.a_beta.any()
    torch.testing.assert_close(method.scale_tril, torch.eye(5, dtype=DTYPE))
    mean, var = method.predict_f(torch.cat([x, method.beta.detach()]))
    torch.testing.assert_close(mean, torch.zeros(N + 5, dtype=DTYPE))
    torch.testing.assert_close(var[N:], torch.ones(5, dtype=DTYPE), rtol=0, atol=1e-5)  # S = I, not K_beta
    adam = {id(p) for p in method.adam_parameters()}
    assert id(method.a_beta) not in adam and id(method.raw_scale) not in adam and method.a_beta.requires_grad
    assert {id(method.a_gamma), id(method.gamma), id(method.beta)} <= adam
    assert len(build(x, y, 5, mean_basis=3).adam_parameters()) == len(adam) + 2  # ORTH: Adam on everything


def test_without_a_mean_basis_it_is_svgp(data):
    """Same Z and q(u), SVGP's whitened q(v) mapped: a_beta = L_Z^-T v, L = L_Z S_v."""
    x, y = data
    config = MethodConfig(
        M=6,
        n_train=N,
        options={"online_hyperparameters": True, "inducing_init": "kmeans", "learn_inducing_inputs": True},
    )
    svgp = SVGP(
        Problem(x, y, RBF(1, lengthscale=0.4, variance=1.2), GaussianLikelihood(0.1), torch.Generator().manual_seed(0)),
        config,
    )
    method = build(x, y, 6)
    assert torch.equal(method.beta, svgp.inducing_inputs) and method.gamma.shape == (0, 1)
    whitened_mean = torch.randn(6, generator=torch.Generator().manual_seed(1), dtype=DTYPE)
    whitened_scale = random_lower(6, 2)
    chol_z = torch.linalg.cholesky(kernel_matrices(method, x)[0])
    with torch.no_grad():
        svgp.q_mean.copy_(whitened_mean)
        svgp.raw_q_scale.copy_(whitened_scale.tril(-1) + torch.diag_embed(inverse_positive(whitened_scale.diagonal())))
        a_beta = torch.linalg.solve_triangular(chol_z.mT, whitened_mean.unsqueeze(-1), upper=True).squeeze(-1)
        set_q(method, method.a_gamma, a_beta, chol_z @ whitened_scale)
        x_test = torch.linspace(-5, 5, 13, dtype=DTYPE).unsqueeze(-1)
        for got, expected in zip(method.predict_f(x_test), svgp.predict_f(x_test)):
            torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)
        batch = slice(3, 10)  # a minibatch: the N/n scale too
        torch.testing.assert_close(
            method.loss(x[batch], y[batch], 1, torch.Generator()),
            svgp.loss(x[batch], y[batch], 1, torch.Generator()),
            rtol=1e-9,
            atol=1e-9,
        )


def test_optimal_q_with_both_bases_at_the_data_recovers_the_exact_gp(data):
    """gamma = beta = X: the orthogonal part vanishes whatever a_gamma (up to jitter)."""
    x, y = data
    method = build(x, y, N, mean_basis=N)
    with torch.no_grad():
        method.beta.copy_(x)
        method.gamma.copy_(x)
        a_gamma = 0.3 * torch.randn(N, generator=torch.Generator().manual_seed(1), dtype=DTYPE)
        set_q(method, a_gamma, method.a_beta, method.scale_tril)
        mean, cov = optimal_q(method, x, y)
        set_q(method, a_gamma, torch.linalg.solve(kernel_matrices(method, x)[0], mean), torch.linalg.cholesky(cov))
        elbo = -method.loss(x, y, 1, torch.Generator())  # the full batch: N/n = 1
        torch.testing.assert_close(
            elbo, log_marginal_likelihood(x, y, method.kernel, method.likelihood), rtol=0, atol=1e-4
        )
        x_test = torch.linspace(-5, 5, 13, dtype=DTYPE).unsqueeze(-1)
        reference = ExactGP(Problem(x, y, method.kernel, method.likelihood, torch.Generator()), method.config)
        for got, expected in zip(method.predict(x_test), reference.predict(x_test)):
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-4)


def test_the_exact_posterior_mean_is_the_optimum_when_gamma_and_beta_split_the_data(data):
    """beta = 6 training inputs, gamma = the other 14: the ELBO's optimal mean is the exact GP's
    k_xX w, w = (K + s2 I)^-1 y (representer theorem), at a_gamma = w_gamma and
    a_beta = w_beta + K_beta^-1 K_beta,gamma w_gamma: the gradient in (a_gamma, a_beta) vanishes there
    (it would not with a wrong weight of the orthogonal mean's KL)."""
    x, y = data
    method = build(x, y, 6, mean_basis=N - 6)
    reference = ExactGP(Problem(x, y, method.kernel, method.likelihood, torch.Generator()), method.config)
    with torch.no_grad():
        method.beta.copy_(x[:6])
        method.gamma.copy_(x[6:])
        k = add_jitter(method.kernel(x)) + method.likelihood.noise_variance * torch.eye(N, dtype=DTYPE)
        weights = torch.linalg.solve(k, y)
        k_bb = kernel_matrices(method, x)[0]
        a_beta = weights[:6] + torch.linalg.solve(k_bb, method.kernel(x[:6], x[6:]) @ weights[6:])
        set_q(method, weights[6:], a_beta, random_lower(6, 3))
        x_test = torch.linspace(-5, 5, 13, dtype=DTYPE).unsqueeze(-1)
        torch.testing.assert_close(method.predict_f(x_test)[0], reference.predict_f(x_test)[0], rtol=0, atol=1e-6)
    method.loss(x, y, 1, torch.Generator()).backward()
    for parameter in (method.a_gamma, method.a_beta):
        torch.testing.assert_close(parameter.grad, torch.zeros_like(parameter), rtol=0, atol=1e-4)
    method.zero_grad()
    with torch.no_grad():
        method.a_gamma.mul_(1.1)  # off the optimum, the gradient is large
    method.loss(x, y, 1, torch.Generator()).backward()
    assert method.a_gamma.grad.abs().max() > 0.1


def test_a_natural_step_of_size_one_reaches_the_optimal_q_on_a_conjugate_problem(data):
    x, y = data
    method = build(x, y, 6, mean_basis=4, natural_gradient=True, natural_step=1.0)
    generator = torch.Generator().manual_seed(1)
    a_gamma = torch.randn(4, generator=generator, dtype=DTYPE)
    set_q(method, a_gamma, torch.randn(6, generator=generator, dtype=DTYPE), random_lower(6, 2))
    gamma, beta = method.gamma.detach().clone(), method.beta.detach().clone()
    method.loss(x, y, 1, torch.Generator()).backward()
    method.natural_update()()
    assert method.a_beta.grad is None and method.raw_scale.grad is None  # cleared for the next iteration
    assert torch.equal(method.a_gamma, a_gamma) and torch.equal(method.gamma, gamma) and torch.equal(method.beta, beta)
    with torch.no_grad():
        mean, cov = optimal_q(method, x, y)
        k_bb = kernel_matrices(method, x)[0]
        torch.testing.assert_close(k_bb @ method.a_beta, mean, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(method.scale_tril @ method.scale_tril.mT, cov, rtol=1e-6, atol=1e-6)


def test_a_natural_step_of_size_tau_moves_the_natural_parameters_a_fraction_tau_to_the_optimum(data):
    """On a conjugate problem theta_1 = (1 - tau) theta_0 + tau theta* (eq. 16b,c): S^-1 and S^-1 m."""
    x, y = data
    method = build(x, y, 6, mean_basis=2, natural_gradient=True, natural_step=0.3)
    generator = torch.Generator().manual_seed(4)
    set_q(
        method,
        torch.randn(2, generator=generator, dtype=DTYPE),
        torch.randn(6, generator=generator, dtype=DTYPE),
        random_lower(6, 5),
    )

    def natural_parameters() -> tuple[torch.Tensor, torch.Tensor]:
        precision = torch.linalg.inv(method.scale_tril @ method.scale_tril.mT)
        return precision, precision @ kernel_matrices(method, x)[0] @ method.a_beta

    with torch.no_grad():
        before = natural_parameters()
        mean, cov = optimal_q(method, x, y)
        optimum = torch.linalg.inv(cov), torch.linalg.solve(cov, mean)
    method.loss(x, y, 1, torch.Generator()).backward()
    method.natural_update()()
    with torch.no_grad():
        for got, start, best in zip(natural_parameters(), before, optimum):
            torch.testing.assert_close(got, 0.7 * start + 0.3 * best, rtol=1e-6, atol=1e-6)


def train(x, y, generators, seed_generators, natural_gradient: bool, iterations: int = 30, **kwargs):
    """ODVGP (M = 5, M_gamma = 3) trained by ``fit`` on minibatches of 8, and its learning curve."""
    method = build(x, y, 5, mean_basis=3, natural_gradient=natural_gradient, generators=seed_generators, **kwargs)
    curve, _ = fit(
        method,
        x,
        y,
        iterations=iterations,
        batch_size=8,
        lr=0.01,
        generators=generators,
        evaluate=dict,
        eval_every=iterations,
    )
    return method, curve


@pytest.mark.parametrize("natural_gradient", [False, True], ids=["orth", "orthnat"])
def test_a_batch_of_two_splits_trains_as_each_split_alone(natural_gradient):
    (x0, y0), (x1, y1) = make_data(0), make_data(1)
    x, y = torch.stack([x0, x1]), torch.stack([y0, y1])
    batched, _ = train(
        x,
        y,
        [torch.Generator().manual_seed(s) for s in (7, 8)],
        [torch.Generator().manual_seed(s) for s in (0, 1)],
        natural_gradient,
        iterations=10,
        batch_shape=(2,),
    )
    alone, _ = train(
        x1, y1, torch.Generator().manual_seed(8), torch.Generator().manual_seed(1), natural_gradient, iterations=10
    )
    for key, value in alone.state_dict().items():
        torch.testing.assert_close(batched.state_dict()[key][1], value, rtol=1e-9, atol=1e-9)
    x_test = torch.linspace(-5, 5, 13, dtype=DTYPE).unsqueeze(-1)
    for got, expected in zip(batched.predict(x_test.expand(2, 13, 1)), alone.predict(x_test)):
        torch.testing.assert_close(got[1], expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("natural_gradient", [False, True], ids=["orth", "orthnat"])
def test_fit_lowers_the_loss(data, natural_gradient):
    x, y = data
    start = build(x, y, 5, mean_basis=3, natural_gradient=natural_gradient).loss(x, y, 1, torch.Generator())
    method, curve = train(
        x,
        y,
        torch.Generator().manual_seed(7),
        torch.Generator().manual_seed(0),
        natural_gradient,
        iterations=40,
        natural_step=0.1,
    )
    with torch.no_grad():
        trained = method.loss(x, y, 1, torch.Generator())
    assert torch.isfinite(trained) and trained < 0.6 * start and curve[-1]["iteration"] == 40
    assert method.a_beta.abs().max() > 0.01 and method.a_gamma.abs().max() > 0.001  # both parts trained
    assert method.a_beta.grad is None or not natural_gradient  # ORTHNAT clears what the natural step used
