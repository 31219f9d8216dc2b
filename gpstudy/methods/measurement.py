"""Measurement-point samplers c(x) for GPNet and FBNN (section 3.3, appendix B.2)."""

import torch
from torch import Tensor, nn

from gpstudy import generators as draws


class MeasurementSampler(nn.Module):
    """c(x): draws the measurement points X_M afresh at every iteration (per split in a batch)."""

    @classmethod
    def build(cls, x_train: Tensor, noise_std: Tensor, box: tuple | None) -> "MeasurementSampler":
        """The sampler from the training inputs ``[*batch, N, D]``, the noise std ``[*batch, D]`` of noisy
        inputs and the box's corners ``(low, high)``, each ``[*batch, D]`` in standardized units."""
        raise NotImplementedError

    def forward(self, num_points: int, generators: draws.Generators) -> Tensor:
        """X_M ``[*batch, size(num_points), D]``, drawn from ``generators``."""
        raise NotImplementedError

    def size(self, num_points: int) -> int:
        """How many points a draw of ``num_points`` gives: all of them by default."""
        return num_points


class TrainingInputs(MeasurementSampler):
    """c(x) = the empirical distribution of the training inputs, used when pretraining is off.

    Draws without replacement, so at most N distinct points: M > N gives all N training inputs, as
    the authors' shuffled measurement batches do.

    Args:
        x_train: ``[*batch, N, D]``, kept as a non-persistent buffer (not in the state dict).
    """

    def __init__(self, x_train: Tensor):
        super().__init__()
        self.register_buffer("x_train", x_train, persistent=False)

    @classmethod
    def build(cls, x_train: Tensor, noise_std: Tensor, box: tuple | None) -> "TrainingInputs":
        return cls(x_train)

    def size(self, num_points: int) -> int:
        """``min(num_points, N)``: distinct training inputs."""
        return min(num_points, self.x_train.shape[-2])

    def forward(self, num_points: int, generators: draws.Generators) -> Tensor:
        order = draws.randperm(self.x_train.shape[-2], generators, self.x_train.device)
        return draws.take_rows(self.x_train, order[..., :num_points])


class NoisyTrainingInputs(TrainingInputs):
    """Training inputs with Gaussian noise: x_n + N(0, diag(s^2)); appendix B.2 takes s = l / sqrt(2)
    from the pretrained lengthscales l (the training inputs convolved with the prior RBF kernel).

    The noise std is fixed at construction (kept in the state dict), not adapted when hyperparameters
    are learned online.

    Args:
        x_train: ``[*batch, N, D]``.
        noise_std: s ``[*batch, D]``.
    """

    def __init__(self, x_train: Tensor, noise_std: Tensor):
        super().__init__(x_train)
        self.register_buffer("noise_std", noise_std.detach().clone())

    @classmethod
    def build(cls, x_train: Tensor, noise_std: Tensor, box: tuple | None) -> "NoisyTrainingInputs":
        return cls(x_train, noise_std)

    def forward(self, num_points: int, generators: draws.Generators) -> Tensor:
        points = super().forward(num_points, generators)
        noise = draws.randn(tuple(points.shape[-2:]), generators, like=points)
        return points + self.noise_std.unsqueeze(-2) * noise


class UniformBox(MeasurementSampler):
    """c(x) uniform on the box [low, high] (Snelson: the plotted range).

    Args:
        low: lower corner ``[*batch, D]``.
        high: upper corner ``[*batch, D]``.
    """

    def __init__(self, low: Tensor, high: Tensor):
        super().__init__()
        self.register_buffer("low", low)
        self.register_buffer("high", high)

    @classmethod
    def build(cls, x_train: Tensor, noise_std: Tensor, box: tuple | None) -> "UniformBox":
        if box is None:
            raise ValueError("measurement 'box' needs config.box = (low, high)")
        low, high = (torch.as_tensor(corner, dtype=x_train.dtype, device=x_train.device) for corner in box)
        return cls(low, high)

    def forward(self, num_points: int, generators: draws.Generators) -> Tensor:
        unit = draws.rand((num_points, self.low.shape[-1]), generators, like=self.low)
        return self.low.unsqueeze(-2) + (self.high - self.low).unsqueeze(-2) * unit


SAMPLERS: dict[str, type[MeasurementSampler]] = {
    "noisy": NoisyTrainingInputs,  # training inputs + N(0, s^2): pretraining on
    "train": TrainingInputs,  # plain training inputs: pretraining off
    "box": UniformBox,  # uniform in config.box: Snelson
}


def build_measurement_sampler(
    name: str, x_train: Tensor, noise_std: Tensor, box: tuple | None = None
) -> MeasurementSampler:
    """The sampler called ``name`` ("noisy", "train" or "box").

    Args:
        name: a key of ``SAMPLERS``.
        x_train: training inputs ``[*batch, N, D]``.
        noise_std: the noise std ``[*batch, D]`` of "noisy" (appendix B.2: the prior lengthscales / sqrt 2).
        box: ``(low, high)`` corners ``[*batch, D]`` (nested sequences), for "box" only.
    """
    if name not in SAMPLERS:
        raise ValueError(f"unknown measurement sampler {name!r}; known: {sorted(SAMPLERS)}")
    return SAMPLERS[name].build(x_train, noise_std, box)
