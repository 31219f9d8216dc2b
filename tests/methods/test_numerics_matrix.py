"""The numerics matrix (issue 35): every method and variant x dtype x the study's sizes, each step's loss and
gradients against float64, and every cached factor on the path where a factorization fails.

Each cell builds the method as a run does (config.yaml's defaults and the data set's options through
``run_settings``) on synthetic data of a study size, trains it a few float64 steps, and compares one loss and
its gradients (step 1; a leave-one-out variant at its first LOO step) in the cell's dtype, from the same
parameters and draws, with float64's. Measured on one loaded core: about 50 s of CPU for the module.
"""

import copy
import logging
import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest
import torch

from gpstudy import generators as draws
from gpstudy.data.registry import get_dataset
from gpstudy.linalg import CholeskyError, inverse_positive
from gpstudy.methods import METHODS, Problem, build_method
from gpstudy.methods.base import InferenceNetworkMethod
from gpstudy.numerics import DTYPES
from gpstudy.study import check_settings, load_config, method_names, run_settings
from gpstudy.training.optim import adam, optimizer_step
from gpstudy.training.run import initial_kernel, initial_likelihood, method_config

CONFIG = load_config(Path(__file__).resolve().parents[2] / "config.yaml")


@dataclass(frozen=True)
class Size:
    """A study size: the data set whose options (batch size, hidden units, c(x)) a run there takes, and the
    synthetic data's N and D (close to the data set's, small enough for seconds)."""

    dataset: str
    n: int
    d: int
    Ms: tuple[int, ...]
    lengthscale: float  # every lengthscale of the kernel (``initial_lengthscale``)


SIZES = {
    "snelson": Size("snelson", 100, 1, (2, 5, 20), 1.0),  # experiment 1: N 100, batch 20 (config.yaml)
    # experiment 2's sizes on a kin8nm-like set (batch 500). Lengthscale 3, not the start's 1: a trained prior
    # is smoother, and at l = 1 K_ZZ of 500 centres in 8-D is well conditioned (cond ~40), where any form is
    # exact in float32; at l = 3 cond(K_ZZ) ~ 4e6, where a cancelling form loses what float32 keeps.
    "uci": Size("kin8nm", 1500, 8, (100, 500), 3.0),
}


def dtypes(variant: str) -> tuple[str, ...]:
    """The training dtypes a method runs in: mixed only where it has an inference network."""
    method = METHODS[run_settings(CONFIG, None, method=variant, M=1).method]
    return ("float64", "float32", "mixed") if issubclass(method, InferenceNetworkMethod) else ("float64", "float32")


def distinct_variants() -> list[str]:
    """Every method and variant of the config, less a variant whose settings are another's (orth is odvgp's
    defaults)."""
    names, seen = [], []
    for name in method_names(CONFIG):
        settings = run_settings(CONFIG, None, method=name, M=1)
        if settings not in seen:
            names.append(name)
            seen.append(settings)
    return names


# Cells that fail beyond issue 35's items 1-3, found by this matrix and reported with it: strict, so that a fix
# turns them into failures until they are taken off this list. (Items 1-3's own cells are not listed: they fail.)
FLOAT32_NETWORK = (
    "float32 RFE network: its Gram Phi L L^T Phi^T is rounded at u |Phi|^2, beyond the 1e-6 jitter "
    "that S_q^-1 then amplifies; item 3's cause, in a run that is float32 throughout"
)
FLOAT32_UNWHITENED = (
    "float32 ODVGP: K_beta^-1 (not whitened) at cond(K_beta) ~1e6 (20 points in 1-D, or l = 3 in 8-D): u cond ~ 0.1"
)
KNOWN = {
    **{
        f"{method}-{cell}-float32": FLOAT32_NETWORK
        for method, cells in (
            ("fbnn", ("snelson-M2", "snelson-M5", "snelson-M20", "uci-M100", "uci-M500")),
            ("gpnet", ("snelson-M2", "snelson-M5", "snelson-M20", "uci-M100", "uci-M500")),
        )
        for cell in cells
    },
    **{
        f"{method}-{cell}-float32": FLOAT32_UNWHITENED
        for method in ("odvgp", "orthnat")
        for cell in ("snelson-M20", "uci-M500")
    },
    **{
        f"autogp_arccos-snelson-M{M}-float32": "float32 arc-cosine prior in 1-D (white noise 1e-4): K_ZZ nearly "
        "singular beyond M = 2"
        for M in (5, 20)
    },
}
# Known failures whose loss error sits at its bound, so that a rounding change anywhere in the step, or another CPU's
# BLAS kernels, passes or fails them: not strict. GPNet's float32 UCI cells' loss errors, seen: M = 100 1.3e-4
# (ed2a343), 1.8e-5 and 1.4e-4 (issue 39's stacked covariance with 8 and 4 blocks), 1.7e-4 (bac91af); M = 500
# 2.2e-4, 4.4e-4, 3.5e-5, 6.2e-5. On an AVX-512 Xeon (MKL's AVX-512 kernels, a460fef's code) FBNN's UCI M = 100
# failed at 5.9e-4 and ODVGP's UCI M = 500 passed; both the other way round where CI ran before (stop 44).
AT_THE_BOUND = {"gpnet-uci-M100-float32", "gpnet-uci-M500-float32", "fbnn-uci-M100-float32", "odvgp-uci-M500-float32"}


def cell(variant: str, size: str, M: int, dtype: str):
    """A cell of the matrix, marked if it is a known failure (``KNOWN``)."""
    name = f"{variant}-{size}-M{M}-{dtype}"
    marks = [pytest.mark.xfail(strict=name not in AT_THE_BOUND, reason=KNOWN[name])] if name in KNOWN else []
    return pytest.param(variant, size, M, dtype, id=name, marks=marks)


CELLS = [
    cell(variant, size, M, dtype)
    for variant in distinct_variants()
    for size, spec in SIZES.items()
    for M in (spec.Ms[:1] if variant == "exact" else spec.Ms)  # the exact GP has no M
    for dtype in dtypes(variant)
]

# Tolerances, relative to the float64 value (loss) or its norm (each parameter's gradient).
# float32: unit roundoff u = 2^-24 = 6e-8. A backward-stable Cholesky or solve errs by u times the condition
# number, and cond(K_ZZ) reaches 1/jitter = 1e6 (here ~4e6 at the UCI size): what float32 keeps is what does
# not pass through K_ZZ^-1 or cancel. Seen on the cells that pass: loss to 3e-6 and gradients to 8e-4 (SVGP,
# ODVGP, AutoGP, exact), network methods loss to 9e-5 and gradients to 4e-3. Loss 1e-4 and gradients 1e-2 are
# the largest bounds that still catch issue 35's summed variances in float32 (SVGP M = 500, B = 500: loss
# 2.3e-4, gradient 0.12; the per-point form: 1.6e-7 and 1.8e-4) and are 50-100 times below a factor of 2.
# mixed: float64 but the network's feature products in float32: u times the Gram's growth (F features
# summed), then float64; the same bounds as float32.
LOSS_TOLERANCE = {"float32": 1e-4, "mixed": 1e-4}
GRADIENT_TOLERANCE = {"float32": 1e-2, "mixed": 1e-2}
# float64: the reference itself; its gradient is checked against a central difference of its loss along one
# direction (step h: error h^2 from the curvature, u64 |loss| / h from rounding, both ~1e-8 relative).
DIFFERENCE_STEP, DIFFERENCE_TOLERANCE = 1e-5, 1e-5
WARM_UP_STEPS, WARM_UP_LR = 3, 0.01  # the state compared: a few steps into training (``train``)
LOSS_SEED = 3  # every loss of a cell draws from a generator of this seed (c(x), Monte Carlo samples)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One CPU thread, as the module's time is stated (and no oversubscription beside other test workers)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def dtype_independent_draws(monkeypatch):
    """Draws that a float32 run and its float64 reference share: U(0, 1) and N(0, 1) drawn in float64 and
    rounded to the run's dtype (torch's float32 ``rand`` is another stream than float64's)."""
    rand, randn = draws.rand, draws.randn

    def in_float64(draw):
        def drawn(shape, generators, like):
            return draw(shape, generators, like.to(torch.float64)).to(like.dtype)

        return drawn

    monkeypatch.setattr(draws, "rand", in_float64(rand))
    monkeypatch.setattr(draws, "randn", in_float64(randn))


def synthetic_data(size: Size) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """x ``[N, D]`` in the data's units (Snelson-like: [0, 6]; UCI-like: standard normal), standardized,
    y = a smooth function plus noise, standardized; and x's mean and std (a box c(x) is in data units)."""
    generator = torch.Generator().manual_seed(0)
    raw = torch.randn(size.n, size.d, generator=generator, dtype=torch.float64)
    if size.d == 1:
        raw = 6 * torch.rand(size.n, 1, generator=generator, dtype=torch.float64)
    y = (
        torch.sin(2 * raw).sum(-1)
        + 0.3 * raw[:, 0]
        + 0.2 * torch.randn(size.n, generator=generator, dtype=torch.float64)
    )
    x_mean, x_std = raw.mean(0), raw.std(0)
    return (raw - x_mean) / x_std, (y - y.mean()) / y.std(), x_mean, x_std


def build(variant: str, size: Size, M: int, dtype: str):
    """The method of ``variant`` at ``size`` in ``dtype`` as a run builds it (its settings checked as before any
    job: ``ValueError`` where they are refused), its batch and its first step."""
    settings = run_settings(
        CONFIG, size.dataset, method=variant, M=M, dtype=dtype, initial_lengthscale=size.lengthscale
    )
    check_settings(settings, get_dataset(size.dataset))
    x, y, x_mean, x_std = synthetic_data(size)
    x, y = (values.to(DTYPES[settings.dtype][0]) for values in (x, y))
    problem = Problem(
        x, y, initial_kernel(settings, size.d), initial_likelihood(settings), torch.Generator().manual_seed(0)
    )
    method = build_method(settings.method, problem, method_config(settings, size.n, x_mean.numpy(), x_std.numpy()))
    batch = min(settings.batch_size, size.n)
    loo = settings.options.get("loo_phase", 0)
    step = settings.options["variational_phase"] + 1 if loo else 1  # a LOO variant: its first LOO step
    return method, x[:batch], y[:batch], step


def train(method, x, y) -> None:
    """WARM_UP_STEPS Adam steps as training takes them (``optimizer_step``), so that q has left its start:
    at q = p (SVGP's m = 0, S = I; ODVGP's a_gamma = 0) the loss does not depend on Z or gamma, whose
    float64 gradients are then exactly zero and float32's are rounding."""
    optimizer = adam(method.adam_parameters(), WARM_UP_LR, x.device)
    generator = torch.Generator().manual_seed(LOSS_SEED + 1)
    for step in range(1, WARM_UP_STEPS + 1):
        optimizer_step(optimizer, lambda: method.loss(x, y, step, generator), generator, method.natural_update)


def loss_and_gradients(method, x, y, step) -> tuple[float, dict[str, torch.Tensor]]:
    """One loss (float) and the gradient of every parameter it reaches, in float64."""
    method.zero_grad(set_to_none=True)
    loss = method.loss(x, y, step, torch.Generator().manual_seed(LOSS_SEED))
    loss.backward()
    gradients = {name: p.grad.to(torch.float64) for name, p in method.named_parameters() if p.grad is not None}
    return loss.item(), gradients


_references: dict[tuple, tuple] = {}


def reference(variant: str, size: str, M: int):
    """The float64 build of a cell after a few training steps, its loss and gradients (kept for the cell's
    other dtypes)."""
    key = (variant, size, M)
    if key not in _references:
        method, x, y, step = build(variant, SIZES[size], M, "float64")
        train(method, x, y)
        _references[key] = (method, x, y, step, *loss_and_gradients(method, x, y, step))
    return _references[key]


def relative_errors(loss, gradients, loss64, gradients64) -> tuple[float, dict[str, float]]:
    """|loss - loss64| / |loss64| and, per parameter, |g - g64| / |g64|."""
    assert gradients.keys() == gradients64.keys()
    return abs(loss - loss64) / abs(loss64), {
        name: ((gradients[name] - g).norm() / g.norm()).item() for name, g in gradients64.items()
    }


@pytest.mark.parametrize("variant, size, M, dtype", CELLS)
def test_loss_and_gradients_against_float64(variant, size, M, dtype):
    method64, x64, y64, step, loss64, gradients64 = reference(variant, size, M)
    assert math.isfinite(loss64) and all(torch.isfinite(g).all() for g in gradients64.values())
    if dtype == "float64":
        if variant != "gpnet":  # GPNet's loss is the KL to a target built from its own output held fixed (q_t,
            # eq. 11): its gradient is not the loss's derivative by design
            check_gradient_by_difference(method64, x64, y64, step, loss64, gradients64)
        return
    try:
        method, x, y, step = build(variant, SIZES[size], M, dtype)
    except ValueError as refusal:  # refused before training, naming the dtype: loud, not silently wrong
        assert dtype in str(refusal), refusal
        return
    method.load_state_dict(method64.state_dict())  # the reference's parameters, rounded to the dtype
    loss_error, gradient_errors = relative_errors(*loss_and_gradients(method, x, y, step), loss64, gradients64)
    worst = max(gradient_errors, key=gradient_errors.get)
    assert loss_error <= LOSS_TOLERANCE[dtype], f"loss off by {loss_error:.2e} relative (float64 {loss64:.6g})"
    assert gradient_errors[worst] <= GRADIENT_TOLERANCE[dtype], (
        f"{worst}'s gradient off by {gradient_errors[worst]:.2e} relative"
    )


def check_gradient_by_difference(method, x, y, step, loss, gradients) -> None:
    """d loss along a direction v (the gradient's own plus a random one, unit norm) against
    (loss(theta + h v) - loss(theta - h v)) / 2h."""
    generator = torch.Generator().manual_seed(1)
    parameters = {name: p for name, p in method.named_parameters() if name in gradients}
    norm = math.sqrt(sum(g.square().sum().item() for g in gradients.values()))
    direction = {
        name: g / norm
        + torch.randn(g.shape, generator=generator, dtype=g.dtype) / math.sqrt(g.numel() * len(gradients))
        for name, g in gradients.items()
    }
    scale = math.sqrt(sum(v.square().sum().item() for v in direction.values()))
    slope = sum((gradients[name] * v).sum().item() for name, v in direction.items()) / scale

    def shifted(sign: float) -> float:
        with torch.no_grad():
            for name, p in parameters.items():
                p.add_(sign * DIFFERENCE_STEP / scale * direction[name])
            value = method.loss(x, y, step, torch.Generator().manual_seed(LOSS_SEED)).item()
            for name, p in parameters.items():
                p.sub_(sign * DIFFERENCE_STEP / scale * direction[name])
        return value

    difference = (shifted(1.0) - shifted(-1.0)) / (2 * DIFFERENCE_STEP)
    assert abs(difference - slope) <= DIFFERENCE_TOLERANCE * abs(slope), (slope, difference)


# The failing-factor path: a prior whose Cholesky fails at the base jitter (two identical inputs where the method
# factors its prior, kernel variance 1e12: 1e-6 is below the rounding of 1e12, 1e-4 is not) makes
# ``optimizer_step`` rerun the step with every factor checked. What it returns, the gradients it leaves and every
# factor the method keeps must be those of the eager (checked) computation.
FAILING_VARIANCE = 1e12
# The exact GP's noise (0.1) and AutoGP's white noise (0.01) keep K + noise from failing below ~1e15, where no
# jitter up to CHOLESKY_MAX_TRIES saves it: their path is the CholeskyError, deferred or not.
FAILING_VARIANCE_WITH_NOISE = {"exact": 1e15, "autogp": 1e15, "autogp_loo": 1e15}
FAILING_CASES = [pytest.param(variant, {}, id=variant) for variant in distinct_variants()] + [
    pytest.param("svgp", {"learn_inducing_inputs": False, "online_hyperparameters": False}, id="svgp-fixed-prior")
]  # Table 2's SVGP: Z and kernel fixed, L_Z factored once and kept
PRIOR_INPUTS = ("inducing_inputs", "beta")  # the inputs where SVGP, AutoGP and ODVGP factor their prior


def failing_prior(variant: str, changes: dict):
    """The method at Snelson's size (M = 5) with a prior that fails the base jitter, its batch and step."""
    size = SIZES["snelson"]
    settings = run_settings(CONFIG, size.dataset, method=variant, M=5, **changes)
    x, y, x_mean, x_std = synthetic_data(size)
    x[1] = x[0]  # two identical batch points: the exact GP's, GPNet's and FBNN's prior covers the batch
    kernel = initial_kernel(settings, size.d)
    with torch.no_grad():
        variance = FAILING_VARIANCE_WITH_NOISE.get(variant, FAILING_VARIANCE)
        kernel.raw_variance.fill_(inverse_positive(torch.tensor(variance)).item())
    problem = Problem(x, y, kernel, initial_likelihood(settings), torch.Generator().manual_seed(0))
    method = build_method(settings.method, problem, method_config(settings, size.n, x_mean.numpy(), x_std.numpy()))
    with torch.no_grad():
        for name in PRIOR_INPUTS:
            if hasattr(method, name):
                inputs = getattr(method, name)
                inputs[..., 1, :] = inputs[..., 0, :]  # two identical inducing inputs
    return method, x[: settings.batch_size], y[: settings.batch_size]


@pytest.mark.parametrize("variant, changes", FAILING_CASES)
def test_a_failed_factor_is_checked_under_deferred_checks(variant, changes, caplog):
    """One ``optimizer_step`` (with a step size of 0: nothing moves) against the eager loss, gradients and factor;
    where no jitter saves the prior, both raise ``CholeskyError``."""
    deferred, x, y = failing_prior(variant, changes)
    eager = copy.deepcopy(deferred)  # before any factor is taken (or kept)
    with caplog.at_level(logging.WARNING, logger="gpstudy.gaussian"):
        try:
            eager_loss = eager.loss(x, y, 1, torch.Generator().manual_seed(LOSS_SEED))
        except CholeskyError:
            eager_loss = None
    assert "retrying them with jitter" in caplog.text  # the prior fails the base jitter: the path under test
    step = partial(
        optimizer_step,
        torch.optim.SGD(deferred.adam_parameters(), lr=0.0),
        lambda: deferred.loss(x, y, 1, torch.Generator().manual_seed(LOSS_SEED)),
        torch.Generator(),
        deferred.natural_update,
    )
    if eager_loss is None:  # no jitter saves it: loudly, deferred or not
        with pytest.raises(CholeskyError):
            step()
        return
    loss = step()
    eager_loss.backward()
    eager.natural_update()  # as the step does: ORTHNAT takes its parameters' gradients
    assert torch.isfinite(loss), f"deferred loss {loss.item()}, eager {eager_loss.item()}"
    torch.testing.assert_close(loss, eager_loss.detach(), rtol=1e-8, atol=0)
    gradients = {name: p.grad for name, p in deferred.named_parameters() if p.grad is not None}
    assert gradients.keys() == {name for name, p in eager.named_parameters() if p.grad is not None}
    for name, gradient in gradients.items():
        torch.testing.assert_close(
            gradient, eager.get_parameter(name).grad, rtol=1e-8, atol=1e-8 * gradient.abs().max().item(), msg=name
        )
    if hasattr(deferred, "prior_scale_tril"):  # the factor a method keeps (SVGP's fixed L_Z) must be the checked one
        with torch.no_grad():
            kept, checked = deferred.prior_scale_tril(), eager.prior_scale_tril()
        error = (kept - checked).abs().max().item()
        diagonals = [factor.diagonal(dim1=-2, dim2=-1)[..., :3].tolist() for factor in (kept, checked)]
        assert error <= 1e-8 * checked.abs().max().item(), (
            f"kept factor off by {error:.3g}: its diagonal starts {diagonals[0]}, the checked one's {diagonals[1]}"
        )
