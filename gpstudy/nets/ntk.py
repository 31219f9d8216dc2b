"""The NTK inference network for classification (section 4.2, appendix B.3)."""

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from gpstudy import generators as draws
from gpstudy.kernels import KERNELS, Kernel
from gpstudy.nets.base import InferenceNetwork
from gpstudy.numerics import JITTER

FILTERS = (64, 64, 128, 128, 256, 256)  # the trunk's residual blocks (appendix B.3)
STRIDES = (1, 1, 2, 1, 2, 1)  # 3 groups of 2 blocks, strides 1, 2, 2 (the authors' code)
DENSE_UNITS = 512  # the dense layer on top of the trunk (appendix B.3)
HIDDEN_UNITS = 100  # the head's hidden units per class (appendix B.3)
MEAN_INIT_STD = 0.01  # head weight means ~ N(0, 0.01^2) truncated at 2 std, biases 0 (the authors' code)
LOG_STD_INIT = -2.0  # every head weight's log-std at start (the authors' code)


class _Block(nn.Module):
    """The authors' ``conv_res_block``: relu(conv3x3(relu(conv3x3_stride(h))) + shortcut(h)), the
    shortcut a 3x3 strided conv where the block strides or changes the width, else h."""

    def __init__(self, channels_in: int, channels_out: int, stride: int, like: dict[str, Any]):
        super().__init__()
        self.first = nn.Conv2d(channels_in, channels_out, 3, stride, padding=1, **like)
        self.second = nn.Conv2d(channels_out, channels_out, 3, 1, padding=1, **like)
        resize = stride != 1 or channels_in != channels_out
        self.shortcut = nn.Conv2d(channels_in, channels_out, 3, stride, padding=1, **like) if resize else None

    def forward(self, h: Tensor) -> Tensor:
        shortcut = h if self.shortcut is None else self.shortcut(h)
        return (self.second(self.first(h).relu()) + shortcut).relu()


def _glorot_uniform(weight: Tensor, generator: torch.Generator) -> Tensor:
    """U(-a, a) draws of ``weight``'s shape, a = sqrt(6 / (fan_in + fan_out)) (Glorot and Bengio 2010,
    TensorFlow's default initializer; fans as ``torch.nn.init``'s)."""
    fan_in, fan_out = nn.init._calculate_fan_in_and_fan_out(weight)
    bound = math.sqrt(6.0 / (fan_in + fan_out))
    return bound * (2 * draws.rand(tuple(weight.shape), generator, weight) - 1)


def _truncated_normal(like: Tensor, std: float, generator: torch.Generator) -> Tensor:
    """N(0, std^2) draws of ``like``'s shape truncated at 2 std, by the inverse CDF of uniform draws."""
    low, high = (0.5 * (1 + math.erf(bound / math.sqrt(2))) for bound in (-2.0, 2.0))  # Phi(-2), Phi(2)
    uniform = low + (high - low) * draws.rand(tuple(like.shape), generator, like)
    return std * math.sqrt(2) * torch.erfinv(2 * uniform - 1)


class NTK(InferenceNetwork):
    """Per class c, f_c(x) = g(t(x); w_c): a deterministic ResNet trunk t and a Gaussian-weight MLP head.

    The trunk (the authors' ``bnn/multi_output/resnet.py``; the paper says only "the same structure as
    the prior ConvNet" with filters 64, 64, 128, 128, 256, 256): a 3x3 conv to ``filters[0]`` channels
    without activation, post-activation residual blocks (``_Block``) with ``filters`` and ``strides``,
    a dense layer of ``dense_units`` on the flattened maps, a ReLU. The head of class c is the MLP
    g(h; w_c) = tanh(v_c^T tanh(W_c^T h + b_c) + u_c), 512-100-1 with tanh; the outer tanh is the
    authors' code's (the paper is silent), dropped with ``output_tanh=False``. Its weights
    w_c = (W_c, b_c, v_c, u_c) ~ N(m_c, diag(sigma_c^2)), sigma = exp(log-std). Linearized in w_c,
    g(x; w) = g(x; m) + J (w - m) (section 4.2, k_NTK): f_c ~ GP(g(.; m_c), J_c diag(sigma_c^2) J_c^T),
    J_c the Jacobian of g in w_c at m_c, analytic for this MLP (``_head``); classes are independent.

    Shapes (``InferenceNetwork``'s contract for C latents): the class in front of the points,
    for x ``[*batch, n, D]`` the mean is ``[*batch, C, n]`` and the factor J sigma ``[*batch, C, n, r]``
    with r = F K + 2 K + 1 (F dense units, K hidden units: 51401 at the paper's sizes), so that
    ``covariance`` is ``[*batch, C, n, n]`` and ``marginals`` ``[*batch, C, n]``; a softmax likelihood
    takes ``mean.mT`` ``[*batch, n, C]``. ``marginals`` never forms the factor. With ``classes=1`` (a
    likelihood of one latent) the class dimension is dropped: ``[*batch, n]`` and ``[*batch, n, r]``.

    Initialization (the authors' code): trunk weights Glorot-uniform (TensorFlow's default) and
    biases 0; head means ``MEAN_INIT_STD`` truncated normal (biases 0), log-stds ``LOG_STD_INIT``.
    Strided convs pad one pixel on each side (TensorFlow's "SAME" pads an even map at the end only:
    the same sizes, a one-pixel shift). One split only: the trunk is not batched over splits, so
    ``generators`` is one generator or a batch of one (inputs ``[1, n, D]`` then give ``[1, C, n]``).
    Under ``mixed`` (a float32 ``feature_dtype``) the trunk, the heads and the factor are computed in
    float32 and returned in float64, their Gram formed in float64 (``InferenceNetwork``).

    Args:
        kernel: the prior kernel, for the dtype and, where it has one (``CNNGP``), the image shape.
        hidden_units: K, the head's hidden units.
        generators: one ``torch.Generator``, or a sequence of one (a batch of one split; see
            ``gpstudy.generators``).
        classes: C, the number of classes (latent functions).
        image_shape: (channels, height, width) of a flat input; the kernel's ``image_shape`` when omitted.
        filters: channels of each residual block.
        strides: stride of each residual block.
        dense_units: F, the dense layer on top of the trunk.
        output_tanh: end each head with tanh (the authors' code).
    """

    name = "ntk"
    several_latents = True
    predict_chunk = 256  # the trunk holds about 4.5 MB per MNIST image (18 GB for 4096 images, measured)
    options_schema: ClassVar[dict[str, Any]] = {  # JSON schema of the options a config may pass
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "image_shape": {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 3, "maxItems": 3},
            "filters": {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1},
            "strides": {"type": "array", "items": {"enum": [1, 2]}, "minItems": 1},
            "dense_units": {"type": "integer", "minimum": 1},
            "output_tanh": {"type": "boolean"},
        },
    }

    @classmethod
    def kernel_problem(cls, kernel: str, kernel_options: Mapping[str, Any], options: Mapping[str, Any]) -> str | None:
        """The NTK needs an image shape: its own ``image_shape`` option or the kernel's (``CNNGP``)."""
        with_shape = [name for name, known in KERNELS.items() if "image_shape" in known.options_schema["properties"]]
        if "image_shape" in options or kernel in with_shape:
            return None
        return (
            f"network {cls.name!r} needs the images' shape, but kernel {kernel!r} has none; give it in "
            f"network_options.image_shape or use a kernel with an image_shape ({', '.join(with_shape)})"
        )

    def __init__(
        self,
        kernel: Kernel,
        hidden_units: int,
        generators: draws.Generators,
        classes: int,
        image_shape: Sequence[int] | None = None,
        filters: Sequence[int] = FILTERS,
        strides: Sequence[int] = STRIDES,
        dense_units: int = DENSE_UNITS,
        output_tanh: bool = True,
    ):
        super().__init__()
        if not isinstance(generators, torch.Generator):
            if len(generators) != 1:
                raise ValueError(
                    f"NTK takes one torch.Generator (or a batch of one split), not {len(generators)}: "
                    "its trunk is not batched over splits; train one split per job (splits_per_job: 1)"
                )
            generators = generators[0]
        if len(filters) != len(strides):
            raise ValueError(f"NTK: {len(filters)} filters for {len(strides)} strides")
        image_shape = tuple(image_shape if image_shape is not None else getattr(kernel, "image_shape", ()))
        if len(image_shape) != 3 or math.prod(image_shape) != kernel.input_dim:
            raise ValueError(
                f"NTK: image_shape {image_shape} (C, H, W) does not hold the kernel's "
                f"{kernel.input_dim} inputs; pass image_shape"
            )
        like = {"dtype": kernel.variance.dtype, "device": kernel.variance.device}  # every parameter where the run is
        self.image_shape, self.output_tanh, self.classes = image_shape, output_tanh, classes
        layers, channels, height, width = [], image_shape[0], *image_shape[1:]
        layers.append(nn.Conv2d(channels, filters[0], 3, padding=1, **like))
        channels = filters[0]
        for out, stride in zip(filters, strides):
            layers.append(_Block(channels, out, stride, like))
            channels, height, width = out, (height - 1) // stride + 1, (width - 1) // stride + 1
        layers += [nn.Flatten(), nn.Linear(channels * height * width, dense_units, **like), nn.ReLU()]
        self.trunk = nn.Sequential(*layers)
        shapes = {
            "hidden_weight": (classes, dense_units, hidden_units),
            "hidden_bias": (classes, hidden_units),
            "output_weight": (classes, hidden_units),
            "output_bias": (classes,),
        }
        self.mean = nn.ParameterDict({name: nn.Parameter(torch.zeros(shape, **like)) for name, shape in shapes.items()})
        self.log_std = nn.ParameterDict(
            {name: nn.Parameter(torch.full(shape, LOG_STD_INIT, **like)) for name, shape in shapes.items()}
        )
        with torch.no_grad():
            for module in self.trunk.modules():
                if isinstance(module, nn.Conv2d | nn.Linear):
                    module.weight.copy_(_glorot_uniform(module.weight, generators))
                    module.bias.zero_()
            for name in ("hidden_weight", "output_weight"):
                self.mean[name].copy_(_truncated_normal(self.mean[name], MEAN_INIT_STD, generators))

    @classmethod
    def from_options(
        cls,
        kernel: Kernel,
        generators: draws.Generators,
        *,
        latent_dim: int,
        hidden_units: int,
        live_variance: bool,
        options: Mapping[str, Any],
    ) -> "NTK":
        """C = ``latent_dim`` heads of ``hidden_units`` units, the trunk from ``options`` (``options_schema``);
        ``live_variance`` does not apply (the network has no s2)."""
        return cls(kernel, hidden_units, generators, classes=latent_dim, **options)

    @property
    def parameter_dtype(self) -> torch.dtype:
        """The parameters' dtype, that of every output."""
        return self.mean["output_bias"].dtype

    def features(self, x: Tensor) -> Tensor:
        """The trunk's output h ``[*batch, n, F]`` for flat images x ``[*batch, n, D]``, in ``feature_dtype``
        (the trunk's weights cast to it: autograd casts their gradients back)."""
        images = self.in_feature_dtype(x).reshape(-1, *self.image_shape)
        if images.dtype == self.parameter_dtype:
            h = self.trunk(images)
        else:
            weights = {name: self.in_feature_dtype(value) for name, value in self.trunk.named_parameters()}
            h = torch.func.functional_call(self.trunk, weights, (images,))
        return h.reshape(*x.shape[:-1], h.shape[-1])  # n = 0 too

    def _head(self, h: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The heads at their weight means and the pieces of their Jacobians, for h ``[*batch, n, F]``.

        Returns g ``[*batch, C, n]``, its slope in the output pre-activation s ``[*batch, C, n]``
        (1 - g^2, or 1 without the outer tanh), the hidden units a ``[*batch, C, n, K]`` and
        delta = s v (1 - a^2) ``[*batch, C, n, K]``, all in h's dtype. Then dg/du = s, dg/dv = s a,
        dg/db = delta and dg/dW = h delta^T (chain rule through the two tanh layers).
        """
        mean = {name: value.to(h.dtype) for name, value in self.mean.items()}
        hidden = torch.einsum("...nf,cfk->...cnk", h, mean["hidden_weight"]) + mean["hidden_bias"].unsqueeze(-2)
        a = hidden.tanh()
        out = (a * mean["output_weight"].unsqueeze(-2)).sum(-1) + mean["output_bias"].unsqueeze(-1)
        g = out.tanh() if self.output_tanh else out
        slope = 1 - g.square() if self.output_tanh else torch.ones_like(g)
        delta = slope.unsqueeze(-1) * mean["output_weight"].unsqueeze(-2) * (1 - a.square())
        return g, slope, a, delta

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The mean g(t(x); m) ``[*batch, C, n]`` and factor J sigma ``[*batch, C, n, F K + 2 K + 1]`` (C = 1:
        ``[*batch, n]`` and ``[*batch, n, F K + 2 K + 1]``), computed in ``feature_dtype`` and returned in
        the parameters' dtype (the Gram J sigma^2 J^T, ``covariance``, is formed in that)."""
        h = self.features(x)
        g, slope, a, delta = self._head(h)
        std = {name: self.in_feature_dtype(log_std).exp() for name, log_std in self.log_std.items()}
        weight = h.unsqueeze(-3).unsqueeze(-1) * (delta.unsqueeze(-2) * std["hidden_weight"].unsqueeze(-3))
        factor = torch.cat(
            [
                weight.flatten(-2),  # dg/dW sigma_W: h_f delta_k sigma_fk
                delta * std["hidden_bias"].unsqueeze(-2),
                slope.unsqueeze(-1) * a * std["output_weight"].unsqueeze(-2),
                (slope * std["output_bias"].unsqueeze(-1)).unsqueeze(-1),
            ],
            dim=-1,
        )
        g, factor = g.to(self.parameter_dtype), factor.to(self.parameter_dtype)
        return (g, factor) if self.classes > 1 else (g.squeeze(-2), factor.squeeze(-3))

    def marginals(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The mean and marginal variances ``[*batch, C, n]`` (C = 1: ``[*batch, n]``), sum_j (J sigma)_j^2 +
        JITTER, without the factor; computed in ``feature_dtype`` (a sum of squares: no cancellation) and
        returned in the parameters' dtype."""
        h = self.features(x)
        g, slope, a, delta = self._head(h)
        var = {name: (2 * self.in_feature_dtype(log_std)).exp() for name, log_std in self.log_std.items()}
        hidden = torch.einsum("...nf,cfk->...cnk", h.square(), var["hidden_weight"]) + var["hidden_bias"].unsqueeze(-2)
        output = (a.square() * var["output_weight"].unsqueeze(-2)).sum(-1) + var["output_bias"].unsqueeze(-1)
        variance = ((delta.square() * hidden).sum(-1) + slope.square() * output).to(self.parameter_dtype) + JITTER
        g = g.to(self.parameter_dtype)
        return (g, variance) if self.classes > 1 else (g.squeeze(-2), variance.squeeze(-2))
