"""Every kernel passes the same battery (shapes, diag, PSD, gradients); RBF against its formula."""

import pytest
import torch

from gpstudy import settings
from gpstudy.kernels import KERNELS, RBF

DTYPE = settings.DEFAULT_DTYPE


@pytest.fixture
def inputs() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(7, 3, generator=generator, dtype=DTYPE), torch.randn(5, 3, generator=generator, dtype=DTYPE)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_shapes_and_diag(name, inputs):
    x1, x2 = inputs
    kernel = KERNELS[name](3, lengthscale=[0.5, 1.0, 2.0], variance=1.7)
    assert kernel(x1, x2).shape == (7, 5)
    assert kernel(x1).shape == (7, 7)
    torch.testing.assert_close(kernel(x1, diag=True), kernel(x1).diagonal())
    torch.testing.assert_close(kernel(x1, x2), kernel(x2, x1).mT)
    with pytest.raises(ValueError):
        kernel(x1, x2, diag=True)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_covariance_is_symmetric_psd(name, inputs):
    kernel = KERNELS[name](3)
    matrix = kernel(torch.cat(inputs))
    torch.testing.assert_close(matrix, matrix.mT)
    assert torch.linalg.eigvalsh(matrix).min() > -1e-10


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_leading_batch_dimension(name, inputs):
    x1, x2 = inputs
    kernel = KERNELS[name](3)
    batched = kernel(torch.stack([x1, 2 * x1]), torch.stack([x2, x2]))
    torch.testing.assert_close(batched[1], kernel(2 * x1, x2))


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_gradients_reach_lengthscale_and_variance(name, inputs):
    kernel = KERNELS[name](3)
    kernel(*inputs).sum().backward()
    for parameter in kernel.parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0


def test_initial_values_are_the_constructor_arguments():
    kernel = RBF(2, lengthscale=[0.5, 3.0], variance=1.7)
    assert kernel.input_dim == 2
    torch.testing.assert_close(kernel.lengthscale, torch.tensor([0.5, 3.0], dtype=DTYPE))
    torch.testing.assert_close(kernel.variance, torch.tensor(1.7, dtype=DTYPE))
    torch.testing.assert_close(RBF(4).lengthscale, torch.ones(4, dtype=DTYPE))


def test_rbf_matches_its_formula(inputs):
    x1, x2 = inputs
    lengthscale = torch.tensor([0.5, 1.0, 2.0], dtype=DTYPE)
    kernel = RBF(3, lengthscale=lengthscale.tolist(), variance=1.7)
    difference = (x1.unsqueeze(1) - x2.unsqueeze(0)) / lengthscale  # [7, 5, 3]
    expected = 1.7 * torch.exp(-0.5 * difference.square().sum(-1))
    torch.testing.assert_close(kernel(x1, x2), expected)
    torch.testing.assert_close(kernel(x1, diag=True), torch.full((7,), 1.7, dtype=DTYPE))
