"""The CNN-GP kernel: a symmetric PSD Gram, a one-layer closed form, and the limit of random ConvNets."""

import math

import jsonschema
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gpstudy import numerics
from gpstudy.kernels import ArcCosine
from gpstudy.kernels.cnngp import CNNGP, GROUP_STRIDES, relu_expectation

DTYPE = numerics.DEFAULT_DTYPE
SHAPE = (2, 5, 5)  # (C, H, W): odd sizes, so that strided maps keep an edge column


def images(n: int, shape=SHAPE, seed: int = 0) -> torch.Tensor:
    """``n`` random flat images ``[n, C H W]``."""
    return torch.randn(n, math.prod(shape), generator=torch.Generator().manual_seed(seed), dtype=DTYPE)


def test_gram_is_symmetric_psd_and_consistent():
    x = images(7)
    kernel = CNNGP(50, image_shape=SHAPE, lengthscale=1.3, variance=1.7)
    gram = kernel(x)
    assert torch.equal(gram, gram.mT)
    assert torch.linalg.eigvalsh(gram / gram.diagonal().max()).min() > -1e-12
    torch.testing.assert_close(kernel(x, diag=True), gram.diagonal())
    torch.testing.assert_close(kernel(x[:3], x[3:]), gram[:3, 3:])
    torch.testing.assert_close(kernel(x, x), gram)  # every pair through the recursion, the diagonal too
    kernel.pairs_per_chunk = 4
    torch.testing.assert_close(kernel(x), gram)
    torch.testing.assert_close(kernel(x[:3], x[3:]), gram[:3, 3:])


def test_leading_batch_dimensions():
    x1, x2 = images(4).unflatten(0, (2, 2)), images(3, seed=1)
    kernel = CNNGP(50, image_shape=SHAPE)
    torch.testing.assert_close(kernel(x1, x2)[1], kernel(x1[1], x2))
    torch.testing.assert_close(kernel(x1)[1], kernel(x1[1]))
    torch.testing.assert_close(kernel(x1, diag=True)[1], kernel(x1[1], diag=True))
    split_kernels = CNNGP(50, image_shape=SHAPE, variance=[1.0, 2.0], batch_shape=(2,))
    torch.testing.assert_close(split_kernels(x2)[1], 2 * kernel(x2))


def test_homogeneous_of_degree_one_in_each_input():
    """sigma_b^2 = 0 and ReLU: k(a x, b x') = a b k(x, x') for a, b > 0."""
    x = images(4)
    kernel = CNNGP(50, image_shape=SHAPE)
    torch.testing.assert_close(kernel(2 * x[:2], 0.5 * x[2:]), kernel(x[:2], x[2:]))
    torch.testing.assert_close(kernel(3 * x, diag=True), 9 * kernel(x, diag=True))


def one_layer(u: np.ndarray, v: np.ndarray, patch: str) -> float:
    """The network of no residual block: first conv, dense, ReLU, output (app. B.3 by loops).

    m = mean_p sum_{q in patch(p)} w u_q . v_q / C, w = 1 / 9 ("mean") or 1 ("sum"), zero padding;
    then E[relu(z) relu(z')] = sqrt(m_uu m_vv) J_1(theta) / (2 pi).
    """

    def dense(a: np.ndarray, b: np.ndarray) -> float:
        channels, height, width = a.shape
        total = 0.0
        for p in np.ndindex(height, width):
            for dy, dx in np.ndindex(3, 3):
                q = (p[0] + dy - 1, p[1] + dx - 1)
                if 0 <= q[0] < height and 0 <= q[1] < width:
                    total += a[:, q[0], q[1]] @ b[:, q[0], q[1]] / channels
        return total / (height * width) / (9 if patch == "mean" else 1)

    uu, vv, uv = dense(u, u), dense(v, v), dense(u, v)
    theta = math.acos(np.clip(uv / math.sqrt(uu * vv), -1, 1))
    return math.sqrt(uu * vv) * (math.sin(theta) + (math.pi - theta) * math.cos(theta)) / (2 * math.pi)


@pytest.mark.parametrize("patch", ["mean", "sum"])
def test_one_layer_matches_its_closed_form(patch):
    x = images(5)
    lengthscale = 0.5 + torch.rand(50, generator=torch.Generator().manual_seed(3), dtype=DTYPE)
    kernel = CNNGP(50, image_shape=SHAPE, blocks=0, patch=patch, lengthscale=lengthscale.tolist(), variance=1.7)
    scaled = (x / lengthscale).reshape(-1, *SHAPE).numpy()
    expected = torch.tensor([[1.7 * one_layer(u, v, patch) for v in scaled] for u in scaled], dtype=DTYPE)
    torch.testing.assert_close(kernel(x), expected)
    torch.testing.assert_close(kernel(x[:2], x[2:]), expected[:2, 2:])


def test_one_pixel_one_layer_is_the_arc_cosine_kernel():
    """A 1x1 image of D channels: m = x . x' / (9 D), so k = s2 / (18 pi D) ArcCosine_1(x, x')."""
    x = images(6, shape=(3, 1, 1))
    kernel = CNNGP(3, blocks=0, lengthscale=[0.5, 1.0, 2.0], variance=1.7)
    arccos = ArcCosine(3, degree=1, depth=1, lengthscale=[0.5, 1.0, 2.0], variance=1.7 / (18 * math.pi * 3))
    torch.testing.assert_close(kernel(x), arccos(x))
    torch.testing.assert_close(kernel(x[:2], x[2:]), arccos(x[:2], x[2:]))


def test_relu_expectation_at_the_extremes():
    """c = v: E[relu(z)^2] = v / 2; c = -v: 0; c = 0: sqrt(v v') / (2 pi)."""
    v = torch.tensor([2.0, 3.0], dtype=DTYPE)
    torch.testing.assert_close(relu_expectation(v, v, v), v / 2)
    torch.testing.assert_close(relu_expectation(-v, v, v), torch.zeros(2, dtype=DTYPE), atol=1e-12, rtol=0)
    torch.testing.assert_close(relu_expectation(0 * v, v, 4 * v), 2 * v / (2 * math.pi))


def random_convnets(
    x: torch.Tensor, nets: int, width: int, dense: int, variance: float, patch: str, generator: torch.Generator
) -> torch.Tensor:
    """E[f(x) f(x')] given all but the output layer ``[nets, n, n]``, for ``nets`` random ConvNets of
    ``width`` channels and ``dense`` hidden units, the architecture of ``CNNGP`` (2 blocks per group).

    Weights N(0, 1 / fan_in), fan_in = C k^2 ("mean") or C ("sum"), no biases; the output layer's
    N(0, s2 / dense) is integrated out: s2 mean_d relu(h_d(x)) relu(h_d(x')). The networks run at once
    as convolution groups, in float32 (three times faster draws; Monte Carlo error is ~3%).
    """
    n, channels = x.shape[:2]

    def conv(h: torch.Tensor, fan_in: int, k: int, stride: int) -> torch.Tensor:
        scale = fan_in * k * k if patch == "mean" or k == 1 else fan_in
        weight = torch.randn(nets * width, fan_in, k, k, generator=generator) / math.sqrt(scale)
        return F.conv2d(h, weight, stride=stride, padding=k // 2, groups=nets)

    z = conv(x.float().repeat(1, nets, 1, 1), channels, 3, 1)  # [n, nets width, H, W]
    for stride in GROUP_STRIDES:
        for block in range(2):
            step = stride if block == 0 else 1
            a = z.relu()
            shortcut = conv(a, width, 1, step) if block == 0 else z
            z = conv(conv(a, width, 3, step).relu(), width, 3, 1) + shortcut
    flat = z.unflatten(1, (nets, width)).flatten(2).transpose(0, 1)  # [nets, n, width H W]
    hidden = (flat @ torch.randn(nets, flat.shape[-1], dense, generator=generator) / math.sqrt(flat.shape[-1])).relu()
    return (variance * hidden @ hidden.mT / dense).double()


@pytest.mark.parametrize("patch", ["mean", "sum"])
def test_matches_the_covariance_of_random_convnets(patch):
    """400 ConvNets of width 32 on 8x8 images: every entry within 4 standard errors, about 3% of the
    entry with "mean" and 6% with "sum" (each 3x3 conv multiplies the variance by 9: the residual
    branches swamp the shortcuts and the network acts deeper).

    The images are a random one, its shift by a pixel, its negative, a mix with another and an
    independent one. Width 32 suffices: the diagonal is unbiased at any width, and the off-diagonal
    bias of a finite width (O(1 / width)) stays under the error here.
    """
    generator = torch.Generator().manual_seed(0)
    base, other, independent = torch.randn(3, 2, 8, 8, generator=generator, dtype=DTYPE)
    x = torch.stack([base, base.roll(1, -1), -base, 0.6 * base + 0.8 * other, independent])
    kernel = CNNGP(128, image_shape=(2, 8, 8), patch=patch, variance=1.3)
    samples = random_convnets(x, 400, 32, 512, 1.3, patch, generator)
    estimate, error = samples.mean(0), samples.std(0) / math.sqrt(len(samples))
    exact = kernel(x.flatten(1)).detach()
    assert (error / exact).max() < 0.08  # the test can see a 30% error
    assert ((estimate - exact).abs() / error).max() < 4


def test_zero_image_gives_finite_values_and_gradients():
    x = torch.cat([images(3), torch.zeros(1, 50, dtype=DTYPE)])
    kernel = CNNGP(50, image_shape=SHAPE)
    gram = kernel(x)
    (gram.sum() + kernel(x, images(2, seed=1)).sum() + kernel(x, diag=True).sum()).backward()
    assert torch.isfinite(gram).all() and gram[-1].abs().max() < 1e-100
    for parameter in kernel.parameters():
        assert torch.isfinite(parameter.grad).all() and parameter.grad.abs().sum() > 0


def test_dtype_follows_the_parameters():
    kernel = CNNGP(50, image_shape=SHAPE, dtype=torch.float32)
    x = images(4).float()
    assert kernel(x).dtype == kernel(x, diag=True).dtype == torch.float32
    torch.testing.assert_close(kernel(x).double(), CNNGP(50, image_shape=SHAPE)(x.double()), rtol=1e-4, atol=1e-6)


def test_options_are_checked():
    schema = CNNGP.options_schema
    jsonschema.validate({"image_shape": [1, 28, 28], "blocks": 2, "patch": "sum", "pairs_per_chunk": 512}, schema)
    for options in [{"image_shape": [28, 28]}, {"patch": "max"}, {"blocks": -1}, {"depth": 3}]:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(options, schema)
    assert CNNGP(12).image_shape == (12, 1, 1)
    with pytest.raises(ValueError, match=r"image_shape \(1, 28, 28\) .* 12 inputs"):
        CNNGP(12, image_shape=(1, 28, 28))
    with pytest.raises(ValueError, match="patch"):
        CNNGP(12, patch="max")
