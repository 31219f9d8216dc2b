"""The CNN-GP kernel against a second, independent reading of the authors' ``ResnetKernel``.

The reference below follows gp-infer-net's ``kernel/resnet.py`` (``headless_network``, ``block_v2``,
``conv2d_fixed_padding``), ``kernel/conv.py`` (``ConvKernelBase.K``) and ``kernel/elementwise.py``
(``ReLUKernel``) step by step, in slow numpy loops, and shares nothing with ``gpstudy.kernels.cnngp``
but the constructor: a pair of images (x, x') is three covariance maps (var x, var x', cov), each
conv a constant filter var_weight / fan_in over an explicitly padded input, each ReLU the arc-cosine
expectation of the pre-activation maps. A misreading shared by the kernel and its Monte Carlo test
(padding, fan-in, block order, where the shortcut is taken, where the last ReLU sits) shows here.
"""

import math

import numpy as np
import pytest
import torch

from gpstudy import numerics
from gpstudy.kernels.cnngp import CNNGP

DTYPE = numerics.DEFAULT_DTYPE
BLOCK_SIZES = (2, 2, 2)  # 6 residual blocks in 3 groups (app. B.3)
BLOCK_STRIDES = (1, 2, 2)  # strided convs between the groups (the authors' block_strides)
KERNEL_SIZE = 3  # the authors' kernel_size; their conv_stride is 1
VAR_WEIGHT, VAR_BIAS = 1.0, 0.0  # sigma_w^2 = 1, sigma_b^2 = 0 (app. B.3)


def tf_pad(maps: np.ndarray, kernel_size: int, stride: int) -> np.ndarray:
    """``conv2d_fixed_padding``'s input: (k - 1) // 2 zeros before, the rest after, when strided (their
    ``fixed_padding``, then VALID); TensorFlow's SAME padding when not. maps ``[C, H, W]``."""
    pads = []
    for size in maps.shape[1:]:
        if stride > 1:
            total = kernel_size - 1
        else:  # SAME: out = ceil(size / stride), the missing rows split with the extra one at the end
            total = max((math.ceil(size / stride) - 1) * stride + kernel_size - size, 0)
        pads.append((total // 2, total - total // 2))
    return np.pad(maps, [(0, 0), *pads])


def tf_conv(maps: np.ndarray, kernel_size: int, stride: int) -> np.ndarray:
    """``conv2d_fixed_padding`` on covariance maps ``[C, H, W]``: a filter filled with var_weight / (C k^2),
    C input channels to one output channel, VALID over the padded maps; ``[1, H', W']``."""
    channels = maps.shape[0]
    weight = VAR_WEIGHT / (channels * kernel_size * kernel_size)
    padded = tf_pad(maps, kernel_size, stride)
    height = (padded.shape[1] - kernel_size) // stride + 1
    width = (padded.shape[2] - kernel_size) // stride + 1
    out = np.zeros((1, height, width))
    for i in range(height):
        for j in range(width):
            window = padded[:, i * stride : i * stride + kernel_size, j * stride : j * stride + kernel_size]
            out[0, i, j] = weight * window.sum()
    return out


def relu_kernel(cov: np.ndarray, var1: np.ndarray, var2: np.ndarray) -> np.ndarray:
    """``ReLUKernel.K``: sqrt(v1 v2) J(theta) / (2 pi), cos theta clipped to [-1, 1]."""
    norms = np.sqrt(var1) * np.sqrt(var2)
    cos = np.clip(cov / norms, -1.0, 1.0)
    theta = np.arccos(cos)
    return norms / (2 * np.pi) * (np.sqrt(1.0 - cos**2) + (np.pi - theta) * cos)


def recurse(maps: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``apply_recurse_kern``: the ReLU of (var x, var x', cov) from their pre-activation values."""
    var1, var2, cov = maps
    return var1 / 2, var2 / 2, relu_kernel(cov, var1, var2)  # Kdiag, Kdiag, K


def conv_all(maps, kernel_size: int, stride: int):
    """One conv of the network applied to the three maps (it is linear in each)."""
    return tuple(tf_conv(m, kernel_size, stride) for m in maps)


def block_v2(maps, projection_shortcut: bool, stride: int):
    """``block_v2``: shortcut = z, or the 1x1 strided conv of relu(z); conv3x3_stride, ReLU, conv3x3, add."""
    shortcut = maps
    maps = recurse(maps)
    if projection_shortcut:
        shortcut = conv_all(maps, 1, stride)
    maps = conv_all(maps, 3, stride)
    maps = recurse(maps)
    maps = conv_all(maps, 3, 1)
    return tuple(a + b for a, b in zip(maps, shortcut))


def authors_kernel(x: np.ndarray, y: np.ndarray) -> float:
    """k(x, y) of ``ConvKernelBase.K`` with ``ResnetKernel.headless_network``, images ``[C, H, W]``."""
    maps = (x * x, y * y, x * y)  # var_z_list: squares and the elementwise product
    maps = conv_all(maps, KERNEL_SIZE, 1)  # initial_conv
    for num_blocks, stride in zip(BLOCK_SIZES, BLOCK_STRIDES):
        maps = block_v2(maps, True, stride)  # the first block of every group projects
        for _ in range(1, num_blocks):
            maps = block_v2(maps, False, 1)
    dense = tuple(VAR_BIAS + VAR_WEIGHT * m.mean() for m in maps)  # reduce_mean over (C, H, W), dense layer
    last = recurse(tuple(np.array(d) for d in dense))  # the last nonlinearity, after the dense layer
    return float(VAR_BIAS + VAR_WEIGHT * last[2])  # the output layer on the cross term


@pytest.mark.parametrize("shape", [(1, 7, 6), (3, 5, 5)])
def test_matches_the_authors_resnet_kernel(shape):
    """Grams, cross-covariances and diagonals to 1e-12 on images with even and odd sides, where the
    strided convs' padding (one pixel each side, not TensorFlow's SAME) shows; s2 scales the output."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(5, math.prod(shape), generator=generator, dtype=DTYPE)
    x[3] = x[0].roll(1) - 0.5 * x[1]  # a correlated pair next to independent ones
    images = x.reshape(-1, *shape).numpy()
    expected = torch.tensor([[authors_kernel(a, b) for b in images] for a in images], dtype=DTYPE)
    kernel = CNNGP(math.prod(shape), image_shape=shape, variance=1.7)
    exact = {"rtol": 1e-12, "atol": 0.0}
    torch.testing.assert_close(kernel(x).detach(), 1.7 * expected, **exact)
    torch.testing.assert_close(kernel(x[:2], x[2:]).detach(), 1.7 * expected[:2, 2:], **exact)
    torch.testing.assert_close(kernel(x, diag=True).detach(), 1.7 * expected.diagonal(), **exact)


def test_reference_pads_as_tensorflow():
    """The reference's own padding: SAME at stride 1 keeps the size; a strided 3x3 conv of a 6-wide map
    pads one pixel each side (3 outputs at columns 0, 2, 4), where SAME would pad only the end."""
    maps = np.arange(12.0).reshape(1, 2, 6)
    assert tf_pad(maps, 3, 1).shape == (1, 4, 8) and tf_pad(maps, 1, 2).shape == (1, 2, 6)
    strided = tf_conv(maps, 3, 2)
    assert strided.shape == (1, 1, 3)
    assert strided[0, 0, 0] == pytest.approx((0 + 1 + 6 + 7) / 9)  # the window at (-1, -1): rows -1..1
