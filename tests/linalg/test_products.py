"""Grams and symmetric products by row halves against the plain product and its concatenated form."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gpstudy import linalg
from gpstudy.linalg import HALVES_FROM, blocked, gram
from gpstudy.linalg.products import squared_norm

from matrices import DTYPE


def test_gram_matches_the_product_and_passes_gradcheck(generator):
    for rows in (5, 8):  # odd and even: the product is built from two row halves
        wide = torch.randn(3, rows, 6, generator=generator, dtype=DTYPE)
        torch.testing.assert_close(gram(wide), wide @ wide.mT)
        assert torch.equal(gram(wide), gram(wide).mT)
    factor = torch.randn(2, 4, 3, generator=generator, dtype=DTYPE, requires_grad=True)
    torch.testing.assert_close(gram(factor), factor @ factor.mT)
    assert torch.autograd.gradcheck(gram, (factor,))  # any upstream gradient, symmetric or not


@pytest.mark.parametrize("rows", [HALVES_FROM - 1, HALVES_FROM, HALVES_FROM + 1])
def test_gram_of_one_product_and_of_row_halves_match_the_product(generator, rows):
    wide = torch.randn(2, rows, 6, generator=generator, dtype=DTYPE)
    torch.testing.assert_close(gram(wide), wide @ wide.mT, rtol=1e-14, atol=1e-14)
    if rows < HALVES_FROM:  # one product's lower triangle, mirrored (row halves' diagonal blocks are BLAS's)
        assert torch.equal(gram(wide), gram(wide).mT)


def old_symmetric_product(factor: torch.Tensor, upper_triangular: bool = False) -> torch.Tensor:
    """symmetric_product's row halves as they were joined before issue 39's item 4: concatenations."""
    half = factor.shape[-2] // 2
    top = factor[..., :half, :]
    if upper_triangular:
        bottom, top_right = factor[..., half:, half:], top[..., half:]
    else:
        bottom, top_right = factor[..., half:, :], top
    lower_left = bottom @ top_right.mT
    return torch.cat(
        [torch.cat([top @ top.mT, lower_left.mT], dim=-1), torch.cat([lower_left, bottom @ bottom.mT], dim=-1)], dim=-2
    )


@pytest.mark.parametrize("shape", [(HALVES_FROM + 1, 9), (3, HALVES_FROM, 200), (2, 2, HALVES_FROM + 3, 7)])
@pytest.mark.parametrize("upper_triangular", [False, True])
def test_symmetric_product_by_halves_equals_its_concatenated_form_bit_for_bit(generator, shape, upper_triangular):
    """The GEMMs written into the result's blocks compute what the concatenated products did, element for
    element (unbatched, batched and with two batch dimensions; odd and even rows)."""
    factor = torch.randn(shape, generator=generator, dtype=DTYPE)
    if upper_triangular:
        factor = torch.randn((*shape[:-1], shape[-2]), generator=generator, dtype=DTYPE).triu()
    new = linalg.symmetric_product(factor, upper_triangular)
    assert new.shape == (*factor.shape[:-1], factor.shape[-2])
    assert torch.equal(new, old_symmetric_product(factor, upper_triangular))


@pytest.mark.parametrize("dim", [-1, -2, (-2, -1)])
def test_squared_norm_equals_the_sum_of_squares_values_and_gradients(generator, dim):
    x = torch.randn(3, 7, 5, generator=generator, dtype=DTYPE, requires_grad=True)
    upstream = torch.randn_like(x.square().sum(dim))
    expected = x.square().sum(dim)
    (expected_grad,) = torch.autograd.grad(expected, x, upstream)
    got = squared_norm(x, dim)
    (got_grad,) = torch.autograd.grad(got, x, upstream)
    tolerance = 1e-13 if DTYPE == torch.float64 else 1e-5
    torch.testing.assert_close(got, expected, rtol=tolerance, atol=0)
    torch.testing.assert_close(got_grad, expected_grad, rtol=tolerance, atol=0)


class GemmFlops(TorchDispatchMode):
    """The multiply-adds x 2 of the batched GEMMs (``bmm``, ``baddbmm``, in place or not) dispatched inside it."""

    def __init__(self):
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in (torch.ops.aten.bmm, torch.ops.aten.baddbmm, torch.ops.aten.baddbmm_):
            a, b = args[:2] if func.overloadpacket == torch.ops.aten.bmm else args[1:3]
            self.flops += 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("upper_triangular", [False, True])
@pytest.mark.parametrize("rows", [4 * HALVES_FROM - 3, 2 * HALVES_FROM, 4 * HALVES_FROM])
def test_off_a_cpu_the_diagonal_blocks_are_made_by_halves_again(generator, monkeypatch, rows, upper_triangular):
    """Off a CPU (``library_device`` false, as on CUDA) each diagonal block of HALVES_FROM rows or more is split
    again: the same F F^T to 1e-13, with the products of the recursion (for a general F 5/8 of a full product at
    two levels, 9/16 at three; on a CPU one GEMM a diagonal block, 3/4); odd rows: the values."""
    factor = torch.randn(2, rows, 40, generator=generator, dtype=DTYPE)
    if upper_triangular:
        factor = torch.randn(2, rows, rows, generator=generator, dtype=DTYPE).triu()
    with GemmFlops() as on_cpu_count:
        on_cpu = linalg.symmetric_product(factor, upper_triangular)
    monkeypatch.setattr(blocked, "library_device", lambda tensor: False)
    with GemmFlops() as off_cpu_count:
        off_cpu = linalg.symmetric_product(factor, upper_triangular)
    expected = factor @ factor.mT
    torch.testing.assert_close(off_cpu, expected, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(on_cpu, expected, rtol=1e-13, atol=1e-13)
    full = 2 * 2 * rows * rows * factor.shape[-1]
    if upper_triangular:
        assert off_cpu_count.flops < on_cpu_count.flops <= 0.5 * full * 1.01
    elif rows % HALVES_FROM == 0:  # halves of equal rows down to below HALVES_FROM
        levels, size = 0, rows
        while size >= HALVES_FROM:
            levels, size = levels + 1, size // 2
        assert levels >= 2
        assert on_cpu_count.flops == pytest.approx(0.75 * full, rel=0.01)
        assert off_cpu_count.flops == pytest.approx((0.5 + 2 ** -(levels + 1)) * full, rel=0.01)  # 5/8, 9/16
