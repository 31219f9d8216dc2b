"""Every random-feature map: phi(X) phi(X')^T estimates the kernel within a few Monte Carlo errors."""

import functools

import pytest
import torch

from gpstudy import numerics
from gpstudy.kernels import KERNELS, ArcCosine, build_kernel, feature_map_problem
from gpstudy.kernels.features import WRITE_HALVES_FROM, FourierFeatures

DTYPE = numerics.DEFAULT_DTYPE
COUNT = 200_000  # frequencies of the Monte Carlo estimate


@functools.cache
def monte_carlo(name: str, options: tuple) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The estimate phi(X) phi(X')^T ``[4, 6]``, its standard error and the exact K(X, X') (X' holds X).

    The estimate is the mean over frequencies j of z_j = COUNT phi_j(x) . phi_j(x'), phi_j being the
    features of frequency j (cos and sin for Fourier features), so the standard error is std(z) / sqrt(COUNT).
    """
    kernel = build_kernel(name, 3, dict(options))
    with torch.no_grad():
        kernel.raw_lengthscale.copy_(torch.tensor([0.8, 1.2, 1.5], dtype=DTYPE).expm1().log())
        kernel.raw_variance.fill_(0.5)
        x = 1 + 0.25 * torch.randn(6, 3, generator=torch.Generator().manual_seed(0), dtype=DTYPE)
        feature_map = kernel.feature_map()
        omega = feature_map.draw_frequencies(3, COUNT, torch.Generator().manual_seed(1), kernel.lengthscale)
        phi = feature_map((x / kernel.lengthscale) @ omega, kernel.variance)  # [6, F]
        assert phi.shape == (6, feature_map.num_features(COUNT))
        per_frequency = phi.reshape(6, -1, COUNT)  # [6, features per frequency, COUNT]
        z = COUNT * (per_frequency[:4, None] * per_frequency[None]).sum(2)  # [4, 6, COUNT]
        torch.testing.assert_close(z.mean(-1), phi[:4] @ phi.mT)
        return z.mean(-1), z.std(-1) / COUNT**0.5, kernel(x[:4], x)


def test_features_estimate_the_kernel(kernel_with_features):
    name, options = kernel_with_features
    estimate, standard_error, exact = monte_carlo(name, tuple(options.items()))
    assert ((estimate - exact).abs() < 5 * standard_error + 1e-12).all()


def test_tolerance_would_catch_a_factor_of_two(kernel_with_features):
    """The standard error is 0.1-0.5% of the kernel (1.1% for arc-cosine degree 2: heavy-tailed p^4)."""
    name, options = kernel_with_features
    estimate, standard_error, exact = monte_carlo(name, tuple(options.items()))
    assert (standard_error < 0.015 * exact.abs()).all()
    assert ((estimate - 2 * exact).abs() > 5 * standard_error + 1e-12).all()
    assert ((estimate - exact / 2).abs() > 5 * standard_error + 1e-12).all()


def test_frequencies_draw_one_generator_per_split(kernel_with_features):
    feature_map = build_kernel(kernel_with_features[0], 3, kernel_with_features[1]).feature_map()
    like = torch.ones((), dtype=DTYPE)
    batched = feature_map.draw_frequencies(3, 50, [torch.Generator().manual_seed(s) for s in (3, 4)], like)
    assert batched.shape == (2, 3, 50) and batched.dtype == DTYPE
    torch.testing.assert_close(
        batched[1], feature_map.draw_frequencies(3, 50, torch.Generator().manual_seed(4), like), rtol=0, atol=0
    )


def test_rbf_frequencies_are_standard_normal_draws():
    generator = torch.Generator().manual_seed(5)
    omega = build_kernel("rbf", 3, {}).feature_map().draw_frequencies(3, 40, generator, torch.ones((), dtype=DTYPE))
    assert torch.equal(omega, torch.randn((3, 40), generator=torch.Generator().manual_seed(5), dtype=DTYPE))


def test_deep_arccos_has_no_feature_map():
    with pytest.raises(ValueError, match="ArcCosine of depth 3 has no random-feature map"):
        ArcCosine(3, degree=1, depth=3).feature_map()


@pytest.mark.parametrize("name, options", [*((name, {}) for name in KERNELS), ("arccos", {"depth": 2})])
def test_every_kernel_declares_the_feature_map_its_instances_have(name, options):
    """``random_features(options)``, what validation reads, is the built kernel's ``feature_map()``, or
    both refuse; ``options`` gives back what the kernel was built with."""
    kernel = build_kernel(name, 4, options)
    assert build_kernel(name, 4, kernel.options).options == kernel.options
    assert {**options, **kernel.options} == kernel.options
    problem = feature_map_problem(name, options)
    if problem is None:
        assert kernel.feature_map() == KERNELS[name].random_features(options)
    else:
        with pytest.raises(ValueError, match="has no random-feature map") as refused:
            kernel.feature_map()
        assert str(refused.value) == problem


@pytest.mark.parametrize(
    "projection_shape, variance_shape",
    [((3, 7, 5), (3,)), ((7, 5), ()), ((7, 5), (2,)), ((3, 100, 200), (3,)), ((3, 100, 200), (2, 3))],
)
def test_fourier_features_and_their_gradients_equal_scale_times_cos_and_sin(projection_shape, variance_shape):
    """The fused form (issue 39, item 4: cos and sin written into one output, backward from it) to 1e-12
    of its definition sqrt(s2 / H) [cos p, sin p], values and gradients in p and s2, batches broadcast."""
    generator = torch.Generator().manual_seed(3)
    projection = torch.randn(projection_shape, generator=generator, dtype=DTYPE, requires_grad=True)
    variance = (torch.rand(variance_shape, generator=generator, dtype=DTYPE) + 0.5).requires_grad_()
    batch_and_points = torch.broadcast_shapes(projection_shape[:-1], (*variance_shape, 1))
    weights = torch.randn((*batch_and_points, 2 * projection_shape[-1]), generator=generator, dtype=DTYPE)
    fused = FourierFeatures()(projection, variance)
    scale = (variance / projection_shape[-1]).sqrt()[..., None, None]
    reference = scale * torch.cat([projection.cos(), projection.sin()], dim=-1)
    torch.testing.assert_close(fused, reference, rtol=1e-12, atol=1e-12)
    for mine, theirs in zip(
        torch.autograd.grad((fused * weights).sum(), (projection, variance)),
        torch.autograd.grad((reference * weights).sum(), (projection, variance)),
    ):
        torch.testing.assert_close(mine, theirs, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("count", [20, 1000])
def test_fourier_features_written_into_halves_are_the_concatenated_ones_bit_for_bit(count):
    """From WRITE_HALVES_FROM projections cos and sin are written into the result's halves and scaled in place
    (issue 39): each element by the same operations as scale * cat([cos p, sin p]) (torch.equal)."""
    rows = WRITE_HALVES_FROM // count + 1
    projection = 3 * torch.randn(2, rows, count, generator=torch.Generator().manual_seed(5), dtype=DTYPE)
    variance = torch.tensor([0.7, 1.9], dtype=DTYPE)
    scale = (variance / count).sqrt()[..., None, None]
    assert torch.equal(
        FourierFeatures()(projection, variance), scale * torch.cat([projection.cos(), projection.sin()], dim=-1)
    )
