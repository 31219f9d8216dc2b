"""The CNN-GP kernel of a residual ConvNet (Garriga-Alonso et al., 2019; GPNet appendix B.3)."""

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from gpstudy.kernels.base import Kernel
from gpstudy.numerics import DEFAULT_DTYPE

GROUP_STRIDES = (1, 2, 2)  # three groups of residual blocks; the first block of each strides (appendix B.3)
PATCH = 3  # 3x3 filters
PATCH_MODES = ("mean", "sum")  # weight variance sigma_w^2 / (C k^2) (authors' code) or sigma_w^2 / C (paper)
PAIRS_PER_CHUNK = 2048  # image pairs whose covariance maps are propagated at once (memory bound)

Relu = Callable[[Tensor, int], Tensor]  # (pre-activation covariance maps, ReLU index) -> E[relu(z) relu(z')]


def relu_expectation(cov: Tensor, var1: Tensor, var2: Tensor) -> Tensor:
    """E[relu(z) relu(z')] = sqrt(v v') J_1(theta) / (2 pi), theta = arccos(c / sqrt(v v')) (app. B.3, s_h).

    Elementwise over maps of any shape. J_1 = sin t + (pi - t) cos t (``arccos.angular``) is written in
    the cosine, sqrt(1 - cos^2) + (pi - t) cos, which spares a sine and a cosine per entry. As
    ``ArcCosine``: the product floored for a zero input, the cosine clamped just inside [-1, 1] so
    that gradients stay finite.
    """
    finfo = torch.finfo(cov.dtype)
    norm = (var1 * var2).clamp_min(finfo.tiny).sqrt()
    cos = (cov / norm).clamp(finfo.eps - 1, 1 - finfo.eps)
    return norm * ((1 - cos.square()).sqrt() + (math.pi - cos.arccos()) * cos) / (2 * math.pi)


def _pair_relu(maps1: list[Tensor], maps2: list[Tensor], first: Tensor, second: Tensor) -> Relu:
    """The ReLUs of image pairs (first_p, second_p), from each image's recorded variance maps."""

    def relu(cov: Tensor, index: int) -> Tensor:
        return relu_expectation(cov, maps1[index][first], maps2[index][second])

    return relu


class CNNGP(Kernel):
    """k(x, x') = s2 K_CNN(x / l, x' / l): the output covariance of an infinitely wide residual ConvNet.

    The ConvNet is the authors' ``ResnetKernel`` (``kernel/resnet.py`` and ``kernel/conv.py`` of
    gp-infer-net, from Garriga-Alonso et al.'s code); the paper says only: 6 residual blocks in 3
    groups, strided convolutions between them, sigma_w^2 = 1, sigma_b^2 = 0 (app. B.3). With z the
    pre-activations: a first 3x3 conv of the image; per group (strides 1, 2, 2) ``blocks``
    pre-activation (v2) blocks z -> conv3x3(relu(conv3x3_stride(relu(z)))) + shortcut, the shortcut a
    1x1 strided conv of relu(z) in a group's first block and z itself in the others; then a dense
    layer on the flattened z, a ReLU and the dense output (the code's order: the ReLU comes after the
    average over locations). sigma_w^2 = 1 and no bias in every layer; the output's sigma_w^2 is s2.

    Every channel of a layer is i.i.d. in the limit, so a layer is one covariance map v_p(x, x') per
    location p, propagated per pair of images (never a pixel-pair covariance): a 3x3 conv takes the
    patch mean of the maps (zero padding), a ReLU E[relu(z) relu(z')] through J_1
    (``relu_expectation``; v / 2 on the diagonal), a residual sum adds its branches' maps (their
    weights are independent), a 1x1 conv keeps the map (subsampled when strided) and the dense layer
    averages it over locations. The first conv averages x_c x'_c / l_c^2 over channels and the patch.

    The patch mean is the code's weight variance sigma_w^2 / (C k^2); the paper's formula (app. B.3,
    u ~ N(0, sigma_w^2 / C), v^(l+1) a sum over the patch) is ``patch="sum"``. "mean" is the default:
    the paper's numbers come from the code, and with sigma_w^2 = 1 the sum multiplies the variance by
    9 per conv (the output variance of MNIST images in [-1, 1] is about 6e7 against 0.1).

    Inputs are flat ``[..., n, D]`` images, D = C H W, reshaped to ``image_shape``; the default
    (D, 1, 1) is a 1x1 image of D channels, so that any D works. The base class's ARD lengthscales
    scale each pixel (as ``ArcCosine``'s): at l = 1, the study's setting, the kernel is the plain
    CNN-GP; one shared lengthscale only rescales it, like s2 (sigma_b^2 = 0 and ReLU make
    k(a x, b x') = a b k(x, x')). Not stationary; no random-feature map.

    Args:
        input_dim: D = C H W.
        image_shape: (C, H, W) of an input, default (D, 1, 1).
        blocks: residual blocks per group (2: the study's 6 blocks).
        patch: "mean" (sigma_w^2 / (C k^2) per weight, the authors' code) or "sum" (sigma_w^2 / C,
            the paper's formula, app. B.3).
        pairs_per_chunk: image pairs propagated at once, about 10 maps each in memory (under autograd
            every chunk's maps are kept for the backward pass).
        lengthscale, variance, dtype, batch_shape: as ``Kernel``.
    """

    options_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "image_shape": {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 3, "maxItems": 3},
            "blocks": {"type": "integer", "minimum": 0},
            "patch": {"enum": list(PATCH_MODES)},
            "pairs_per_chunk": {"type": "integer", "minimum": 1},
        },
    }

    def __init__(
        self,
        input_dim: int,
        image_shape: Sequence[int] | None = None,
        blocks: int = 2,
        patch: str = "mean",
        pairs_per_chunk: int = PAIRS_PER_CHUNK,
        lengthscale: float | Sequence[float] = 1.0,
        variance: float = 1.0,
        dtype: torch.dtype = DEFAULT_DTYPE,
        batch_shape: tuple[int, ...] = (),
    ):
        image_shape = tuple(image_shape) if image_shape is not None else (input_dim, 1, 1)
        if len(image_shape) != 3 or math.prod(image_shape) != input_dim:
            raise ValueError(f"CNNGP: image_shape {image_shape} (C, H, W) does not hold {input_dim} inputs")
        if patch not in PATCH_MODES:
            raise ValueError(f"CNNGP: patch must be one of {PATCH_MODES}, got {patch!r}")
        super().__init__(input_dim, lengthscale, variance, dtype, batch_shape)
        self.image_shape, self.blocks, self.patch, self.pairs_per_chunk = image_shape, blocks, patch, pairs_per_chunk

    @property
    def options(self) -> dict[str, Any]:
        return {
            "image_shape": list(self.image_shape),
            "blocks": self.blocks,
            "patch": self.patch,
            "pairs_per_chunk": self.pairs_per_chunk,
        }

    def _images(self, x: Tensor) -> Tensor:
        """x / l ``[..., n, D]`` as images ``[..., n, C, H, W]``."""
        return (x / self.lengthscale.unsqueeze(-2)).unflatten(-1, self.image_shape)

    def _conv(self, v: Tensor, stride: int) -> Tensor:
        """A 3x3 conv, sigma_w^2 = 1: the patch mean (or sum) of maps ``[P, 1, H, W]`` (app. B.3, v^(l+1))."""
        mean = F.avg_pool2d(v, PATCH, stride, padding=PATCH // 2, count_include_pad=True)
        return mean if self.patch == "mean" else PATCH**2 * mean

    def _network(self, v: Tensor, relu: Relu) -> Tensor:
        """The output covariance ``[P]`` from the first conv's maps ``[P, 1, H, W]``; ``relu(v, i)``: the i-th ReLU."""
        index = itertools.count()
        for stride in GROUP_STRIDES:
            for block in range(self.blocks):
                step = stride if block == 0 else 1
                a = relu(v, next(index))
                shortcut = a[..., ::step, ::step] if block == 0 else v  # 1x1 projection of relu(z), or z
                v = self._conv(relu(self._conv(a, step), next(index)), 1) + shortcut  # branches add
        return relu(v.mean((-3, -2, -1)), next(index))  # dense layer on flattened z, ReLU (s2: the output layer)

    def _first_conv(self, images1: Tensor, images2: Tensor) -> Tensor:
        """The first conv's maps ``[P, 1, H, W]`` of image pairs ``[P, C, H, W]``: x . x' over channels and patch."""
        return self._conv((images1 * images2).mean(-3, keepdim=True), 1)

    def _diagonal(self, images: Tensor) -> tuple[list[Tensor], Tensor]:
        """Every ReLU's input variance maps ``[N, ...]`` and the output variance ``[N]`` of images ``[N, C, H, W]``."""
        maps = []

        def relu(v: Tensor, index: int) -> Tensor:
            maps.append(v)
            return v / 2  # E[relu(z)^2] = v / 2

        return maps, self._network(self._first_conv(images, images), relu)

    def _cross(
        self, images1: Tensor, images2: Tensor, maps1: list[Tensor], maps2: list[Tensor], first: Tensor, second: Tensor
    ) -> Tensor:
        """k(images1[first_p], images2[second_p]) ``[P]`` without s2, in chunks of ``pairs_per_chunk`` pairs."""
        values = []
        for start in range(0, len(first), self.pairs_per_chunk):
            i, j = first[start : start + self.pairs_per_chunk], second[start : start + self.pairs_per_chunk]
            relu = _pair_relu(maps1, maps2, i, j)
            values.append(self._network(self._first_conv(images1[i], images2[j]), relu))
        return torch.cat(values) if values else first.new_zeros(0, dtype=images1.dtype)

    def K(self, x1: Tensor, x2: Tensor | None) -> Tensor:  # noqa: N802 (GPflow's name)
        a = self._images(x1)
        b = a if x2 is None else self._images(x2)
        batch = torch.broadcast_shapes(a.shape[:-4], b.shape[:-4])
        n1, n2 = a.shape[-4], b.shape[-4]
        a = a.expand(*batch, *a.shape[-4:]).reshape(-1, *self.image_shape)  # [B n1, C, H, W]
        b = b.expand(*batch, *b.shape[-4:]).reshape(-1, *self.image_shape)
        offset = torch.arange(math.prod(batch), device=a.device).unsqueeze(-1)
        if x2 is None:  # pairs i < j; the diagonal in closed form
            i, j = torch.triu_indices(n1, n1, 1, device=a.device)
            maps, diagonal = self._diagonal(a)
            values = self._cross(a, a, maps, maps, (offset * n1 + i).flatten(), (offset * n1 + j).flatten())
            k = torch.arange(n1, device=a.device)
            index = torch.cat(
                [
                    (offset * n1 * n1 + i * n1 + j).flatten(),
                    (offset * n1 * n1 + j * n1 + i).flatten(),
                    (offset * n1 * n1 + k * n1 + k).flatten(),
                ]
            )
            values = torch.cat([values, values, diagonal])
        else:
            i, j = (
                grid.flatten()
                for grid in torch.meshgrid(
                    torch.arange(n1, device=a.device), torch.arange(n2, device=a.device), indexing="ij"
                )
            )
            maps1, maps2 = self._diagonal(a)[0], self._diagonal(b)[0]
            values = self._cross(a, b, maps1, maps2, (offset * n1 + i).flatten(), (offset * n2 + j).flatten())
            index = (offset * n1 * n2 + i * n2 + j).flatten()
        matrix = values.new_zeros(index.numel()).index_put((index,), values).reshape(*batch, n1, n2)
        return self.variance[..., None, None] * matrix

    def K_diag(self, x: Tensor) -> Tensor:  # noqa: N802 (GPflow's name)
        images = self._images(x)
        diagonal = self._diagonal(images.reshape(-1, *self.image_shape))[1].reshape(images.shape[:-3])
        return self.variance[..., None] * diagonal
