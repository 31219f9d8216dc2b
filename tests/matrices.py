"""Matrices and comparisons the linear-algebra and Gaussian tests share: random SPD matrices of a given size and
condition, a comparison to the result's scale, values and gradients of a form, the operators a call dispatches."""

import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gpstudy import numerics
from gpstudy.linalg import HALVES_FROM

DTYPE = numerics.DEFAULT_DTYPE


def random_spd_of(root: torch.Tensor) -> torch.Tensor:
    """root root^T / n + I / 2 ``[*batch, n, n]`` from a ``[*batch, n, n]`` root."""
    return root @ root.mT / root.shape[-1] + 0.5 * torch.eye(root.shape[-1], dtype=DTYPE)


def random_spd(generator: torch.Generator, *shape: int) -> torch.Tensor:
    """A well-conditioned random SPD matrix of shape [*batch, n, n]."""
    return random_spd_of(torch.randn(*shape, generator=generator, dtype=DTYPE))


def spd_of_condition(generator: torch.Generator, condition_number: float, *shape: int) -> torch.Tensor:
    """A random SPD matrix ``[*batch, n, n]``: a random rotation of eigenvalues log-spaced from 1 to
    1 / ``condition_number``."""
    *batch, size = shape
    rotation = torch.linalg.qr(torch.randn(*batch, size, size, generator=generator, dtype=DTYPE))[0]
    eigenvalues = torch.logspace(0, -math.log10(condition_number), size, dtype=DTYPE)
    return (rotation * eigenvalues) @ rotation.mT


def assert_close_to_scale(got: torch.Tensor, expected: torch.Tensor, tolerance: float = 1e-10) -> None:
    """|got - expected| <= tolerance max|expected| entry by entry: equal to within a rounding of the result."""
    error = (got - expected).abs().max() / expected.abs().max().clamp_min(torch.finfo(DTYPE).tiny)
    assert error <= tolerance, f"largest difference {error:.1e} of the largest entry (tolerance {tolerance:.0e})"


FACTORIZATION_CASES = [(size, condition_number) for size in (20, HALVES_FROM + 1) for condition_number in (1e2, 1e8)]


def old_inverse(chol: torch.Tensor) -> torch.Tensor:
    """(L L^T)^-1 as it was formed before: LAPACK's potri."""
    return torch.cholesky_inverse(chol)


def values_and_gradients(form, argument: torch.Tensor, upstream: torch.Tensor) -> list[torch.Tensor]:
    """form(argument) and the gradient of (form(argument) * upstream).sum() with respect to ``argument``."""
    leaf = argument.detach().requires_grad_()
    value = form(leaf)
    (value * upstream).sum().backward()
    return [value.detach(), leaf.grad]


class OperatorNames(TorchDispatchMode, set):
    """The names of the aten operators called within (``linalg_solve_triangular``, ...)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.add(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))
