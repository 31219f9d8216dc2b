"""Gaussian maths against torch.distributions and brute-force formulas with explicit inverses."""

import logging
import math

import pytest
import torch
from torch.distributions import MultivariateNormal, kl_divergence as torch_kl
from torch.utils._python_dispatch import TorchDispatchMode

from gpstudy import gaussian, linalg, numerics
from gpstudy.linalg import (CholeskyError, cholesky, HALVES_FROM, gram, inverse_positive, positive, raw_scale_tril,
                            scale_tril)
from gpstudy.gaussian import (condition, cross_entropy, entropy, kl_divergence, log_density, tempered_prior,
                              tempered_target)

DTYPE = numerics.DEFAULT_DTYPE


def random_spd_of(root: torch.Tensor) -> torch.Tensor:
    """root root^T / n + I / 2 ``[*batch, n, n]`` from a ``[*batch, n, n]`` root."""
    return root @ root.mT / root.shape[-1] + 0.5 * torch.eye(root.shape[-1], dtype=DTYPE)


def random_spd(generator: torch.Generator, *shape: int) -> torch.Tensor:
    """A well-conditioned random SPD matrix of shape [*batch, n, n]."""
    return random_spd_of(torch.randn(*shape, generator=generator, dtype=DTYPE))


@pytest.fixture
def generator() -> torch.Generator:
    return torch.Generator().manual_seed(0)


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
    for batch, lost, failed in (([good, nan], [False, True], False), ([good, indefinite], [False, True], False),
                                ([indefinite, nan], [False, True], True), ([nan, nan], [True, True], True)):
        with linalg.deferred_factor_checks() as checks:
            cholesky(torch.stack(batch))
        assert checks.any_failed() is True
        assert checks.any_failed(torch.tensor(lost)) is failed, (batch, lost)
    with linalg.deferred_factor_checks() as checks:
        cholesky(torch.stack([good, good]))
        cholesky(indefinite)  # no split dimension: counts whole
    assert checks.any_failed(torch.tensor([False, True])) is True


def test_kl_to_standard_normal_matches_torch(generator):
    mean = torch.randn(3, 5, generator=generator, dtype=DTYPE)
    chol = torch.linalg.cholesky(random_spd(generator, 3, 5, 5))
    standard = MultivariateNormal(torch.zeros(5, dtype=DTYPE), torch.eye(5, dtype=DTYPE))
    torch.testing.assert_close(gaussian.kl_to_standard_normal(mean, chol),
                               torch_kl(MultivariateNormal(mean, scale_tril=chol), standard))


def test_log_density_entropy_cross_entropy_kl_match_torch(generator):
    batch, size = 3, 4
    mean_q, mean_p = torch.randn(2, batch, size, generator=generator, dtype=DTYPE)
    cov_q, cov_p = random_spd(generator, batch, size, size), random_spd(generator, batch, size, size)
    chol_q, chol_p = torch.linalg.cholesky(cov_q), torch.linalg.cholesky(cov_p)
    q, p = MultivariateNormal(mean_q, cov_q), MultivariateNormal(mean_p, cov_p)
    value = torch.randn(batch, size, generator=generator, dtype=DTYPE)

    torch.testing.assert_close(log_density(value, mean_p, chol_p), p.log_prob(value))
    torch.testing.assert_close(entropy(chol_q), q.entropy())
    torch.testing.assert_close(kl_divergence(mean_q, chol_q, mean_p, chol_p), torch_kl(q, p))
    torch.testing.assert_close(cross_entropy(mean_q, chol_q, mean_p, chol_p), torch_kl(q, p) + q.entropy())
    assert kl_divergence(mean_q, chol_q, mean_q, chol_q).abs().max() < 1e-12


def test_condition_matches_explicit_inverse(generator):
    joint = random_spd(generator, 7, 7)
    mean = torch.randn(7, generator=generator, dtype=DTYPE)
    value_b = torch.randn(4, generator=generator, dtype=DTYPE)
    a, b = slice(0, 3), slice(3, 7)
    gain = joint[a, b] @ torch.linalg.inv(joint[b, b])
    expected_mean = mean[a] + gain @ (value_b - mean[b])
    expected_cov = joint[a, a] - gain @ joint[b, a]

    got_mean, got_cov = condition(mean[a], mean[b], joint[a, a], joint[a, b], joint[b, b], value_b)
    torch.testing.assert_close(got_mean, expected_mean)
    torch.testing.assert_close(got_cov, expected_cov)
    _, got_var = condition(mean[a], mean[b], joint[a, a].diagonal(), joint[a, b], joint[b, b], value_b, diag=True)
    torch.testing.assert_close(got_var, expected_cov.diagonal())


@pytest.mark.parametrize("beta", [1.0, 0.3])
def test_tempered_prior_matches_precision_form(generator, beta):
    prior_cov, previous_cov = random_spd(generator, 6, 6), random_spd(generator, 6, 6)
    previous_mean = torch.randn(6, generator=generator, dtype=DTYPE)
    precision = (1 - beta) * torch.linalg.inv(previous_cov) + beta * torch.linalg.inv(prior_cov)
    expected_cov = torch.linalg.inv(precision)  # K~ = [(1-beta) S^-1 + beta K^-1]^-1
    expected_mean = expected_cov @ ((1 - beta) * torch.linalg.inv(previous_cov) @ previous_mean)

    mean, cov = tempered_prior(prior_cov, previous_mean, previous_cov, beta)
    torch.testing.assert_close(cov, expected_cov)
    torch.testing.assert_close(mean, expected_mean)
    assert torch.equal(cov, cov.mT)


@pytest.mark.parametrize("beta", [1.0, 0.3])
def test_tempered_target_matches_brute_force_joint_conditioning(generator, beta):
    n, m, n_train, noise_variance = 3, 4, 50, 0.2
    prior_cov, previous_cov = random_spd(generator, n + m, n + m), random_spd(generator, n + m, n + m)
    previous_mean = torch.randn(n + m, generator=generator, dtype=DTYPE)
    y_batch = torch.randn(n, generator=generator, dtype=DTYPE)

    # The tempered prior with explicit inverses, then the joint Gaussian of [f_Z, y_B].
    tilde_cov = torch.linalg.inv((1 - beta) * torch.linalg.inv(previous_cov) + beta * torch.linalg.inv(prior_cov))
    tilde_mean = tilde_cov @ ((1 - beta) * torch.linalg.inv(previous_cov) @ previous_mean)
    batch_noise = noise_variance * n / (n_train * beta)  # eq. 10
    joint_mean = torch.cat([tilde_mean, tilde_mean[:n]])
    joint_cov = torch.cat(
        [
            torch.cat([tilde_cov, tilde_cov[:, :n]], dim=1),
            torch.cat([tilde_cov[:n, :], tilde_cov[:n, :n] + batch_noise * torch.eye(n, dtype=DTYPE)], dim=1),
        ]
    )
    f, y = slice(0, n + m), slice(n + m, 2 * n + m)
    gain = joint_cov[f, y] @ torch.linalg.inv(joint_cov[y, y])
    posterior_mean = joint_mean[f] + gain @ (y_batch - joint_mean[y])
    posterior_cov = joint_cov[f, f] - gain @ joint_cov[y, f]

    mean, cov = tempered_target(prior_cov, previous_mean, previous_cov, y_batch, noise_variance, beta, n_train)
    torch.testing.assert_close(mean, posterior_mean[n:])
    torch.testing.assert_close(cov, posterior_cov[n:, n:])


GRADIENT_CASES = [(True, False), (True, True), (False, True), (False, False)]  # (cov_q, cov_p) need a gradient


@pytest.mark.parametrize(("grad_of_q", "grad_of_p"), GRADIENT_CASES)
def test_kl_of_covariances_matches_the_factor_form_and_its_gradients(generator, grad_of_q, grad_of_p):
    """Each path of the closed form (inverses where cov_q has a gradient, triangular solves otherwise)."""
    mean_q, mean_p = (torch.randn(2, 4, generator=generator, dtype=DTYPE).requires_grad_(True) for _ in range(2))
    cov_q = random_spd(generator, 2, 4, 4).requires_grad_(grad_of_q)
    cov_p = random_spd(generator, 2, 4, 4).requires_grad_(grad_of_p)
    closed = gaussian.kl_divergence_of_covariances(mean_q, cov_q, mean_p, cov_p)
    reference = kl_divergence(mean_q, torch.linalg.cholesky(cov_q), mean_p, torch.linalg.cholesky(cov_p))
    torch.testing.assert_close(closed, reference)
    torch.testing.assert_close(closed, torch_kl(MultivariateNormal(mean_q, cov_q), MultivariateNormal(mean_p, cov_p)))
    weights = torch.tensor([0.7, -1.3], dtype=DTYPE)
    inputs = [t for t in (mean_q, cov_q, mean_p, cov_p) if t.requires_grad]
    mine = torch.autograd.grad((closed * weights).sum(), inputs)
    theirs = torch.autograd.grad((reference * weights).sum(), inputs)
    for got, expected in zip(mine, theirs):  # symmetric covariances: compare the symmetric parts
        if got.dim() == 3:
            got, expected = 0.5 * (got + got.mT), 0.5 * (expected + expected.mT)
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize(("grad_of_q", "grad_of_p"), GRADIENT_CASES[:3])
def test_kl_of_covariances_passes_gradcheck(generator, grad_of_q, grad_of_p):
    """gradcheck through covariances S = X X^T / n + I / 2, so that every perturbation stays symmetric."""
    mean_q, mean_p = (torch.randn(2, 3, generator=generator, dtype=DTYPE).requires_grad_(True) for _ in range(2))
    root_q, root_p = (torch.randn(2, 3, 3, generator=generator, dtype=DTYPE) for _ in range(2))
    root_q.requires_grad_(grad_of_q)
    root_p.requires_grad_(grad_of_p)

    def kl(mean_q, root_q, mean_p, root_p):
        return gaussian.kl_divergence_of_covariances(mean_q, random_spd_of(root_q), mean_p, random_spd_of(root_p))

    assert torch.autograd.gradcheck(kl, (mean_q, root_q, mean_p, root_p))


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


def old_tempered_prior(prior_cov, previous_mean, previous_cov, beta):
    """m~ and K~ as they were formed before: K B^-1 [mu Sigma] by cholesky_solve, B = beta Sigma + (1-beta) K."""
    chol_mixture = torch.linalg.cholesky(beta * previous_cov + (1 - beta) * prior_cov)
    cov = prior_cov @ torch.cholesky_solve(previous_cov, chol_mixture)
    mean = (1 - beta) * (prior_cov @ torch.cholesky_solve(previous_mean.unsqueeze(-1), chol_mixture))
    return mean.squeeze(-1), 0.5 * (cov + cov.mT)


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


class OperatorNames(TorchDispatchMode, set):
    """The names of the aten operators called within (``linalg_solve_triangular``, ...)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.add(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


@pytest.fixture(params=["cpu", "gpu"])
def inverse_form(request, monkeypatch) -> str:
    """The covariance KL with a CPU's inverse (potri) and with a GPU's (``inverse_by_products``), on the CPU."""
    if request.param == "gpu":
        monkeypatch.setattr(gaussian, "inverse_from_scale_tril", linalg.inverse_by_products)
    return request.param


@pytest.mark.parametrize(("size", "condition_number"), FACTORIZATION_CASES)
@pytest.mark.parametrize(("grad_of_q", "grad_of_p"), GRADIENT_CASES[:3])
def test_kl_of_covariances_equals_its_cholesky_inverse_form(generator, size, condition_number, grad_of_q, grad_of_p,
                                                             inverse_form):
    """The closed-form KL and its gradients equal those written with ``torch.cholesky_inverse`` (the old
    form), to 1e-10 of each result's scale, on random and near-singular covariances."""
    mean_q, mean_p = (torch.randn(2, size, generator=generator, dtype=DTYPE).requires_grad_(True) for _ in range(2))
    cov_q = spd_of_condition(generator, condition_number, 2, size).requires_grad_(grad_of_q)
    cov_p = spd_of_condition(generator, condition_number, 2, size).requires_grad_(grad_of_p)
    weights = torch.tensor([0.7, -1.3], dtype=DTYPE)
    inputs = [t for t in (mean_q, cov_q, mean_p, cov_p) if t.requires_grad]
    kl = gaussian.kl_divergence_of_covariances(mean_q, cov_q, mean_p, cov_p)
    mine = torch.autograd.grad((kl * weights).sum(), inputs)

    with torch.no_grad():  # dS_q = (S_p^-1 - S_q^-1) / 2, dS_p = (S_p^-1 - S_p^-1 (S_q + d d^T) S_p^-1) / 2
        precision_q = old_inverse(torch.linalg.cholesky(cov_q))
        precision_p = old_inverse(torch.linalg.cholesky(cov_p))
        difference = (mean_q - mean_p).unsqueeze(-1)
        alpha = precision_p @ difference
        expected_kl = 0.5 * ((precision_p * cov_q).sum((-2, -1)) + (difference * alpha).sum((-2, -1)) - size
                             + torch.logdet(cov_p) - torch.logdet(cov_q))
        scale = 0.5 * weights[:, None, None]
        grad_mean = weights[:, None] * alpha.squeeze(-1)
        expected = {id(mean_q): grad_mean, id(mean_p): -grad_mean,
                    id(cov_q): scale * (precision_p - precision_q),
                    id(cov_p): scale * (precision_p - precision_p @ cov_q @ precision_p - alpha @ alpha.mT)}
    assert_close_to_scale(kl, expected_kl)
    for tensor, got in zip(inputs, mine):
        assert_close_to_scale(got, expected[id(tensor)])


def tempered_prior_case(generator, size, condition_number):
    """K ``[2, 1, size, size]`` shared by 3 classes (GPNet's L_t broadcasts it), Sigma ``[2, 3, size, size]``
    and mu ``[2, 3, size]``, K and Sigma of the given condition number."""
    return (spd_of_condition(generator, condition_number, 2, 1, size),
            torch.randn(2, 3, size, generator=generator, dtype=DTYPE),
            spd_of_condition(generator, condition_number, 2, 3, size))


@pytest.mark.parametrize(("size", "condition_number"), FACTORIZATION_CASES)
@pytest.mark.parametrize("beta", [1.0, 0.7, 0.5, 0.3, 0.01])
def test_tempered_prior_equals_its_cholesky_solve_form(generator, size, condition_number, beta):
    """Below HALVES_FROM points (L_B^-1 K)^T (L_B^-1 [Sigma mu]), from it the Gram form (A - a A B^-1 A) / (1 - a)
    (issue 39): each equals K B^-1 [Sigma mu] by ``torch.cholesky_solve`` (the old form) to 1e-10 of each
    result's scale, on random and near-singular K and Sigma (the mixture B's condition number up to 1e6),
    except at beta = 1 with a near-singular Sigma: there B = Sigma has condition 1e8 and the product forms
    miss the exact K~ = K by about 1e-9 (kappa eps), the new one by as much as the old one (the common
    Cholesky factor's rounding; the Gram form, A = K and a = 0 there, is K itself); they agree to 1e-9. The
    product form is symmetrized; the Gram form is symmetric up to its inputs' rounding (here to 1e-12 of the
    result's scale, the inputs' asymmetry of eps |Sigma| against a K~ up to 1e4 times smaller)."""
    prior_cov, previous_mean, previous_cov = tempered_prior_case(generator, size, condition_number)
    expected_mean, expected_cov = old_tempered_prior(prior_cov, previous_mean, previous_cov, beta)
    mean, cov = tempered_prior(prior_cov, previous_mean, previous_cov, beta)
    singular_mixture = beta == 1.0 and condition_number > 1e4
    assert_close_to_scale(cov, expected_cov, 1e-9 if singular_mixture else 1e-10)
    assert_close_to_scale(mean, expected_mean)
    if size < HALVES_FROM:
        assert torch.equal(cov, cov.mT)
    else:
        assert_close_to_scale(cov, cov.mT, 1e-12)
    if singular_mixture:  # K~ = K exactly: as exact as the old form, to 1% of its error
        exact = prior_cov.expand_as(cov)
        new_error, old_error = ((each - exact).abs().max() for each in (cov, expected_cov))
        assert new_error <= 1.01 * old_error


@pytest.mark.parametrize("scale", [1e-2, 1.0, 1e2])
@pytest.mark.parametrize("beta", [0.05, 0.5, 0.95])
def test_tempered_prior_gram_form_is_exact_to_rounding_where_sigma_and_k_differ_in_scale(generator, scale, beta):
    """Sigma = c K: K~ = c K / (beta c + 1 - beta) and m~ = (1-beta) mu / (beta c + 1 - beta) exactly. The Gram
    form's difference (A - a A B^-1 A) / (1 - a) loses a |A| / ((1 - a) |K~|) roundings, 50 here at beta = 1/2
    and c = 100 (1.3e-13 seen); with each side's a <= 1/2 within 1e-12 relative. Sigma's side at beta = 0.95
    and c = 100 (a = 0.95) would lose 1800 (it fails), which K's side (a = 0.05) does not."""
    size = HALVES_FROM + 1
    prior_cov = spd_of_condition(generator, 1e2, 2, 1, size)
    previous_cov = scale * prior_cov.expand(2, 3, size, size)
    previous_mean = torch.randn(2, 3, size, generator=generator, dtype=DTYPE)
    mean, cov = tempered_prior(prior_cov, previous_mean, previous_cov, beta)
    denominator = beta * scale + 1 - beta
    assert_close_to_scale(cov, (scale / denominator * prior_cov).expand_as(cov), 1e-12)
    assert_close_to_scale(mean, (1 - beta) / denominator * previous_mean, 1e-12)


@pytest.mark.parametrize("size", [20, HALVES_FROM + 1])
def test_new_forms_in_float32_round_as_the_old_ones(generator, size):
    """training.dtype float32 runs these forms in float32 (``mixed`` runs them in float64): at condition 1e2
    they stay within float32 rounding of the float64 result, 1e-5 of its scale, as the old forms do."""
    chol = torch.linalg.cholesky(spd_of_condition(generator, 1e2, 3, size))
    reference = linalg.inverse_by_products(chol)
    for inverse in (linalg.inverse_by_products, old_inverse):
        result = inverse(chol.float())
        assert result.dtype == torch.float32
        assert_close_to_scale(result.double(), reference, 1e-5)
    case = tempered_prior_case(generator, size, 1e2)
    reference = tempered_prior(*case, 0.3)
    for form in (tempered_prior, old_tempered_prior):
        for result, expected in zip(form(*(each.float() for each in case), 0.3), reference):
            assert result.dtype == torch.float32
            assert_close_to_scale(result.double(), expected, 1e-5)


def old_scale_tril(raw: torch.Tensor) -> torch.Tensor:
    """scale_tril as it was formed before issue 39's item 4: autograd's tril, diag_embed and their sum."""
    return torch.tril(raw, diagonal=-1) + torch.diag_embed(positive(raw.diagonal(dim1=-2, dim2=-1)))


def old_symmetric_product(factor: torch.Tensor, upper_triangular: bool = False) -> torch.Tensor:
    """symmetric_product's row halves as they were joined before issue 39's item 4: concatenations."""
    half = factor.shape[-2] // 2
    top = factor[..., :half, :]
    if upper_triangular:
        bottom, top_right = factor[..., half:, half:], top[..., half:]
    else:
        bottom, top_right = factor[..., half:, :], top
    lower_left = bottom @ top_right.mT
    return torch.cat([torch.cat([top @ top.mT, lower_left.mT], dim=-1),
                      torch.cat([lower_left, bottom @ bottom.mT], dim=-1)], dim=-2)


def values_and_gradients(form, argument: torch.Tensor, upstream: torch.Tensor) -> list[torch.Tensor]:
    """form(argument) and the gradient of (form(argument) * upstream).sum() with respect to ``argument``."""
    leaf = argument.detach().requires_grad_()
    value = form(leaf)
    (value * upstream).sum().backward()
    return [value.detach(), leaf.grad]


@pytest.mark.parametrize("shape", [(6, 6), (3, 2, 40, 40)])
def test_scale_tril_equals_autograds_form_bit_for_bit(generator, shape):
    """Values and gradients element for element the same floating-point operations: equal, not close; the raw
    diagonal spans softplus's threshold (20) and its flat negative side, the upstream gradient is not lower."""
    raw = 8 * torch.randn(shape, generator=generator, dtype=DTYPE)
    raw.diagonal(dim1=-2, dim2=-1)[..., :3] = torch.tensor([25.0, -30.0, 20.0], dtype=DTYPE)
    upstream = torch.randn(shape, generator=generator, dtype=DTYPE)
    for new, old in zip(values_and_gradients(scale_tril, raw, upstream),
                        values_and_gradients(old_scale_tril, raw, upstream)):
        assert torch.equal(new, old)
    with pytest.raises(RuntimeError):  # once differentiable: a second derivative raises, not wrong
        leaf = raw.detach().requires_grad_()
        (grad,) = torch.autograd.grad((scale_tril(leaf) * upstream).sum(), leaf, create_graph=True)
        grad.sum().backward()


@pytest.mark.parametrize("rows", [7, HALVES_FROM + 1])  # the Gram of one product and of row halves
def test_add_jitter_in_place_equals_add_jitter_and_writes_its_argument(generator, rows):
    root = torch.randn(3, rows, 5, generator=generator, dtype=DTYPE)
    upstream = torch.randn(3, rows, rows, generator=generator, dtype=DTYPE)
    for new, old in zip(values_and_gradients(lambda x: linalg.add_jitter_(gram(x)), root, upstream),
                        values_and_gradients(lambda x: linalg.add_jitter(gram(x)), root, upstream)):
        assert torch.equal(new, old)
    # a gradient arriving transposed leaves in the matrix's layout, as autograd's copy left it: a kernel variance's
    # gradient sums over it in the same order
    kernel_values = torch.rand(3, rows, rows, generator=generator, dtype=DTYPE)
    variance = torch.rand(3, 1, 1, generator=generator, dtype=DTYPE)
    for new, old in zip(values_and_gradients(lambda v: linalg.add_jitter_(v * kernel_values).mT, variance, upstream),
                        values_and_gradients(lambda v: linalg.add_jitter(v * kernel_values).mT, variance, upstream)):
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
