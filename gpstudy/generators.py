"""Random draws with one generator per split, so that a split draws the same numbers in a batch as alone.

Every random draw of the library goes through this module. ``generators`` is either one
``torch.Generator`` (unbatched models: draws of ``shape``) or a sequence of S generators (models with a
leading split dimension: draws of ``[S, *shape]``, row s from generator s). Each draw happens on its
generator's device and is moved to the device of ``like``.
"""

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

Generators = torch.Generator | Sequence[torch.Generator]


def new_generators(seeds: Sequence[int], device: torch.device) -> list[torch.Generator]:
    """One generator per seed, each at the start of its stream, on ``device`` (on the CPU for a device
    that has no generators of its own, such as ``meta``: draws are then made there and moved)."""
    where = device if device.type in ("cpu", "cuda") else torch.device("cpu")
    return [torch.Generator(device=where).manual_seed(seed) for seed in seeds]


def batch_shape(generators: Generators) -> tuple[int, ...]:
    """``()`` for one generator, ``(S,)`` for a sequence of S."""
    return () if isinstance(generators, torch.Generator) else (len(generators),)


def _as_list(generators: Generators) -> list[torch.Generator]:
    return [generators] if isinstance(generators, torch.Generator) else list(generators)


def _each(draw: Callable[[torch.Generator], Tensor], generators: Generators) -> Tensor:
    """``draw(generator)``, or the draws of every generator stacked along a new leading dimension."""
    if isinstance(generators, torch.Generator):
        return draw(generators)
    return torch.stack([draw(generator) for generator in generators])


def randn(shape: tuple[int, ...], generators: Generators, like: Tensor) -> Tensor:
    """N(0, 1) draws ``[*batch, *shape]`` with ``like``'s dtype and device."""

    def draw(generator: torch.Generator) -> Tensor:
        return torch.randn(shape, generator=generator, device=generator.device, dtype=like.dtype)

    return _each(draw, generators).to(like.device)


def rand(shape: tuple[int, ...], generators: Generators, like: Tensor) -> Tensor:
    """U(0, 1) draws ``[*batch, *shape]`` with ``like``'s dtype and device."""

    def draw(generator: torch.Generator) -> Tensor:
        return torch.rand(shape, generator=generator, device=generator.device, dtype=like.dtype)

    return _each(draw, generators).to(like.device)


def randperm(n: int, generators: Generators, device: torch.device) -> Tensor:
    """Random permutations of ``range(n)``, ``[*batch, n]``, on ``device``."""
    return _each(lambda generator: torch.randperm(n, generator=generator, device=generator.device), generators).to(
        device
    )


def take_rows(values: Tensor, indices: Tensor) -> Tensor:
    """The rows ``[*batch, k, *rest]`` of ``values`` ``[*batch, N, *rest]`` at each split's ``indices``
    ``[*batch, k]`` (e.g. a minibatch or a random subset drawn above)."""
    rest = values.ndim - indices.ndim
    return torch.take_along_dim(values, indices.reshape(*indices.shape, *[1] * rest), dim=indices.ndim - 1)


def get_state(generators: Generators) -> list[Tensor]:
    """The generators' states, for a checkpoint."""
    return [generator.get_state() for generator in _as_list(generators)]


def set_state(generators: Generators, states: list[Tensor]) -> None:
    """Restore states saved by ``get_state``."""
    batch = _as_list(generators)
    if len(states) != len(batch):
        raise ValueError(f"{len(states)} generator states for {len(batch)} generators")
    for generator, state in zip(batch, states):
        generator.set_state(state.cpu())  # a checkpoint loaded onto a GPU moved the states there too
