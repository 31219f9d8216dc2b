"""Measurement-point samplers c(x) for GPNet and FBNN (section 3.3, appendix B.2)."""

import math

import torch
from torch import Tensor, nn

from gpstudy.gaussian import standard_normal


class MeasurementSampler(nn.Module):
    """c(x): draws the measurement points X_M afresh at every iteration."""

    @classmethod
    def build(cls, x_train: Tensor, lengthscale: Tensor, box: tuple | None) -> "MeasurementSampler":
        """The sampler from the training inputs ``[N, D]``, prior lengthscales ``[D]`` and config box."""
        raise NotImplementedError

    def forward(self, num_points: int, generator: torch.Generator) -> Tensor:
        """X_M ``[num_points, D]`` (fewer for samplers that say so), drawn from ``generator``."""
        raise NotImplementedError


class TrainingInputs(MeasurementSampler):
    """c(x) = the empirical distribution of the training inputs, used when pretraining is off.

    Draws without replacement, so at most N distinct points: M > N gives all N training inputs, as
    the authors' shuffled measurement batches do.

    Args:
        x_train: ``[N, D]``, kept as a non-persistent buffer (not in the state dict).
    """

    def __init__(self, x_train: Tensor):
        super().__init__()
        self.register_buffer("x_train", x_train, persistent=False)

    @classmethod
    def build(cls, x_train: Tensor, lengthscale: Tensor, box: tuple | None) -> "TrainingInputs":
        return cls(x_train)

    def forward(self, num_points: int, generator: torch.Generator) -> Tensor:
        order = torch.randperm(self.x_train.shape[0], generator=generator, device=generator.device)
        return self.x_train[order[:num_points].to(self.x_train.device)]


class NoisyTrainingInputs(TrainingInputs):
    """Training inputs convolved with the prior RBF kernel: x_n + N(0, diag(l^2 / 2)) (appendix B.2).

    The lengthscales are the pretrained ones, fixed at construction (kept in the state dict) and not
    adapted when hyperparameters are learned online.

    Args:
        x_train: ``[N, D]``.
        lengthscale: the prior kernel's lengthscales ``[D]``.
    """

    def __init__(self, x_train: Tensor, lengthscale: Tensor):
        super().__init__(x_train)
        self.register_buffer("noise_std", lengthscale.detach() / math.sqrt(2))

    @classmethod
    def build(cls, x_train: Tensor, lengthscale: Tensor, box: tuple | None) -> "NoisyTrainingInputs":
        return cls(x_train, lengthscale)

    def forward(self, num_points: int, generator: torch.Generator) -> Tensor:
        points = super().forward(num_points, generator)
        return points + self.noise_std * standard_normal(tuple(points.shape), generator, like=points)


class UniformBox(MeasurementSampler):
    """c(x) uniform on the box [low, high] (Snelson: the plotted range).

    Args:
        low: lower corner ``[D]``.
        high: upper corner ``[D]``.
    """

    def __init__(self, low: Tensor, high: Tensor):
        super().__init__()
        self.register_buffer("low", low)
        self.register_buffer("high", high)

    @classmethod
    def build(cls, x_train: Tensor, lengthscale: Tensor, box: tuple | None) -> "UniformBox":
        if box is None:
            raise ValueError("measurement 'box' needs config.box = (low, high)")
        low, high = (torch.as_tensor(corner, dtype=x_train.dtype, device=x_train.device) for corner in box)
        return cls(low, high)

    def forward(self, num_points: int, generator: torch.Generator) -> Tensor:
        shape = (num_points, self.low.shape[-1])
        unit = torch.rand(shape, generator=generator, device=generator.device, dtype=self.low.dtype)
        return self.low + (self.high - self.low) * unit.to(self.low.device)


SAMPLERS: dict[str, type[MeasurementSampler]] = {
    "noisy": NoisyTrainingInputs,  # training inputs + N(0, l^2/2): pretraining on
    "train": TrainingInputs,  # plain training inputs: pretraining off
    "box": UniformBox,  # uniform in config.box: Snelson
}


def build_measurement_sampler(
    name: str, x_train: Tensor, lengthscale: Tensor, box: tuple | None = None
) -> MeasurementSampler:
    """The sampler called ``name`` ("noisy", "train" or "box").

    Args:
        name: a key of ``SAMPLERS``.
        x_train: training inputs ``[N, D]``.
        lengthscale: the (pretrained) prior lengthscales ``[D]``.
        box: ``(low, high)`` corners, for "box" only.
    """
    if name not in SAMPLERS:
        raise ValueError(f"unknown measurement sampler {name!r}; known: {sorted(SAMPLERS)}")
    return SAMPLERS[name].build(x_train, lengthscale, box)
