"""The parameterizations of positive values and lower factors: round trips, and the forms that save passes
equal to autograd's bit for bit."""

import pytest
import torch

from gpstudy import numerics
from gpstudy.linalg import inverse_positive, positive, raw_scale_tril, scale_tril

from matrices import DTYPE, values_and_gradients


def test_positive_round_trip():
    values = torch.tensor([1e-3, 0.1, 1.0, 50.0], dtype=DTYPE)
    torch.testing.assert_close(positive(inverse_positive(values)), values, rtol=1e-12, atol=0)
    assert positive(torch.tensor(-1e3, dtype=DTYPE)) >= numerics.POSITIVE_FLOOR


def test_scale_tril_is_lower_with_positive_diagonal(generator):
    raw = torch.randn(5, 5, generator=generator, dtype=DTYPE)
    factor = scale_tril(raw)
    assert torch.equal(factor, torch.tril(factor))
    assert (factor.diagonal() > 0).all()
    torch.testing.assert_close(factor.tril(-1), raw.tril(-1))
    torch.testing.assert_close(scale_tril(raw_scale_tril(1.3, 4, like=raw)), 1.3 * torch.eye(4, dtype=DTYPE))


def old_scale_tril(raw: torch.Tensor) -> torch.Tensor:
    """scale_tril as it was formed before issue 39's item 4: autograd's tril, diag_embed and their sum."""
    return torch.tril(raw, diagonal=-1) + torch.diag_embed(positive(raw.diagonal(dim1=-2, dim2=-1)))


@pytest.mark.parametrize("shape", [(6, 6), (3, 2, 40, 40)])
def test_scale_tril_equals_autograds_form_bit_for_bit(generator, shape):
    """Values and gradients element for element the same floating-point operations: equal, not close; the raw
    diagonal spans softplus's threshold (20) and its flat negative side, the upstream gradient is not lower."""
    raw = 8 * torch.randn(shape, generator=generator, dtype=DTYPE)
    raw.diagonal(dim1=-2, dim2=-1)[..., :3] = torch.tensor([25.0, -30.0, 20.0], dtype=DTYPE)
    upstream = torch.randn(shape, generator=generator, dtype=DTYPE)
    for new, old in zip(
        values_and_gradients(scale_tril, raw, upstream), values_and_gradients(old_scale_tril, raw, upstream)
    ):
        assert torch.equal(new, old)
    with pytest.raises(RuntimeError):  # once differentiable: a second derivative raises, not wrong
        leaf = raw.detach().requires_grad_()
        (grad,) = torch.autograd.grad((scale_tril(leaf) * upstream).sum(), leaf, create_graph=True)
        grad.sum().backward()


def test_scale_tril_under_torch_compile_is_the_expression_inductor_fuses():
    """Traced by torch.compile, scale_tril is tril + diag_embed (no Function): inductor fuses it into one kernel,
    and the compiled numbers of ``configs/paper-cpu.yaml`` stay those of that graph (the Function moved SVGP's
    parameters by a rounding error in 3 compiled steps)."""
    traced = []

    def record(graph_module, example_inputs):
        traced.extend(str(node.target) for node in graph_module.graph.nodes)
        return graph_module.forward

    raw = torch.randn(4, 4, dtype=DTYPE)
    torch._dynamo.reset()
    compiled = torch.compile(scale_tril, backend=record, fullgraph=True)
    assert torch.equal(compiled(raw), old_scale_tril(raw))
    assert any("diag_embed" in target for target in traced) and not any("Function" in target for target in traced)
