"""Every kernel passes the same battery (shapes, diag, PSD, gradients); each against its closed form."""

import math

import numpy as np
import pytest
import torch

from gpstudy import numerics
from gpstudy.kernels import KERNELS, RBF, ArcCosine, build_kernel
from gpstudy.kernels.arccos import angular

DTYPE = numerics.DEFAULT_DTYPE
LENGTHSCALE = np.array([0.5, 1.0, 2.0])
VARIANCE = 1.7


@pytest.fixture
def inputs() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(7, 3, generator=generator, dtype=DTYPE), torch.randn(5, 3, generator=generator, dtype=DTYPE)


def gram(kernel_of_pair, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    """VARIANCE k(x1_i / l, x2_j / l) from a scalar function of two numpy vectors."""
    a, b = x1.numpy() / LENGTHSCALE, x2.numpy() / LENGTHSCALE
    return VARIANCE * torch.tensor([[kernel_of_pair(u, v) for v in b] for u in a], dtype=DTYPE)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_shapes_and_diag(name, inputs):
    x1, x2 = inputs
    kernel = KERNELS[name](3, lengthscale=[0.5, 1.0, 2.0], variance=1.7)
    assert kernel(x1, x2).shape == (7, 5)
    assert kernel(x1).shape == (7, 7)
    torch.testing.assert_close(kernel(x1, diag=True), kernel(x1).diagonal())
    torch.testing.assert_close(kernel(x1, x2), kernel(x2, x1).mT)
    with pytest.raises(ValueError, match="diag=True"):
        kernel(x1, x2, diag=True)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_covariance_is_symmetric_psd(name, inputs):
    kernel = KERNELS[name](3)
    matrix = kernel(torch.cat(inputs))
    torch.testing.assert_close(matrix, matrix.mT)
    assert torch.linalg.eigvalsh(matrix).min() > -1e-10


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_leading_batch_dimension(name, inputs):
    x1, x2 = inputs
    kernel = KERNELS[name](3)
    batched = kernel(torch.stack([x1, 2 * x1]), torch.stack([x2, x2]))
    torch.testing.assert_close(batched[1], kernel(2 * x1, x2))
    split_kernels = KERNELS[name](3, lengthscale=[0.5, 1.0, 2.0], variance=1.7, batch_shape=(2,))
    assert split_kernels.lengthscale.shape == (2, 3) and split_kernels.variance.shape == (2,)
    single = KERNELS[name](3, lengthscale=[0.5, 1.0, 2.0], variance=1.7)
    torch.testing.assert_close(split_kernels(torch.stack([x1, x1]), diag=True)[1], single(x1, diag=True))
    torch.testing.assert_close(split_kernels(torch.stack([x1, 2 * x1]))[1], single(2 * x1))


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_gradients_reach_lengthscale_and_variance(name, inputs):
    kernel = KERNELS[name](3)
    kernel(*inputs).sum().backward()
    for parameter in kernel.parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_gradients_are_finite_at_the_diagonal_and_at_zero(name, inputs):
    """k(x, x) has r2 = 0 (sqrt) and angle 0 (arccos) on its diagonal; x repeats a row and has a zero row."""
    x1, x2 = inputs
    x = torch.cat([x1, x1[:1], torch.zeros(1, 3, dtype=DTYPE)])
    for matrix in (lambda k: k(x), lambda k: k(x, x2), lambda k: k(x, x), lambda k: k(x, diag=True)):
        kernel = KERNELS[name](3, lengthscale=[0.5, 1.0, 2.0], variance=1.7)
        values = matrix(kernel)
        values.sum().backward()
        assert torch.isfinite(values).all() and kernel.raw_variance.grad is not None
        for parameter in kernel.parameters():  # a stationary diagonal does not depend on l
            assert parameter.grad is None or torch.isfinite(parameter.grad).all()


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_dtype_follows_the_parameters(name, inputs):
    x1, x2 = (x.float() for x in inputs)
    kernel = KERNELS[name](3, dtype=torch.float32)
    assert kernel(x1, x2).dtype == kernel(x1, diag=True).dtype == torch.float32
    torch.testing.assert_close(kernel(x1, diag=True), kernel(x1).diagonal())


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_checkpoint_names_and_options_schema(name):
    kernel = KERNELS[name](3)
    assert set(kernel.state_dict()) == {"raw_lengthscale", "raw_variance"}
    schema = KERNELS[name].options_schema
    assert schema["type"] == "object" and schema["additionalProperties"] is False


def test_initial_values_are_the_constructor_arguments():
    kernel = RBF(2, lengthscale=[0.5, 3.0], variance=1.7)
    assert kernel.input_dim == 2
    torch.testing.assert_close(kernel.lengthscale, torch.tensor([0.5, 3.0], dtype=DTYPE))
    torch.testing.assert_close(kernel.variance, torch.tensor(1.7, dtype=DTYPE))
    torch.testing.assert_close(RBF(4).lengthscale, torch.ones(4, dtype=DTYPE))


def test_rbf_matches_its_formula(inputs):
    x1, x2 = inputs
    lengthscale = torch.tensor([0.5, 1.0, 2.0], dtype=DTYPE)
    kernel = RBF(3, lengthscale=lengthscale.tolist(), variance=1.7)
    difference = (x1.unsqueeze(1) - x2.unsqueeze(0)) / lengthscale  # [7, 5, 3]
    expected = 1.7 * torch.exp(-0.5 * difference.square().sum(-1))
    torch.testing.assert_close(kernel(x1, x2), expected)
    torch.testing.assert_close(kernel(x1, diag=True), torch.full((7,), 1.7, dtype=DTYPE))


@pytest.mark.parametrize("batch", [(), (3,)])
@pytest.mark.parametrize("same", [False, True])
def test_rbf_equals_its_function_of_r2_values_and_gradients(batch, same):
    """The fused form (issue 39, item 4: the exponent accumulated on the product) to 1e-12 of s2 exp(-r2 / 2)
    from the stationary kernels' r2 (clamped), in float64, with gradients in x1, x2, l and s2."""
    generator = torch.Generator().manual_seed(4)
    kernel = RBF(3, lengthscale=[0.5, 1.0, 2.0], variance=1.7, batch_shape=batch)
    x1 = (2 * torch.randn(*batch, 7, 3, generator=generator, dtype=DTYPE)).requires_grad_()
    x2 = None if same else (2 * torch.randn(*batch, 5, 3, generator=generator, dtype=DTYPE)).requires_grad_()
    weights = torch.randn(*batch, 7, 7 if same else 5, generator=generator, dtype=DTYPE)
    inputs = (x1, *kernel.parameters()) if same else (x1, x2, *kernel.parameters())
    fused = kernel.K(x1, x2)
    reference = kernel.K_r2(kernel.scaled_squared_distance(x1, x1 if same else x2))
    torch.testing.assert_close(fused, reference, rtol=1e-12, atol=1e-12)
    for mine, theirs in zip(
        torch.autograd.grad((fused * weights).sum(), inputs), torch.autograd.grad((reference * weights).sum(), inputs)
    ):
        torch.testing.assert_close(mine, theirs, rtol=1e-12, atol=1e-12)


MATERN = {  # R&W eq. 4.17 as functions of r
    "matern32": lambda r: (1 + math.sqrt(3) * r) * math.exp(-math.sqrt(3) * r),
    "matern52": lambda r: (1 + math.sqrt(5) * r + 5 * r**2 / 3) * math.exp(-math.sqrt(5) * r),
}


@pytest.mark.parametrize("name", sorted(MATERN))
def test_matern_matches_its_formula(name, inputs):
    x1, x2 = inputs
    kernel = KERNELS[name](3, lengthscale=LENGTHSCALE.tolist(), variance=VARIANCE)
    expected = gram(lambda u, v: MATERN[name](float(np.linalg.norm(u - v))), x1, x2)
    torch.testing.assert_close(kernel(x1, x2), expected)
    torch.testing.assert_close(kernel(x1), gram(lambda u, v: MATERN[name](float(np.linalg.norm(u - v))), x1, x1))
    torch.testing.assert_close(kernel(x1, diag=True), torch.full((7,), VARIANCE, dtype=DTYPE))


J = {  # AutoGP eq. 23 in closed form
    0: lambda t: math.pi - t,
    1: lambda t: math.sin(t) + (math.pi - t) * math.cos(t),
    2: lambda t: 3 * math.sin(t) * math.cos(t) + (math.pi - t) * (1 + 2 * math.cos(t) ** 2),
}


def arccos_depth1(u: np.ndarray, v: np.ndarray, degree: int) -> float:
    """kappa^(1) = |u|^d |v|^d J_d(angle) (AutoGP eqs. 21, 24)."""
    norms = np.linalg.norm(u) * np.linalg.norm(v)
    return norms**degree * J[degree](math.acos(np.clip(u @ v / norms, -1.0, 1.0)))


def arccos_depth2(u: np.ndarray, v: np.ndarray, degree: int) -> float:
    """kappa^(2) = (1 / pi) (kappa^(1)(u, u) kappa^(1)(v, v))^(d / 2) J_d(angle^(1)) (AutoGP eqs. 20, 22)."""
    uu, vv, uv = arccos_depth1(u, u, degree), arccos_depth1(v, v, degree), arccos_depth1(u, v, degree)
    return (uu * vv) ** (degree / 2) * J[degree](math.acos(np.clip(uv / math.sqrt(uu * vv), -1.0, 1.0))) / math.pi


@pytest.mark.parametrize("degree", [0, 1, 2])
@pytest.mark.parametrize("depth", [1, 2])
def test_arccos_matches_the_recursion(degree, depth, inputs):
    x1, x2 = inputs
    kernel = ArcCosine(3, degree, depth, lengthscale=LENGTHSCALE.tolist(), variance=VARIANCE)
    reference = {1: arccos_depth1, 2: arccos_depth2}[depth]
    torch.testing.assert_close(kernel(x1, x2), gram(lambda u, v: reference(u, v, degree), x1, x2))
    torch.testing.assert_close(kernel(x1), gram(lambda u, v: reference(u, v, degree), x1, x1))
    diagonal = [VARIANCE * reference(u, u, degree) for u in x1.numpy() / LENGTHSCALE]
    torch.testing.assert_close(kernel(x1, diag=True), torch.tensor(diagonal, dtype=DTYPE))


@pytest.mark.parametrize("degree, depth", [(0, 2), (1, 2), (1, 3), (2, 2)])
def test_deep_arccos_is_the_covariance_of_wide_random_step_and_relu_networks(degree, depth):
    """kappa^(L) against Monte Carlo over random networks of L layers of width W (Cho & Saul 2009):
    h_1 = sqrt(2 pi / W) relu_d(W_1 x), h_(l+1) = sqrt(2 / W) relu_d(W_(l+1) h_l), relu_d(z) = step(z) z^d,
    weights N(0, 1): <h_L(x), h_L(x')> -> kappa^(L)(x, x') (eq. 21 carries pi, the later layers 1 / pi)."""
    generator = torch.Generator().manual_seed(degree * 10 + depth)
    x = torch.tensor([[0.6, -0.4, 0.3], [0.2, 0.5, -0.7], [-0.5, 0.1, 0.4]], dtype=torch.float64)
    networks, width = 40, 800
    estimates = []
    for _ in range(networks):
        hidden, scale = x.mT, 2 * math.pi
        for _ in range(depth):
            pre = torch.randn(width, hidden.shape[0], generator=generator, dtype=torch.float64) @ hidden
            hidden = (scale / width) ** 0.5 * (pre > 0) * pre.clamp_min(0) ** degree
            scale = 2.0
        estimates.append(hidden.mT @ hidden)
    estimates = torch.stack(estimates)
    estimate, standard_error = estimates.mean(0), estimates.std(0) / networks**0.5
    exact = ArcCosine(3, degree=degree, depth=depth)(x)
    assert ((estimate - exact).abs() < 5 * standard_error + 1e-3 * exact.abs()).all()
    assert (standard_error < 0.1 * exact.abs()).all()  # tight enough that twice the kernel fails (degree 2: 7%)
    assert ((estimate - 2 * exact).abs() > 5 * standard_error).all()


def test_arccos_degree_zero_is_pi_minus_the_angle(inputs):
    x1, x2 = inputs
    cosine = (x1 @ x2.T) / (x1.norm(dim=-1)[:, None] * x2.norm(dim=-1)[None, :])
    torch.testing.assert_close(ArcCosine(3, degree=0, depth=1)(x1, x2), math.pi - cosine.arccos())
    torch.testing.assert_close(ArcCosine(3, degree=0, depth=1)(x1, diag=True), torch.full((7,), math.pi, dtype=DTYPE))


@pytest.mark.parametrize("degree", [0, 1, 2])
def test_angular_closed_forms_follow_eq_23(degree):
    """J_d = (-1)^d sin^(2d+1) t ((1 / sin t) d/dt)^d ((pi - t) / sin t), by automatic differentiation."""
    t = torch.linspace(0.1, 3.0, 9, dtype=DTYPE, requires_grad=True)
    value = (math.pi - t) / t.sin()
    for _ in range(degree):
        value = torch.autograd.grad(value.sum(), t, create_graph=True)[0] / t.sin()
    expected = (-1) ** degree * t.sin() ** (2 * degree + 1) * value
    torch.testing.assert_close(angular(degree, t.detach()), expected.detach())


@pytest.mark.parametrize("degree", [0, 1, 2])
@pytest.mark.parametrize("depth", [1, 3])
def test_arccos_is_finite_and_psd_with_a_zero_input(degree, depth, inputs):
    x = torch.cat([inputs[0], torch.zeros(1, 3, dtype=DTYPE)])
    kernel = ArcCosine(3, degree, depth)
    matrix = kernel(x)
    assert torch.isfinite(matrix).all() and torch.isfinite(kernel(x, diag=True)).all()
    assert torch.linalg.eigvalsh(matrix / matrix.diagonal().max()).min() > -1e-10


def test_build_kernel_passes_options_and_rejects_bad_ones():
    kernel = build_kernel("arccos", 3, {"degree": 0, "depth": 3}, dtype=torch.float32, batch_shape=(2,))
    assert isinstance(kernel, ArcCosine) and (kernel.degree, kernel.depth) == (0, 3)
    assert kernel.variance.shape == (2,) and kernel.variance.dtype == torch.float32
    assert isinstance(build_kernel("matern52", 3, {}), KERNELS["matern52"])
    with pytest.raises(ValueError, match="'laplace'.*arccos, cnngp, matern32, matern52, rbf"):
        build_kernel("laplace", 3, {})
    for name, options in [
        ("arccos", {"degree": 3}),
        ("arccos", {"depth": 0}),
        ("arccos", {"layers": 2}),
        ("rbf", {"degree": 1}),
        ("rbf", {"lengthscale": 2.0}),
    ]:
        with pytest.raises(ValueError, match=f"kernel '{name}'"):
            build_kernel(name, 3, options)
    with pytest.raises(ValueError, match="ArcCosine needs .* integer depth >= 1, got 1 and 2.0"):
        build_kernel("arccos", 3, {"depth": 2.0})
    with pytest.raises(ValueError, match="ArcCosine needs degree in"):
        ArcCosine(3, degree=3)
