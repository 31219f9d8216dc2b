"""A lower-triangular Cholesky factor stored by column blocks, and its product from the left.

The RFE network's weight factor L is ``[K, K]`` with K = 2000 at the paper's settings: a dense
parameter would spend most of an iteration on memory passes over its zero upper triangle (masking,
its gradient, Adam). Here column block j of L is two parameters: the square diagonal block D_j (raw;
strict lower triangle kept, softplus diagonal, as ``linalg.scale_tril``) and the dense block R_j
below it. Only the lower blocks exist, so a product and its backward pass cost at most (b + 1) / (2b) of
a dense one (5/8 with b = 4 blocks) and nothing is masked; each diagonal block of ``DENSE_BELOW`` columns or
more is multiplied by halves, its zero upper right quarter skipped (9/16 with the paper's 4 blocks of 500).
A small L (Snelson's K = 40) is one block: there the blocks' extra products cost more in operator launches
than their skipped zeros save. Why it is fast: docs/gpus.md#third-round.
"""

import torch
from torch import Tensor, nn

from gpstudy.linalg import raw_scale_tril, scale_tril

BLOCKS = 4  # column blocks of a large L: more blocks skip more zeros but launch more products
DENSE_BELOW = 256  # an L of fewer columns is one block (its product is launch-bound, not FLOP-bound)


def default_blocks(size: int) -> int:
    """The column blocks of a ``[size, size]`` L: one below ``DENSE_BELOW`` columns, else ``BLOCKS``."""
    return 1 if size < DENSE_BELOW else BLOCKS


def _block_edges(size: int, blocks: int) -> list[int]:
    blocks = max(1, min(blocks, size))
    return [round(j * size / blocks) for j in range(blocks + 1)]


def _product_into(target: Tensor, a: Tensor, b: Tensor, accumulate: bool) -> None:
    """target = a @ b, or target += a @ b with ``accumulate``, written in place by the GEMM (beta 0: target's
    old values, uninitialized memory, are not read; not ``out=``, which torch.compile refuses into a slice)."""
    target.baddbmm_(a, b, beta=1 if accumulate else 0)


def _halves(lower: Tensor) -> int:
    """Where a lower-triangular diagonal block ``[B, w, w]`` splits in two (from ``DENSE_BELOW`` columns), else 0."""
    size = lower.shape[-1]
    return size // 2 if size >= DENSE_BELOW else 0


def _triangular_product_into(target: Tensor, a: Tensor, lower: Tensor, accumulate: bool) -> None:
    """target (+)= a @ lower for a lower-triangular ``lower`` ``[B, w, w]``: by halves, its zero upper right block
    skipped (3/4 of the product; [a1 a2] [[A 0] [B C]] = [a1 A + a2 B, a2 C]), recursively while a block has
    ``DENSE_BELOW`` columns or more. Why halves and not more stored blocks: docs/gpus.md#third-round."""
    half = _halves(lower)
    if not half:
        _product_into(target, a, lower, accumulate)
        return
    _triangular_product_into(target[..., :half], a[..., :half], lower[:, :half, :half], accumulate)
    _product_into(target[..., :half], a[..., half:], lower[:, half:, :half], accumulate=True)
    _triangular_product_into(target[..., half:], a[..., half:], lower[:, half:, half:], accumulate)


def _triangular_transposed_product_into(target: Tensor, grad: Tensor, lower: Tensor, accumulate: bool) -> None:
    """target (+)= grad @ lower^T for a lower-triangular ``lower`` ``[B, w, w]``, by halves as
    :func:`_triangular_product_into` ([g1 g2] [[A^T B^T] [0 C^T]] = [g1 A^T, g1 B^T + g2 C^T])."""
    half = _halves(lower)
    if not half:
        _product_into(target, grad, lower.mT, accumulate)
        return
    _triangular_transposed_product_into(target[..., :half], grad[..., :half], lower[:, :half, :half], accumulate)
    _product_into(target[..., half:], grad[..., :half], lower[:, half:, :half].mT, accumulate)
    _triangular_transposed_product_into(target[..., half:], grad[..., half:], lower[:, half:, half:], True)


def _triangular_gradient(phi: Tensor, grad: Tensor, lower: Tensor) -> Tensor:
    """phi^T grad ``[B, w, w]``, the gradient of the lower-triangular ``lower`` in phi @ lower: where it splits
    (:func:`_halves`) only its lower triangle's blocks, the upper right one zero (``scale_tril``'s gradient reads
    the lower triangle alone)."""
    if not _halves(lower):
        return phi.mT @ grad
    out = phi.new_empty(lower.shape)
    _triangular_gradient_into(out, phi, grad)
    return out


def _triangular_gradient_into(out: Tensor, phi: Tensor, grad: Tensor) -> None:
    """:func:`_triangular_gradient` written into ``out`` ``[B, w, w]`` (a view may be strided), by halves."""
    half = _halves(out)
    if not half:
        _product_into(out, phi.mT, grad, accumulate=False)
        return
    _triangular_gradient_into(out[:, :half, :half], phi[..., :half], grad[..., :half])
    out[:, :half, half:].zero_()
    _product_into(out[:, half:, :half], phi[..., half:].mT, grad[..., :half], accumulate=False)
    _triangular_gradient_into(out[:, half:, half:], phi[..., half:], grad[..., half:])


class _LeftProduct(torch.autograd.Function):
    """Phi L from Phi ``[B, n, K]`` and L's blocks ``[B, ., .]`` (and, given v ``[B, K, 1]``, Phi v first),
    with every product written, or accumulated (``baddbmm_``, beta = 1), straight into its columns of the
    result or of Phi's gradient: no elementwise pass over ``[B, n, K]`` (no sum of two products or of Phi's
    two gradients, concatenation, zero fill or read-modify-write of a slice). Why it is fast:
    docs/gpus.md#memory-passes-first-round."""

    @staticmethod
    def forward(ctx, edges: list[int], phi: Tensor, vector: Tensor | None, *blocks: Tensor):
        diagonal, below = blocks[: len(edges) - 1], blocks[len(edges) - 1 :]
        product = phi.new_empty(phi.shape)
        for j, (start, stop) in enumerate(zip(edges[:-1], edges[1:])):
            column = product[..., start:stop]
            _triangular_product_into(column, phi[..., start:stop], diagonal[j], accumulate=False)
            if stop < edges[-1]:
                _product_into(column, phi[..., stop:], below[j], accumulate=True)
        ctx.edges = edges
        ctx.save_for_backward(phi, vector, *blocks)
        return product if vector is None else (torch.bmm(phi, vector), product)

    @staticmethod
    def backward(ctx, *grads: Tensor) -> tuple[Tensor | None, ...]:
        edges = ctx.edges
        phi, vector, *blocks = ctx.saved_tensors
        grad_vector_product, grad = grads if vector is not None else (None, grads[0])
        diagonal, below = blocks[: len(edges) - 1], blocks[len(edges) - 1 :]
        grad_phi = phi.new_empty(phi.shape) if ctx.needs_input_grad[1] else None
        grad_vector = None if vector is None or not ctx.needs_input_grad[2] else phi.mT @ grad_vector_product
        if grad_phi is not None and vector is not None:  # writes every column of Phi's gradient
            _product_into(grad_phi, grad_vector_product, vector.mT, accumulate=False)
        grad_diagonal, grad_below = [], []
        for j, (start, stop) in enumerate(zip(edges[:-1], edges[1:])):
            column_grad = grad[..., start:stop]
            grad_diagonal.append(_triangular_gradient(phi[..., start:stop], column_grad, diagonal[j]))
            if stop < edges[-1]:
                grad_below.append(phi[..., stop:].mT @ column_grad)
            if grad_phi is not None:  # else block 0 writes every column (its D_0 and R_0 span them all)
                accumulate = vector is not None or j > 0
                _triangular_transposed_product_into(grad_phi[..., start:stop], column_grad, diagonal[j], accumulate)
                if stop < edges[-1]:
                    _product_into(grad_phi[..., stop:], column_grad, below[j].mT, accumulate)
        return None, grad_phi, grad_vector, *grad_diagonal, *grad_below


class BlockTril(nn.Module):
    """L ``[*batch_shape, K, K]``, lower triangular with positive diagonal, stored by column blocks.

    Args:
        size: K.
        diagonal: L = diagonal * I at start.
        like: dtype and device of the parameters.
        batch_shape: leading dimensions (one factor per split).
        blocks: column blocks b (None: ``default_blocks(size)``).
    """

    def __init__(
        self, size: int, diagonal: float, like: Tensor, batch_shape: tuple[int, ...] = (), blocks: int | None = None
    ):
        super().__init__()
        self.size = size
        self.edges = _block_edges(size, default_blocks(size) if blocks is None else blocks)
        spans = list(zip(self.edges[:-1], self.edges[1:]))
        self.raw_diagonal_blocks = nn.ParameterList(
            raw_scale_tril(diagonal, stop - start, like, batch_shape) for start, stop in spans
        )
        self.below_blocks = nn.ParameterList(
            like.new_zeros((*batch_shape, size - stop, stop - start)) for start, stop in spans[:-1]
        )

    def diagonal_blocks(self) -> list[Tensor]:
        """The square diagonal blocks D_j of L (lower triangular, positive diagonal)."""
        return [scale_tril(raw) for raw in self.raw_diagonal_blocks]

    def left_multiply(self, phi: Tensor) -> Tensor:
        """Phi L ``[*batch_shape, n, K]`` for Phi ``[*batch_shape, n, K]`` (unbatched L: any ``[..., n, K]``), in
        Phi's dtype (L's blocks cast to it: mixed precision)."""
        return self._products(phi, None)

    def vector_and_left_multiply(
        self, phi: Tensor, vector: Tensor, blocks: list[Tensor] | None = None
    ) -> tuple[Tensor, Tensor]:
        """Phi v ``[*batch_shape, n]`` for v ``[*batch_shape, K]`` (in Phi's dtype) and Phi L, as one operator
        whose backward writes Phi's gradient once (not two gradients and their sum); L from ``blocks`` where given
        (``blocks()``, built once for several products), else built here."""
        return self._products(phi, vector, blocks)

    def blocks(self, dtype: torch.dtype | None = None) -> list[Tensor]:
        """L's blocks, the diagonal D_j then the R_j below them, in ``dtype`` (None: the parameters')."""
        blocks = [*self.diagonal_blocks(), *self.below_blocks]
        return blocks if dtype is None else [block.to(dtype) for block in blocks]

    def _products(self, phi: Tensor, vector: Tensor | None, blocks: list[Tensor] | None = None):
        blocks = self.blocks(phi.dtype) if blocks is None else blocks
        if blocks[0].ndim == 2:  # unbatched: one [n, K] product, as a batch of one (n may be 0)
            rows, blocks = phi.reshape(1, phi.shape[:-1].numel(), self.size), [block.unsqueeze(0) for block in blocks]
        else:  # [*batch_shape, n, K] as [B, n, K]
            rows, blocks = phi.flatten(0, -3), [block.flatten(0, -3) for block in blocks]
        if vector is None:
            return _LeftProduct.apply(self.edges, rows, None, *blocks).reshape(phi.shape)
        column = vector.reshape(rows.shape[0], self.size, 1)
        vector_product, product = _LeftProduct.apply(self.edges, rows, column, *blocks)
        return vector_product.reshape(phi.shape[:-1]), product.reshape(phi.shape)

    def dense(self) -> Tensor:
        """L as one ``[*batch_shape, K, K]`` matrix (zeros above the diagonal)."""
        diagonal = self.diagonal_blocks()
        batch_shape = diagonal[0].shape[:-2]
        matrix = diagonal[0].new_zeros((*batch_shape, self.size, self.size))
        for j, (start, stop) in enumerate(zip(self.edges[:-1], self.edges[1:])):
            matrix[..., start:stop, start:stop] = diagonal[j]
            if stop < self.size:
                matrix[..., stop:, start:stop] = self.below_blocks[j]
        return matrix
