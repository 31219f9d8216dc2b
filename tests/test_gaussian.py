"""Gaussian maths against torch.distributions and brute-force formulas with explicit inverses."""

import pytest
import torch
from torch.distributions import MultivariateNormal
from torch.distributions import kl_divergence as torch_kl

from gpstudy import gaussian, linalg
from gpstudy.gaussian import (
    condition,
    cross_entropy,
    entropy,
    kl_divergence,
    log_density,
    tempered_prior,
    tempered_target,
)
from gpstudy.linalg import HALVES_FROM

from matrices import (
    DTYPE,
    FACTORIZATION_CASES,
    assert_close_to_scale,
    old_inverse,
    random_spd,
    random_spd_of,
    spd_of_condition,
)


def test_kl_to_standard_normal_matches_torch(generator):
    mean = torch.randn(3, 5, generator=generator, dtype=DTYPE)
    chol = torch.linalg.cholesky(random_spd(generator, 3, 5, 5))
    standard = MultivariateNormal(torch.zeros(5, dtype=DTYPE), torch.eye(5, dtype=DTYPE))
    torch.testing.assert_close(
        gaussian.kl_to_standard_normal(mean, chol), torch_kl(MultivariateNormal(mean, scale_tril=chol), standard)
    )


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_kl_to_standard_normal_s_closed_form_gradient_matches_torch_s_autograd(generator, dtype):
    """dm = g m and dL = g (L - diag(1 / diag L)) (``_StandardNormalKL``) against autograd through
    torch.distributions' KL, with a different upstream gradient per batch member."""
    mean = torch.randn(3, 7, generator=generator, dtype=DTYPE).to(dtype).requires_grad_()
    chol = torch.linalg.cholesky(random_spd(generator, 3, 7, 7)).to(dtype).requires_grad_()
    upstream = torch.tensor([0.5, -2.0, 3.0], dtype=dtype)
    got = torch.autograd.grad(gaussian.kl_to_standard_normal(mean, chol), (mean, chol), upstream)
    standard = MultivariateNormal(torch.zeros(7, dtype=dtype), torch.eye(7, dtype=dtype))
    expected = torch.autograd.grad(
        torch_kl(MultivariateNormal(mean, scale_tril=chol), standard), (mean, chol), upstream
    )
    tolerance = 1e-12 if dtype == torch.float64 else 1e-5
    for value, reference in zip(got, expected):
        torch.testing.assert_close(
            value, reference.tril() if value.ndim == 3 else reference, rtol=tolerance, atol=tolerance
        )


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


def test_the_kl_of_whitened_terms_matches_torch(generator):
    """``kl_divergence_of_whitened`` from A = L_p^-1 L_q and w = L_p^-1 (m_q - m_p), solved outside it."""
    batch, size = 3, 6
    mean_q, mean_p = torch.randn(2, batch, size, generator=generator, dtype=DTYPE)
    chol_q = torch.linalg.cholesky(random_spd(generator, batch, size, size))
    chol_p = torch.linalg.cholesky(random_spd(generator, batch, size, size))
    whitened_scale = torch.linalg.solve_triangular(chol_p, chol_q, upper=False)
    whitened_difference = torch.linalg.solve_triangular(chol_p, (mean_q - mean_p).unsqueeze(-1), upper=False)
    kl = gaussian.kl_divergence_of_whitened(whitened_scale, whitened_difference.squeeze(-1), chol_q, chol_p)
    expected = torch_kl(MultivariateNormal(mean_q, scale_tril=chol_q), MultivariateNormal(mean_p, scale_tril=chol_p))
    torch.testing.assert_close(kl, expected, rtol=1e-12, atol=1e-12)


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


@pytest.mark.parametrize(
    ("grad_of_q", "grad_of_p", "uses"),
    [(*case, "both") for case in GRADIENT_CASES] + [(True, False, "variances"), (True, True, "variances")],
)
def test_the_kl_with_variances_gives_the_diagonal_and_the_gradients_of_both(generator, grad_of_q, grad_of_p, uses):
    """``kl_divergence_and_variances``: the KL and cov_q's diagonal, and the gradients of a loss of both (or of the
    variances alone) equal autograd's through ``torch.distributions`` and ``diagonal``."""
    mean_q, mean_p = (torch.randn(2, 4, generator=generator, dtype=DTYPE).requires_grad_(True) for _ in range(2))
    cov_q = random_spd(generator, 2, 4, 4).requires_grad_(grad_of_q)
    cov_p = random_spd(generator, 2, 4, 4).requires_grad_(grad_of_p)
    kl, variances = gaussian.kl_divergence_and_variances(mean_q, cov_q, mean_p, cov_p)
    reference_kl = torch_kl(MultivariateNormal(mean_q, cov_q), MultivariateNormal(mean_p, cov_p))
    reference_variances = cov_q.diagonal(dim1=-2, dim2=-1)
    torch.testing.assert_close(kl, reference_kl)
    assert torch.equal(variances, reference_variances)
    weights = torch.tensor([0.7, -1.3], dtype=DTYPE)
    variance_weights = torch.randn(2, 4, generator=generator, dtype=DTYPE)

    def loss(kl, variances):
        return (variances * variance_weights).sum() + (0 if uses == "variances" else (kl * weights).sum())

    inputs = [t for t in (mean_q, cov_q, mean_p, cov_p) if t.requires_grad]
    mine = torch.autograd.grad(loss(kl, variances), inputs, allow_unused=True)
    theirs = torch.autograd.grad(loss(reference_kl, reference_variances), inputs, allow_unused=True)
    for got, expected in zip(mine, theirs):
        if expected is None:  # the variances alone: no gradient of the means
            assert got is None or not got.any()
            continue
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


def old_tempered_prior(prior_cov, previous_mean, previous_cov, beta):
    """m~ and K~ as they were formed before: K B^-1 [mu Sigma] by cholesky_solve, B = beta Sigma + (1-beta) K."""
    chol_mixture = torch.linalg.cholesky(beta * previous_cov + (1 - beta) * prior_cov)
    cov = prior_cov @ torch.cholesky_solve(previous_cov, chol_mixture)
    mean = (1 - beta) * (prior_cov @ torch.cholesky_solve(previous_mean.unsqueeze(-1), chol_mixture))
    return mean.squeeze(-1), 0.5 * (cov + cov.mT)


@pytest.fixture(params=["cpu", "gpu"])
def inverse_form(request, monkeypatch) -> str:
    """The covariance KL with a CPU's inverse (potri) and with a GPU's (``inverse_by_products``), on the CPU."""
    if request.param == "gpu":
        monkeypatch.setattr(gaussian, "inverse_from_scale_tril", linalg.inverse_by_products)
    return request.param


@pytest.mark.parametrize(("size", "condition_number"), FACTORIZATION_CASES)
@pytest.mark.parametrize(("grad_of_q", "grad_of_p"), GRADIENT_CASES[:3])
def test_kl_of_covariances_equals_its_cholesky_inverse_form(
    generator, size, condition_number, grad_of_q, grad_of_p, inverse_form
):
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
        expected_kl = 0.5 * (
            (precision_p * cov_q).sum((-2, -1))
            + (difference * alpha).sum((-2, -1))
            - size
            + torch.logdet(cov_p)
            - torch.logdet(cov_q)
        )
        scale = 0.5 * weights[:, None, None]
        grad_mean = weights[:, None] * alpha.squeeze(-1)
        expected = {
            id(mean_q): grad_mean,
            id(mean_p): -grad_mean,
            id(cov_q): scale * (precision_p - precision_q),
            id(cov_p): scale * (precision_p - precision_p @ cov_q @ precision_p - alpha @ alpha.mT),
        }
    assert_close_to_scale(kl, expected_kl)
    for tensor, got in zip(inputs, mine):
        assert_close_to_scale(got, expected[id(tensor)])


def tempered_prior_case(generator, size, condition_number):
    """K ``[2, 1, size, size]`` shared by 3 classes (GPNet's L_t broadcasts it), Sigma ``[2, 3, size, size]``
    and mu ``[2, 3, size]``, K and Sigma of the given condition number."""
    return (
        spd_of_condition(generator, condition_number, 2, 1, size),
        torch.randn(2, 3, size, generator=generator, dtype=DTYPE),
        spd_of_condition(generator, condition_number, 2, 3, size),
    )


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
