"""The block-stored Cholesky factor: its dense form and its product, values and gradients."""

import pytest
import torch

from gpstudy import numerics
from gpstudy.nets import block_tril
from gpstudy.nets.block_tril import BlockTril

DTYPE = numerics.DEFAULT_DTYPE


def randomized(size: int, batch_shape: tuple[int, ...], blocks: int, seed: int = 0) -> BlockTril:
    """A factor whose every stored entry is random (not the identity it starts as)."""
    factor = BlockTril(size, 1.0, torch.zeros((), dtype=DTYPE), batch_shape, blocks)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in factor.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=DTYPE))
    return factor


def test_starts_as_a_scaled_identity():
    factor = BlockTril(9, 1.3, torch.zeros((), dtype=DTYPE), (2,))
    torch.testing.assert_close(factor.dense(), 1.3 * torch.eye(9, dtype=DTYPE).expand(2, 9, 9))


@pytest.mark.parametrize("blocks", [1, 3, 4, 20])
def test_dense_form_is_lower_triangular_with_positive_diagonal(blocks):
    dense = randomized(10, (), blocks).dense()
    assert torch.equal(dense, dense.tril()) and (dense.diagonal() > 0).all()
    rows, columns = torch.tril_indices(10, 10, offset=-1)
    assert (dense[rows, columns] != 0).all()  # every entry below the diagonal is a stored parameter


@pytest.mark.parametrize(
    "batch_shape, phi_shape",
    [((), (7, 10)), ((), (2, 7, 10)), ((3,), (3, 7, 10)), ((2, 3), (2, 3, 7, 10)), ((3,), (3, 0, 10)), ((), (0, 10))],
)
@pytest.mark.parametrize("blocks", [1, 3, 4])
@pytest.mark.parametrize("with_vector", [False, True])
def test_product_and_its_gradients_match_the_dense_product(blocks, batch_shape, phi_shape, with_vector):
    """Phi L (and Phi v with it) to 1e-12 of the dense products in float64, values and gradients: the products
    written and accumulated in place (issue 39, item 4) change rounding only."""
    factor = randomized(10, batch_shape, blocks)
    generator = torch.Generator().manual_seed(1)
    phi = torch.randn(phi_shape, generator=generator, dtype=DTYPE, requires_grad=True)
    vector = torch.randn((*batch_shape, 10), generator=generator, dtype=DTYPE, requires_grad=True)
    weights = torch.randn(phi_shape, generator=generator, dtype=DTYPE)
    vector_weights = torch.randn(phi_shape[:-1], generator=generator, dtype=DTYPE)
    inputs = (phi, vector, *factor.parameters()) if with_vector else (phi, *factor.parameters())

    def objective(vector_product, product):
        return (product * weights).sum() + ((vector_product * vector_weights).sum() if with_vector else 0)

    if with_vector:
        products = factor.vector_and_left_multiply(phi, vector)
    else:
        products = (None, factor.left_multiply(phi))
    gradients = torch.autograd.grad(objective(*products), inputs)
    dense = (phi @ vector.unsqueeze(-1)).squeeze(-1), phi @ factor.dense()  # autograd through the dense assembly
    references = torch.autograd.grad(objective(*dense), inputs)

    for mine, reference in zip((*products, *gradients), (*dense, *references)):
        if mine is not None:
            torch.testing.assert_close(mine, reference, rtol=1e-12, atol=1e-12)


def test_split_of_a_batch_equals_the_same_factor_alone():
    batched = randomized(12, (3,), 4)
    alone = BlockTril(12, 1.0, torch.zeros((), dtype=DTYPE), (), 4)
    with torch.no_grad():
        for mine, theirs in zip(alone.parameters(), batched.parameters()):
            mine.copy_(theirs[1])
    phi = torch.randn(3, 5, 12, generator=torch.Generator().manual_seed(2), dtype=DTYPE)
    torch.testing.assert_close(batched.left_multiply(phi)[1], alone.left_multiply(phi[1]), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("size, blocks", [(40, 1), (255, 1), (256, 4), (2000, 4)])
def test_a_small_factor_is_one_block_a_large_one_four(size, blocks):
    factor = BlockTril(size, 1.0, torch.zeros((), dtype=DTYPE))
    assert len(factor.raw_diagonal_blocks) == blocks and len(factor.below_blocks) == blocks - 1


@pytest.mark.parametrize("with_vector", [False, True])
def test_diagonal_blocks_products_by_halves_match_the_dense_product(with_vector):
    """A diagonal block of at least DENSE_BELOW columns is multiplied by halves, its zero upper right block
    skipped, recursively (here 550 -> 275 -> 137/138 columns); forward and backward to 1e-12 of the dense
    products in float64, values and gradients; the diagonal blocks' gradients' upper triangles, which
    ``scale_tril`` ignores, are zero there."""
    factor = randomized(1100, (2,), 2)
    generator = torch.Generator().manual_seed(1)
    phi = torch.randn((2, 7, 1100), generator=generator, dtype=DTYPE, requires_grad=True)
    vector = torch.randn((2, 1100), generator=generator, dtype=DTYPE, requires_grad=True)
    weights = torch.randn(phi.shape, generator=generator, dtype=DTYPE)
    inputs = (phi, vector, *factor.parameters())
    if with_vector:
        vector_product, product = factor.vector_and_left_multiply(phi, vector)
    else:
        vector_product, product = (phi @ vector.unsqueeze(-1)).squeeze(-1), factor.left_multiply(phi)
    gradients = torch.autograd.grad((product * weights).sum() + vector_product.sum(), inputs)
    dense_product = phi @ factor.dense()
    references = torch.autograd.grad((dense_product * weights).sum() + (phi @ vector.unsqueeze(-1)).sum(), inputs)
    torch.testing.assert_close(product, dense_product, rtol=1e-12, atol=1e-12)
    for mine, reference in zip(gradients, references):
        torch.testing.assert_close(mine, reference, rtol=1e-12, atol=1e-12)
    diagonal = factor.diagonal_blocks()[0].detach()
    upper = block_tril._triangular_gradient(phi.detach()[..., :550], weights[..., :550], diagonal)
    assert torch.equal(upper.triu(1)[:, :275, 275:], torch.zeros(2, 275, 275, dtype=DTYPE))
    torch.testing.assert_close(
        upper.tril(), (phi.detach()[..., :550].mT @ weights[..., :550]).tril(), rtol=1e-12, atol=1e-12
    )
