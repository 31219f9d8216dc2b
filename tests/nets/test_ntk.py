"""The NTK network: shapes, the mean at the weight means, J V J^T against finite differences."""

import math

import jsonschema
import numpy as np
import pytest
import torch

from gpstudy import generators as draws
from gpstudy import numerics
from gpstudy.kernels import RBF
from gpstudy.kernels.cnngp import CNNGP
from gpstudy.nets.ntk import LOG_STD_INIT, NTK

DTYPE = numerics.DEFAULT_DTYPE
SHAPE = (2, 5, 5)  # (C, H, W)
TINY = {"filters": (3, 3, 4, 4, 5, 5), "dense_units": 6}  # the trunk's sizes in these tests
CLASSES, HIDDEN = 3, 4


def build_ntk(output_tanh: bool = True, seed: int = 0) -> NTK:
    """A tiny NTK network whose head means and log-stds are random (not their initial values)."""
    network = NTK(
        CNNGP(50, image_shape=SHAPE),
        HIDDEN,
        torch.Generator().manual_seed(seed),
        classes=CLASSES,
        output_tanh=output_tanh,
        **TINY,
    )
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for parameter in [*network.mean.values(), *network.log_std.values()]:
            parameter.add_(0.5 * torch.randn(parameter.shape, generator=generator, dtype=DTYPE))
    return network


@pytest.fixture
def inputs() -> torch.Tensor:
    return torch.randn(5, 50, generator=torch.Generator().manual_seed(2), dtype=DTYPE)


def head_at(network: NTK, h: torch.Tensor, weights: dict[str, torch.Tensor]) -> torch.Tensor:
    """The C heads ``[C, n]`` at features h ``[n, F]`` with the given weights, class by class."""
    outputs = []
    for c in range(CLASSES):
        hidden = torch.tanh(h @ weights["hidden_weight"][c] + weights["hidden_bias"][c])
        out = hidden @ weights["output_weight"][c] + weights["output_bias"][c]
        outputs.append(out.tanh() if network.output_tanh else out)
    return torch.stack(outputs)


def test_shapes_covariance_and_marginals(inputs):
    network = build_ntk()
    mean, factor = network(inputs)
    width = TINY["dense_units"] * HIDDEN + 2 * HIDDEN + 1
    assert mean.shape == (CLASSES, 5) and factor.shape == (CLASSES, 5, width)
    _, cov = network.mean_and_covariance(inputs)
    assert cov.shape == (CLASSES, 5, 5) and torch.linalg.eigvalsh(cov).min() > 0
    marginal_mean, variance = network.marginals(inputs)
    torch.testing.assert_close(marginal_mean, mean)
    torch.testing.assert_close(variance, cov.diagonal(dim1=-2, dim2=-1))
    batched_mean, batched_factor = network(torch.stack([inputs, 2 * inputs]))
    assert batched_mean.shape == (2, CLASSES, 5) and batched_factor.shape == (2, CLASSES, 5, width)
    torch.testing.assert_close(batched_factor[1], network(2 * inputs)[1])


@pytest.mark.parametrize("output_tanh", [True, False])
def test_mean_is_the_head_at_the_weight_means(output_tanh, inputs):
    network = build_ntk(output_tanh)
    h = network.features(inputs)
    torch.testing.assert_close(network(inputs)[0], head_at(network, h, dict(network.mean)))


@pytest.mark.parametrize("output_tanh", [True, False])
def test_covariance_is_j_v_jt_by_finite_differences(output_tanh, inputs):
    """J by central differences in every head weight, then sum_w J_w sigma_w^2 J_w^T per class."""
    network = build_ntk(output_tanh)
    with torch.no_grad():
        h = network.features(inputs)
        means = {name: value.clone() for name, value in network.mean.items()}
        expected = torch.zeros(CLASSES, 5, 5, dtype=DTYPE)
        step = 1e-6
        for name, value in means.items():
            variance = (2 * network.log_std[name]).exp()
            for index in np.ndindex(value.shape):
                shifted = [dict(means) for _ in range(2)]
                for sign, weights in zip((1, -1), shifted):
                    weights[name] = value.clone()
                    weights[name][index] += sign * step
                jacobian = (head_at(network, h, shifted[0]) - head_at(network, h, shifted[1])) / (2 * step)
                expected += variance[index] * jacobian.unsqueeze(-1) * jacobian.unsqueeze(-2)
        factor = network(inputs)[1]
    assert expected.abs().max() > 1e-3
    torch.testing.assert_close(factor @ factor.mT, expected, rtol=1e-6, atol=1e-9)


def test_gradients_reach_every_parameter(inputs):
    network = build_ntk()
    mean, cov = network.mean_and_covariance(inputs)
    (mean.sum() + cov.sum() + network.marginals(inputs)[1].sum()).backward()
    for name, parameter in network.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name


def test_initialization_follows_the_authors_code():
    """At the paper's sizes on MNIST: head means N(0, 0.01^2) within 2 std, biases 0, log-stds -2;
    the trunk's dense layer reads 256 maps of 7x7; a 51401-wide factor per class and point."""
    network = NTK(CNNGP(784, image_shape=(1, 28, 28)), 100, torch.Generator().manual_seed(0), classes=10)
    weight = network.mean["hidden_weight"]
    assert weight.shape == (10, 512, 100) and weight.abs().max() <= 0.02 and 0.008 < weight.std() < 0.01
    assert network.mean["output_weight"].shape == (10, 100) and not network.mean["output_bias"].any()
    assert not network.mean["hidden_bias"].any()
    assert all((value == LOG_STD_INIT).all() for value in network.log_std.values())
    dense = network.trunk[-2]
    assert dense.in_features == 256 * 7 * 7 and dense.out_features == 512
    assert all(not module.bias.any() for module in network.trunk.modules() if hasattr(module, "bias"))
    width = sum(value[0].numel() for value in network.mean.values())
    assert width == 512 * 100 + 2 * 100 + 1


def test_image_shape_generators_and_dtype():
    kernel = RBF(50)
    with pytest.raises(ValueError, match="pass image_shape"):
        NTK(kernel, HIDDEN, torch.Generator(), classes=2, **TINY)
    with pytest.raises(ValueError, match="one torch.Generator .* not batched over splits"):
        NTK(kernel, HIDDEN, [torch.Generator(), torch.Generator()], classes=2, image_shape=SHAPE, **TINY)
    alone = NTK(kernel, HIDDEN, torch.Generator().manual_seed(3), classes=2, image_shape=SHAPE, **TINY)
    one_split = NTK(kernel, HIDDEN, [torch.Generator().manual_seed(3)], classes=2, image_shape=SHAPE, **TINY)
    x = torch.randn(1, 3, 50, dtype=DTYPE)
    torch.testing.assert_close(one_split(x)[1], alone(x[0])[1].unsqueeze(0))  # a batch of one split: [1, C, n, r]
    network = NTK(RBF(50, dtype=torch.float32), HIDDEN, torch.Generator(), classes=2, image_shape=SHAPE, **TINY)
    mean, factor = network(torch.randn(3, 50))
    assert mean.dtype == factor.dtype == torch.float32 and math.prod(factor.shape[:2]) == 6


def test_options_schema():
    options = {
        "image_shape": [1, 28, 28],
        "filters": [8, 16],
        "strides": [1, 2],
        "dense_units": 32,
        "output_tanh": False,
    }
    jsonschema.validate(options, NTK.options_schema)
    for bad in [{"strides": [3]}, {"hidden_units": 100}, {"image_shape": [28, 28]}]:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, NTK.options_schema)
    with pytest.raises(ValueError, match="2 filters for 1 strides"):
        NTK(CNNGP(50, image_shape=SHAPE), HIDDEN, torch.Generator(), classes=2, filters=[3, 3], strides=[1])


def test_one_class_drops_the_class_dimension(inputs):
    """classes=1 (a likelihood of one latent): [n] and [n, r], the values of a C = 1 network's class 0."""
    network = NTK(CNNGP(50, image_shape=SHAPE), HIDDEN, torch.Generator().manual_seed(0), classes=1, **TINY)
    mean, factor = network(inputs)
    assert mean.shape == (5,) and factor.shape == (5, TINY["dense_units"] * HIDDEN + 2 * HIDDEN + 1)
    marginal_mean, variance = network.marginals(inputs)
    torch.testing.assert_close(marginal_mean, mean)
    torch.testing.assert_close(variance, factor.square().sum(-1) + numerics.JITTER)
    assert network(inputs[:0])[0].shape == (0,)  # no points, no error


# The authors' trunk (gp-infer-net's bnn/multi_output/resnet.py, headless_network and conv_res_block):
# a 3x3 "same" conv to 64 channels without activation; groups of block_sizes blocks, nf = 64, 128, 256;
# a group's first block resizes (3x3 stride-2 convs on the main path and the shortcut) where its stride
# is 2; then a dense layer of 512 and a ReLU (build_resnet).
AUTHORS_BLOCK_SIZES, AUTHORS_BLOCK_STRIDES, AUTHORS_FIRST_FILTERS = (2, 2, 2), (1, 2, 2), 64


def authors_convs(image_shape, first_filters=AUTHORS_FIRST_FILTERS):
    """Per trunk layer, its convs (in, out, kernel, stride, input HxW, output HxW) in the authors' order
    (conv1, conv2, residual), and the dense layer's (in, out); TensorFlow's SAME: out = ceil(in / stride)."""
    channels, size = image_shape[0], tuple(image_shape[1:])

    def conv(c_in, c_out, stride, at):
        return c_in, c_out, 3, stride, at, tuple(-(-s // stride) for s in at)

    layers = [[conv(channels, first_filters, 1, size)]]
    channels, nf = first_filters, first_filters
    for num_blocks, stride in zip(AUTHORS_BLOCK_SIZES, AUTHORS_BLOCK_STRIDES):
        for block in range(num_blocks):
            resize = block == 0 and stride == 2
            step = stride if resize else 1
            out = conv(channels, nf, step, size)[-1]
            layers.append(
                [conv(channels, nf, step, size), conv(nf, nf, 1, out)]
                + ([conv(channels, nf, step, size)] if resize else [])
            )
            channels, size = nf, out
        nf *= 2
    return layers, (channels * math.prod(size), 512)


def trunk_convs(network: NTK):
    """The trunk's convs as ``authors_convs`` lists them, read by forward hooks on a ``meta`` pass."""
    seen = {}
    hooks = [
        module.register_forward_hook(lambda m, args, out: seen.__setitem__(m, (args[0], out)))
        for module in network.trunk.modules()
        if isinstance(module, torch.nn.Conv2d)
    ]
    network.features(torch.empty(1, math.prod(network.image_shape), dtype=DTYPE, device="meta"))
    for hook in hooks:
        hook.remove()
    layers = []
    for layer in network.trunk:
        convs = [module for module in layer.modules() if isinstance(module, torch.nn.Conv2d)]
        if convs:
            layers.append(
                [
                    (
                        m.in_channels,
                        m.out_channels,
                        m.kernel_size[0],
                        m.stride[0],
                        tuple(seen[m][0].shape[-2:]),
                        tuple(seen[m][1].shape[-2:]),
                    )
                    for m in convs
                ]
            )
    dense = network.trunk[-2]
    return layers, (dense.in_features, dense.out_features)


def meta_ntk(image_shape) -> NTK:
    """The paper's NTK network (10 classes, 100 hidden units) on ``meta``: no values, no cost."""
    kernel = CNNGP(math.prod(image_shape), image_shape=image_shape).to("meta")
    return NTK(kernel, 100, draws.new_generators([0], torch.device("meta")), classes=10)


@pytest.mark.parametrize("image_shape, parameters", [((1, 28, 28), 9_522_432), ((3, 32, 32), 11_489_664)])
def test_trunk_is_the_authors_network(image_shape, parameters):
    """Every conv's channels, stride and map sizes, block by block, and the dense layer, as the authors'
    code builds them; the parameter counts of their network on MNIST and CIFAR10 (weights and biases)."""
    network = meta_ntk(image_shape)
    layers, dense = authors_convs(image_shape)
    assert trunk_convs(network) == (layers, dense)
    assert sum(p.numel() for p in network.trunk.parameters()) == parameters
    authors_count = sum(c_in * c_out * k * k + c_out for layer in layers for c_in, c_out, k, *_ in layer)
    assert authors_count + dense[0] * dense[1] + dense[1] == parameters


def same_conv(h: torch.Tensor, conv: torch.nn.Conv2d, stride: int) -> torch.Tensor:
    """``layers.conv2d`` with padding SAME (zeros split before/after, the extra one after) and a bias."""
    pads = []
    for size in reversed(h.shape[-2:]):
        total = max((-(-size // stride) - 1) * stride + 3 - size, 0)
        pads += [total // 2, total - total // 2]
    return torch.nn.functional.conv2d(torch.nn.functional.pad(h, pads), conv.weight, conv.bias, stride)


def test_trunk_computes_the_authors_forward():
    """The trunk's features equal the authors' forward (``headless_network`` then ReLU), written here with
    the trunk's weights taken in the authors' order (conv1, conv2, residual), random biases included: the
    shortcut is the block's input, ReLUs after conv1 and after the sum, none after the first conv. Odd
    maps (5 -> 3 -> 2), where SAME pads one pixel on each side like the trunk."""
    network = NTK(
        CNNGP(50, image_shape=SHAPE),
        HIDDEN,
        torch.Generator().manual_seed(0),
        classes=CLASSES,
        filters=(3, 3, 6, 6, 12, 12),
    )
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in network.trunk.parameters():
            parameter.copy_(0.3 * torch.randn(parameter.shape, generator=generator, dtype=DTYPE))
    x = torch.randn(4, 50, generator=generator, dtype=DTYPE)
    convs = iter([module for module in network.trunk.modules() if isinstance(module, torch.nn.Conv2d)])
    h = same_conv(x.reshape(-1, *SHAPE), next(convs), 1)
    for num_blocks, stride in zip(AUTHORS_BLOCK_SIZES, AUTHORS_BLOCK_STRIDES):
        for block in range(num_blocks):
            resize = block == 0 and stride == 2
            z = same_conv(same_conv(h, next(convs), 2 if resize else 1).relu(), next(convs), 1)
            h = (z + (same_conv(h, next(convs), 2) if resize else h)).relu()
    expected = network.trunk[-2](h.flatten(1)).relu()
    assert next(convs, None) is None
    torch.testing.assert_close(network.features(x), expected, rtol=1e-12, atol=1e-12)
