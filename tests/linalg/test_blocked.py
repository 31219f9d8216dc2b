"""gpstudy.linalg.blocked: Cholesky factors and triangular solves by blocks equal torch.linalg's, values, gradients
and ``info``; on a CPU the library's own calls, elsewhere (``meta``) the blocks."""

import functools
import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gpstudy import linalg, numerics
from gpstudy.diagnostics.probes import build_probe
from gpstudy.linalg import blocked
from gpstudy.runtime.host_sync import HostSyncCounter

LEAF = numerics.FACTOR_BLOCK
SIZES = sorted({LEAF - 1, LEAF, LEAF + 1, 129, 600, 1000})
BATCH = {size: (2, 2) if size <= 2 * LEAF else (2,) for size in SIZES}  # batch dimensions, fewer at large sizes
CONDITIONS = (1e2, 1e8)
GRADIENT = {1e2: 1e-10, 1e8: 1e-8}  # the factor's gradient carries L^-1 twice: at condition 1e8 the library's own
# moves by 2-3.5e-9 of its scale when the matrix moves by one rounding (n = 129-1000), the blocks' differ by 4-6e-10


@functools.cache
def spd(condition: float, batch: tuple[int, ...], size: int, dtype=torch.float64, seed: int = 0) -> torch.Tensor:
    """Random SPD matrices ``[*batch, size, size]``: random rotations of eigenvalues log-spaced from 1 to
    1 / ``condition`` (made once per argument: not to be written to)."""
    generator = torch.Generator().manual_seed(seed)
    rotation = torch.linalg.qr(torch.randn(*batch, size, size, generator=generator, dtype=torch.float64))[0]
    eigenvalues = torch.logspace(0, -math.log10(condition), size, dtype=torch.float64)
    return ((rotation * eigenvalues) @ rotation.mT).to(dtype)


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    """max |got - expected| / max |expected|: the error at the scale of the result."""
    return ((got - expected).abs().max() / expected.abs().max()).item()


def values_and_gradients(function, inputs: list[torch.Tensor], seed: int = 1) -> list[torch.Tensor]:
    """``function(*inputs)`` and the gradients of a random weighting of it with respect to ``inputs``."""
    inputs = [each.detach().requires_grad_(True) for each in inputs]
    value = function(*inputs)
    weights = torch.randn(value.shape, generator=torch.Generator().manual_seed(seed), dtype=value.dtype)
    return [value.detach(), *torch.autograd.grad((weights * value).sum(), inputs)]


@pytest.mark.parametrize("condition", CONDITIONS)
@pytest.mark.parametrize("size", SIZES)
def test_the_blocked_cholesky_equals_the_library_s_values_and_gradients(size, condition):
    matrix = spd(condition, BATCH[size], size)
    got = values_and_gradients(lambda a: blocked.blocked_cholesky_ex(a)[0], [matrix])
    expected = values_and_gradients(lambda a: torch.linalg.cholesky_ex(a)[0], [matrix])
    for name, value, reference, tolerance in zip(("factor", "gradient"), got, expected, (1e-10, GRADIENT[condition])):
        assert relative_error(value, reference) <= tolerance, name
    assert torch.equal(got[0], got[0].tril())


@pytest.mark.parametrize("condition", CONDITIONS)
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [True, False])
def test_the_blocked_solve_equals_the_library_s_values_and_gradients(size, condition, upper, left):
    factor = torch.linalg.cholesky(spd(condition, BATCH[size], size))
    matrix = factor.mT if upper else factor
    rhs_shape = (*BATCH[size], size, 150) if left else (*BATCH[size], 150, size)
    rhs = torch.randn(rhs_shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    got = values_and_gradients(
        lambda a, b: blocked.blocked_solve_triangular(a, b, upper=upper, left=left), [matrix, rhs]
    )
    expected = values_and_gradients(
        lambda a, b: torch.linalg.solve_triangular(a, b, upper=upper, left=left), [matrix, rhs]
    )
    for name, value, reference in zip(("solution", "gradient of the matrix", "gradient of rhs"), got, expected):
        assert relative_error(value, reference) <= 1e-10, name


@pytest.mark.parametrize(("matrix_batch", "rhs_batch"), [((2,), ()), ((), (2,)), ((2, 1), (3,))])
def test_the_blocked_solve_broadcasts_batch_dimensions_as_the_library(matrix_batch, rhs_batch):
    """As ``linalg.inverse_by_products``'s solve of one identity by a batch of factors; gradients summed
    over the broadcast dimensions."""
    matrix = torch.linalg.cholesky(spd(1e2, matrix_batch, 300))
    rhs = torch.randn(*rhs_batch, 300, 200, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    got = values_and_gradients(lambda a, b: blocked.blocked_solve_triangular(a, b, upper=False), [matrix, rhs])
    expected = values_and_gradients(lambda a, b: torch.linalg.solve_triangular(a, b, upper=False), [matrix, rhs])
    for value, reference in zip(got, expected):
        assert value.shape == reference.shape and relative_error(value, reference) <= 1e-10


def test_float32_to_a_float32_tolerance():
    matrix = spd(1e2, (2,), 600, torch.float32)
    factor, info = blocked.blocked_cholesky_ex(matrix)
    assert relative_error(factor, torch.linalg.cholesky_ex(matrix)[0]) <= 1e-5 and not info.any()
    rhs = torch.randn(2, 600, 200, generator=torch.Generator().manual_seed(3), dtype=torch.float32)
    solution = blocked.blocked_solve_triangular(factor, rhs, upper=False)
    assert relative_error(solution, torch.linalg.solve_triangular(factor, rhs, upper=False)) <= 1e-4


NON_FINITE_PLACES = [(5, 5), (400, 400), (400, 5), (5, 400), (40, 20), (590, 310), (310, 100)]  # (row, column)


@pytest.mark.parametrize("place", NON_FINITE_PLACES)
@pytest.mark.parametrize("value", [-1.0, math.nan, math.inf, -math.inf])
def test_info_is_the_library_s_in_a_batch_with_good_matrices(place, value):
    """A non-positive-definite or non-finite entry of one matrix (the upper triangle: not read, by either):
    that matrix's ``info`` is the library's (the order of the first leading minor found not positive-definite),
    the others' 0 and their factors unaffected."""
    matrices = spd(1e2, (3,), 600).clone()
    matrices[1, place[0], place[1]] = value
    factor, info = blocked.blocked_cholesky_ex(matrices)
    reference, expected_info = torch.linalg.cholesky_ex(matrices)
    assert torch.equal(info, expected_info), (info, expected_info)
    assert info[0] == 0 and info[2] == 0
    assert relative_error(factor[[0, 2]], reference[[0, 2]]) <= 1e-10


def test_a_failed_leaf_in_the_lower_half_counts_in_the_whole_matrix():
    matrices = torch.eye(600, dtype=torch.float64).repeat(4, 1, 1)
    for index, row in enumerate((0, 299, 300, 599)):
        matrices[index, row, row] = -1.0
    assert blocked.blocked_cholesky_ex(matrices)[1].tolist() == [1, 300, 301, 600]


def test_gaussian_cholesky_retries_with_the_blocked_factor_as_with_the_library_s(monkeypatch):
    """``linalg.cholesky``'s jitter retries and NaN factors with the blocked forms (as off a CPU) give the
    library's factor. The second matrix's smallest eigenvalue is -5e-5: jitter 1e-6 and 1e-5 fail, 1e-4 leaves it
    at 5e-5 (condition 2e4, so two algorithms' factors agree to rounding; one jitter step more moves it by 0.1)."""
    matrices = spd(1e2, (3,), 300).clone()
    shift = torch.linalg.eigvalsh(matrices[1]).min() + 5e-5
    matrices[1] = matrices[1] - shift * torch.eye(300, dtype=torch.float64)
    matrices[2, 7, 3] = math.nan
    expected = linalg.cholesky(matrices)
    monkeypatch.setattr(blocked, "library_device", lambda tensor: False)
    got = linalg.cholesky(matrices)
    assert got[2].isnan().all() and expected[2].isnan().all()
    assert relative_error(got[:2], expected[:2]) <= 1e-10


class Calls(TorchDispatchMode, list):
    """(operator name, shape of its first argument) of every aten operator called within."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        first = args[0] if args else None
        self.append((func.overloadpacket.__name__, tuple(first.shape) if isinstance(first, torch.Tensor) else ()))
        return func(*args, **(kwargs or {}))


def test_a_cpu_runs_the_library_s_calls_and_other_devices_the_blocks():
    matrix = spd(1e2, (2,), 600)
    rhs = torch.randn(
        2, 600, LEAF, generator=torch.Generator().manual_seed(4), dtype=torch.float64
    )  # blocked off a CPU
    with Calls() as calls:
        factor, info = blocked.cholesky_ex(matrix)
        solution = blocked.solve_triangular(factor, rhs, upper=False)
    assert [name for name, _ in calls] == ["linalg_cholesky_ex", "linalg_solve_triangular"]
    assert torch.equal(factor, torch.linalg.cholesky_ex(matrix)[0])
    assert torch.equal(solution, torch.linalg.solve_triangular(factor, rhs, upper=False))
    with Calls() as calls:
        factor, _ = blocked.cholesky_ex(matrix.to("meta"))
        blocked.solve_triangular(factor, rhs.to("meta"), upper=False)
        blocked.solve_triangular(factor, rhs[..., :1].to("meta"), upper=False)  # one right-hand side: the library's
    leaves = [shape for name, shape in calls if name in ("linalg_cholesky_ex", "linalg_solve_triangular")]
    assert leaves[-1] == (2, 600, 600) and all(shape[-1] <= LEAF for shape in leaves[:-1])
    assert any(name == "baddbmm" for name, _ in calls)


def test_the_blocks_read_nothing_on_the_host():
    matrix = spd(1e2, (2,), 600).clone().requires_grad_(True)
    with HostSyncCounter() as counter:
        factor, info = blocked.blocked_cholesky_ex(matrix)
        solution = blocked.blocked_solve_triangular(factor, matrix, upper=False)
        solution.sum().backward()
    assert counter.events == [], counter.summary()


def test_a_second_derivative_raises_instead_of_being_wrong():
    matrix = spd(1e2, (2,), LEAF + 100).clone().requires_grad_(True)  # split once
    (grad,) = torch.autograd.grad(blocked.blocked_cholesky_ex(matrix)[0].square().sum(), matrix, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        grad.sum().backward()


@pytest.mark.parametrize(
    "name", ["exact", "svgp", "svgp_fixed_prior", "gpnet", "gpnet_online_noisy", "fbnn", "fbnn_online_batch"]
)
def test_a_probe_trains_with_the_blocks_as_with_the_library_and_reads_the_host_once(name, study_config, monkeypatch):
    """With leaves of 4 rows, so that a probe's 6-22-row matrices split 1-3 times, and the blocks chosen as off a
    CPU: each step reads the host only for its deliberate check, and the losses equal the library's."""
    expected = build_probe(name, study_config, "cpu").train(range(1, 4))
    monkeypatch.setattr(numerics, "FACTOR_BLOCK", 4)
    monkeypatch.setattr(blocked, "library_device", lambda tensor: False)
    run = build_probe(name, study_config, "cpu")
    run.train(range(1, 3))
    with HostSyncCounter() as counter:
        loss = run.train(range(3, 4))
    assert counter.unexpected() == [], counter.summary()
    assert relative_error(loss, expected) <= 1e-10


@pytest.mark.parametrize("size", [LEAF, LEAF + 1, 2 * LEAF + 3])  # a leaf, one split, two levels (uneven halves)
@pytest.mark.parametrize("condition", CONDITIONS)
def test_the_triangular_inverse_by_halves_equals_the_library_s_solve_of_the_identity(size, condition):
    factor = torch.linalg.cholesky(spd(condition, (2,), size))
    inverse = blocked.lower_triangular_inverse(factor)
    expected = torch.linalg.solve_triangular(factor, torch.eye(size, dtype=factor.dtype), upper=False)
    assert relative_error(inverse, expected) <= 1e-10
    assert torch.equal(inverse.triu(1), torch.zeros_like(inverse))  # exactly lower-triangular


def test_the_triangular_inverse_reads_only_the_lower_triangle_and_refuses_a_gradient():
    factor = torch.linalg.cholesky(spd(1e2, (2,), LEAF + 1))
    assert torch.equal(
        blocked.lower_triangular_inverse(factor + torch.ones_like(factor).triu(1)),
        blocked.lower_triangular_inverse(factor),
    )
    with pytest.raises(ValueError, match="without gradient"):
        blocked.lower_triangular_inverse(factor.requires_grad_())
