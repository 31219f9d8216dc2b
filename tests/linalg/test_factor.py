"""Cholesky factors with jitter and deferred checks, and the inverses of a factor, against torch and LAPACK."""

import logging

import pytest
import torch

from gpstudy import linalg, numerics
from gpstudy.linalg import (
    HALVES_FROM,
    CholeskyError,
    cholesky,
    gram,
)

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
