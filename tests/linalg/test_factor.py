"""Cholesky factors with jitter and deferred checks, and the inverses of a factor, against torch and LAPACK."""

import logging

import pytest
import torch

from gpstudy import linalg, numerics
from gpstudy.linalg import (
    HALVES_FROM,
    CholeskyError,
    blocked,
    cholesky,
    gram,
)
from gpstudy.runtime.host_sync import HostSyncCounter

from matrices import (
    DTYPE,
    FACTORIZATION_CASES,
    OperatorNames,
    assert_close_to_scale,
    old_inverse,
    random_spd,
    spd_of_condition,
    values_and_gradients,
)


def test_cholesky_matches_torch(generator):
    matrix = random_spd(generator, 3, 6, 6)
    torch.testing.assert_close(cholesky(matrix), torch.linalg.cholesky(matrix))


def test_cholesky_escalates_jitter_and_logs(caplog):
    singular = torch.ones(5, 5, dtype=DTYPE)  # rank one: fails without jitter
    with caplog.at_level(logging.WARNING, logger=linalg.factor.__name__):
        factor = cholesky(singular)
    assert len(caplog.records) == 1 and "1.0e-06" in caplog.records[0].getMessage()
    torch.testing.assert_close(factor @ factor.mT, singular + numerics.JITTER * torch.eye(5, dtype=DTYPE))


def test_cholesky_gives_up_with_a_clear_error(caplog):
    indefinite = torch.diag(torch.tensor([1.0, -1.0, 1.0], dtype=DTYPE))
    last_jitter = numerics.JITTER * 10.0 ** (numerics.CHOLESKY_MAX_TRIES - 1)
    with caplog.at_level(logging.WARNING, logger=linalg.factor.__name__), pytest.raises(CholeskyError) as error:
        cholesky(indefinite)
    assert "3 x 3" in str(error.value) and f"{last_jitter:.1e}" in str(error.value)
    assert len(caplog.records) == numerics.CHOLESKY_MAX_TRIES


def test_cholesky_of_a_batch_jitters_and_fails_only_the_bad_matrices(generator, caplog):
    good = random_spd(generator, 2, 4, 4).requires_grad_(True)
    singular = torch.ones(4, 4, dtype=DTYPE)  # saved by the first jitter
    indefinite = torch.diag(torch.tensor([1.0, -1.0, 1.0, 1.0], dtype=DTYPE))  # saved by none
    batch = torch.stack([good[0], singular, indefinite, good[1]])
    with caplog.at_level(logging.WARNING, logger=linalg.factor.__name__):
        factor = cholesky(batch)
    for index in (0, 3):  # untouched: no jitter where none was needed
        torch.testing.assert_close(factor[index], torch.linalg.cholesky(batch[index]), rtol=0, atol=0)
    torch.testing.assert_close(factor[1] @ factor[1].mT, singular + numerics.JITTER * torch.eye(4, dtype=DTYPE))
    assert factor[2].isnan().all() and torch.isfinite(factor[[0, 1, 3]]).all()
    messages = [record.getMessage() for record in caplog.records]
    assert "2 of 4" in messages[0] and "1 of 4" in messages[-1] and len(messages) == numerics.CHOLESKY_MAX_TRIES
    factor[[0, 1, 3]].sum().backward()  # the failed matrix gives no NaN gradient to the others
    assert torch.isfinite(good.grad).all() and good.grad.abs().sum() > 0


def test_deferred_checks_leave_out_the_failures_of_lost_splits_unless_all_are(generator):
    """``any_failed(lost)``: a failure of a split already lost (``[S]`` flags) is no failure to retry, since no
    retry can save it, unless every split is lost (the eager path then raises); a factorization without the
    leading split dimension counts whole; without ``lost`` every failure counts."""
    good, nan = random_spd(generator, 4, 4), torch.full((4, 4), torch.nan, dtype=DTYPE)
    indefinite = torch.diag(torch.tensor([1.0, -1.0, 1.0, 1.0], dtype=DTYPE))
    for batch, lost, failed in (
        ([good, nan], [False, True], False),
        ([good, indefinite], [False, True], False),
        ([indefinite, nan], [False, True], True),
        ([nan, nan], [True, True], True),
    ):
        with linalg.deferred_factor_checks() as checks:
            cholesky(torch.stack(batch))
        assert checks.any_failed() is True
        assert checks.any_failed(torch.tensor(lost)) is failed, (batch, lost)
    with linalg.deferred_factor_checks() as checks:
        cholesky(torch.stack([good, good]))
        cholesky(indefinite)  # no split dimension: counts whole
    assert checks.any_failed(torch.tensor([False, True])) is True


@pytest.mark.parametrize(("size", "condition_number"), FACTORIZATION_CASES)
def test_inverse_by_products_equals_cholesky_inverse(generator, size, condition_number):
    """L^-T L^-1 by a triangular solve and a Gram product (a GPU's form) equals LAPACK's potri (a CPU's)."""
    chol = torch.linalg.cholesky(spd_of_condition(generator, condition_number, 3, size))
    inverse = linalg.inverse_by_products(chol)
    assert_close_to_scale(inverse, old_inverse(chol))
    assert_close_to_scale(inverse, inverse.mT, 1e-15)


def test_the_inverse_is_potri_on_a_cpu_and_products_elsewhere(generator):
    chol = torch.linalg.cholesky(spd_of_condition(generator, 1e2, 2, 30))
    assert torch.equal(linalg.inverse_from_scale_tril(chol), torch.cholesky_inverse(chol))
    with OperatorNames() as called:
        linalg.inverse_from_scale_tril(chol.to("meta"))
    assert "cholesky_inverse" not in called and "linalg_solve_triangular" in called, called


@pytest.mark.parametrize("rows", [7, HALVES_FROM + 1])  # the Gram of one product and of row halves
def test_add_jitter_in_place_equals_add_jitter_and_writes_its_argument(generator, rows):
    root = torch.randn(3, rows, 5, generator=generator, dtype=DTYPE)
    upstream = torch.randn(3, rows, rows, generator=generator, dtype=DTYPE)
    for new, old in zip(
        values_and_gradients(lambda x: linalg.add_jitter_(gram(x)), root, upstream),
        values_and_gradients(lambda x: linalg.add_jitter(gram(x)), root, upstream),
    ):
        assert torch.equal(new, old)
    # a gradient arriving transposed leaves in the matrix's layout, as autograd's copy left it: a kernel variance's
    # gradient sums over it in the same order
    kernel_values = torch.rand(3, rows, rows, generator=generator, dtype=DTYPE)
    variance = torch.rand(3, 1, 1, generator=generator, dtype=DTYPE)
    for new, old in zip(
        values_and_gradients(lambda v: linalg.add_jitter_(v * kernel_values).mT, variance, upstream),
        values_and_gradients(lambda v: linalg.add_jitter(v * kernel_values).mT, variance, upstream),
    ):
        assert torch.equal(new, old)
    matrix = root @ root.mT
    assert linalg.add_jitter_(matrix) is matrix
    with pytest.raises(RuntimeError, match="leaf"):  # a parameter is refused, not overwritten
        linalg.add_jitter_(matrix.clone().requires_grad_())
    saved = root.clone().requires_grad_()
    exponential = saved.exp()  # exp's backward needs its result: autograd refuses the write at the backward pass
    linalg.add_jitter_(exponential[:, :5, :5] @ exponential[:, :5, :5].mT)  # a product's result is free
    with pytest.raises(RuntimeError, match="inplace"):
        linalg.add_jitter_(saved[:, :5, :].exp()).sum().backward()


LAPACK_CHOLESKY_EX = torch.linalg.cholesky_ex  # the library's, on this CPU: LAPACK's potrf


def cusolver_cholesky_ex(matrix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.linalg.cholesky_ex`` as cuSOLVER's potrf decides a failure: a pivot fails where ``a_jj <= 0``, False
    for NaN (LAPACK's potrf also tests ``isnan(a_jj)``). LAPACK's factor and ``info``, but where LAPACK stopped at a
    NaN pivot j, ``info`` 0 and NaN in every column from j on, as running on through it gives (l_kj = a_kj / NaN,
    and every later pivot less l_kj^2: :func:`cusolver_rule_step_by_step` checks it); where it stopped at a
    non-positive pivot j, its ``info`` and NaN after column j (left undefined: here the worst case for a check
    that looks for NaN)."""
    factor, info = LAPACK_CHOLESKY_EX(matrix)
    failed, pivot = info > 0, (info.long() - 1).clamp_min(0)
    at_nan = failed & factor.diagonal(dim1=-2, dim2=-1).gather(-1, pivot[..., None]).squeeze(-1).isnan()
    undefined = failed[..., None, None] & (torch.arange(matrix.shape[-1]) >= (pivot + ~at_nan)[..., None, None])
    return torch.where(undefined, torch.nan, factor).tril(), torch.where(at_nan, 0, info)


def cusolver_rule_step_by_step(matrix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The rule itself, column by column (unblocked, right-looking, the lower triangle): a pivot fails where
    ``a_jj <= 0``, ``info`` the first failure's order; a failed matrix's columns from its failure on are left as
    they were."""
    work = matrix.tril()
    info = torch.zeros(matrix.shape[:-2], dtype=torch.int32)
    for j in range(matrix.shape[-1]):
        info = torch.where((info == 0) & (work[..., j, j] <= 0), j + 1, info)
        running = (info == 0)[..., None]
        column = torch.where(running, work[..., j:, j] / work[..., j, j, None].sqrt(), work[..., j:, j])
        work[..., j:, j] = column
        update = torch.where(running[..., None], column[..., 1:, None] * column[..., None, 1:], 0.0)
        work[..., j + 1 :, j + 1 :] -= update.tril()
    return work, info


def test_the_emulated_cusolver_leaf_is_the_rule_step_by_step(generator):
    """The emulation is cuSOLVER's rule run column by column: LAPACK's factor and ``info`` for a positive-definite
    matrix and a negative pivot, ``info`` 0 and the same NaN entries for a NaN pivot (on the diagonal, and made by a
    NaN below it), where LAPACK reports the NaN pivot's order."""
    batch = random_spd(generator, 4, 40, 40)
    batch[1, 17, 17] = -1.0
    batch[2, 23, 23] = torch.nan
    batch[3, 30, 11] = torch.nan
    factor, info = cusolver_cholesky_ex(batch)
    expected, expected_info = cusolver_rule_step_by_step(batch)
    assert LAPACK_CHOLESKY_EX(batch)[1].tolist() == [0, 18, 24, 31] and info.tolist() == expected_info.tolist()
    assert expected_info.tolist() == [0, 18, 0, 0]
    assert torch.equal(factor[[0, 2, 3]].isnan(), expected[[0, 2, 3]].isnan())
    assert_close_to_scale(factor[[0, 2, 3]].nan_to_num(), expected[[0, 2, 3]].nan_to_num(), 1e-14)
    assert_close_to_scale(factor[1, :, :17], expected[1, :, :17], 1e-14)  # the columns before the failure


LEAF, LARGER = numerics.FACTOR_BLOCK, 2 * numerics.FACTOR_BLOCK + 44  # one leaf; four (300 at 128-row leaves)


def broken(generator, dtype: torch.dtype, size: int, case: str, row: int, column: int) -> torch.Tensor:
    """Three random SPD matrices ``[3, size, size]``, the middle one broken: ``nan`` a NaN entry at (row, column)
    and its mirror; ``negative`` a_rr = -1 (no jitter saves it: the library's own failure); ``overflow`` finite,
    a_00 tiny and a_r0 half the largest number (the rest of column 0 zero): l_r0 = a_r0 / l_00 overflows at every
    jitter tried (each below 1/4, so l_00 < 1/2), so l_rk = (a_rk - inf * 0) / l_kk and row r's pivot are NaN at
    every try."""
    matrices = random_spd(generator, 3, size, size).to(dtype)
    if case == "nan":
        matrices[1, row, column] = matrices[1, column, row] = torch.nan
    elif case == "negative":
        matrices[1, row, row] = -1.0
    else:
        matrices[1, 0, :] = matrices[1, :, 0] = 0.0
        matrices[1, 0, 0] = torch.finfo(dtype).eps ** 4
        matrices[1, row, 0] = matrices[1, 0, row] = torch.finfo(dtype).max / 2
    return matrices


def steps_and_messages(matrices: torch.Tensor, caplog) -> tuple[torch.Tensor, list[bool], torch.Tensor, list[str]]:
    """The deferred check's ``info``, ``any_failed`` without and with the broken split lost, the eager factor and
    the jitter warnings it logged."""
    with linalg.deferred_factor_checks() as checks:
        cholesky(matrices)
    failed = [checks.any_failed(), checks.any_failed(torch.tensor([False, True, False]))]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=linalg.factor.__name__):
        factor = cholesky(matrices)
    return checks.infos[0], failed, factor, [record.getMessage() for record in caplog.records]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("size", [LEAF, LARGER])
@pytest.mark.parametrize(
    ("case", "place"),
    [("nan", "first diagonal"), ("nan", "first below"), ("nan", "last diagonal"), ("nan", "last below")]
    + [(case, place) for case in ("overflow", "negative") for place in ("first", "last")],
)
def test_a_failure_off_a_cpu_is_lapack_s_with_cusolver_s_leaves(
    generator, caplog, monkeypatch, dtype, size, case, place
):
    """Off a CPU the blocked factor's leaves are cuSOLVER's, whose ``info`` stays 0 at a NaN pivot: the deferred
    check still reports LAPACK's ``info`` (the order of the first failed leading minor: a NaN entry's row, the
    NaN below the diagonal making its row's pivot NaN), and the eager factor takes the CPU's path: the same
    jitter tries (none for a non-finite matrix, every one for the finite ones), the same failed matrix, the same
    error where every matrix fails; a negative pivot keeps the library's own ``info``, whatever its partial factor
    holds after it. In the first leaf and in the last, one leaf and four."""
    row, column = {
        "first diagonal": (5, 5),
        "first below": (9, 3),
        "last diagonal": (size - 10, size - 10),
        "last below": (size - 20, 7),  # in the blocked solve's block A21 where the matrix has leaves below the first
        "first": (9, 0),
        "last": (size - 10, 0),
    }[place]
    matrices = broken(generator, dtype, size, case, row, column)
    expected_info, expected_failed, expected, expected_messages = steps_and_messages(matrices, caplog)
    assert expected_info.tolist() == [0, row + 1, 0] and expected_failed == [True, False]  # LAPACK's, on this CPU
    assert len(expected_messages) == (0 if case == "nan" else numerics.CHOLESKY_MAX_TRIES)
    with pytest.raises(CholeskyError):
        cholesky(matrices[1:2])
    monkeypatch.setattr(blocked, "library_device", lambda tensor: False)  # as on CUDA: the blocked factor ...
    monkeypatch.setattr(torch.linalg, "cholesky_ex", cusolver_cholesky_ex)  # ... with cuSOLVER's leaves
    info, failed, factor, messages = steps_and_messages(matrices, caplog)
    assert info.tolist() == expected_info.tolist() and failed == expected_failed and messages == expected_messages
    assert factor[1].isnan().all() and expected[1].isnan().all()
    assert_close_to_scale(factor[[0, 2]], expected[[0, 2]], 1e-12 if dtype == torch.float64 else 1e-5)
    with pytest.raises(CholeskyError):  # the broken matrix alone: every matrix of the call fails, as on the CPU
        cholesky(matrices[1:2])


def test_the_nan_pivot_check_reads_nothing_on_the_host(generator, monkeypatch):
    """The check is device work: on ``meta`` (no values to read) and on the blocked path on the CPU, a deferred
    factorization dispatches no host synchronisation."""
    matrices = broken(generator, DTYPE, LARGER, "nan", 9, 3)
    with HostSyncCounter() as counter, OperatorNames() as called, linalg.deferred_factor_checks() as checks:
        cholesky(matrices.to("meta"))
    assert counter.events == [] and checks.infos[0].device.type == "meta" and "isnan" in called, counter.summary()
    monkeypatch.setattr(blocked, "library_device", lambda tensor: False)
    with HostSyncCounter() as counter, linalg.deferred_factor_checks() as checks:
        cholesky(matrices)
    assert counter.events == [] and checks.infos[0].tolist() == [0, 10, 0], counter.summary()
