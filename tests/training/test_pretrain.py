"""Hyperparameter pretraining on the exact marginal likelihood, and the JSON round trip."""

import json
import logging
import signal

import pytest
import torch

from gpstudy import numerics
from gpstudy.kernels import KERNELS, RBF, build_kernel
from gpstudy.likelihoods import GaussianLikelihood
from gpstudy.methods.exact_gp import log_marginal_likelihood
from gpstudy.runtime.host_sync import HostSyncCounter
from gpstudy.training.pretrain import (
    hyperparameters_to_dict,
    load_hyperparameters,
    pretrain_hyperparameters,
    readable_hyperparameters,
    stack_hyperparameters,
    unstack_hyperparameters,
)
from gpstudy.training.stopping import RERUN_STATUS, Stopped

DTYPE = numerics.DEFAULT_DTYPE
TRUE_LENGTHSCALE, TRUE_NOISE = 0.4, 0.01


def draw_from_a_known_gp(n: int = 120) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = 6 * torch.rand(n, 1, generator=generator, dtype=DTYPE) - 3
    with torch.no_grad():
        cov = RBF(1, lengthscale=TRUE_LENGTHSCALE)(x) + TRUE_NOISE * torch.eye(n, dtype=DTYPE)
    return x, torch.linalg.cholesky(cov) @ torch.randn(n, generator=generator, dtype=DTYPE)


def test_pretraining_raises_the_marginal_likelihood_and_finds_the_lengthscale():
    x, y = draw_from_a_known_gp()
    kernel, likelihood = RBF(1), GaussianLikelihood(0.1)
    with torch.no_grad():
        initial = log_marginal_likelihood(x, y, kernel, likelihood)
    generator = torch.Generator().manual_seed(1)
    pretrain_hyperparameters(x, y, kernel, likelihood, subset_size=60, iterations=200, lr=0.05, generators=generator)
    with torch.no_grad():
        final = log_marginal_likelihood(x, y, kernel, likelihood)
    assert final > initial + 10
    assert abs(kernel.lengthscale.item() - TRUE_LENGTHSCALE) < 0.5 * abs(1.0 - TRUE_LENGTHSCALE)
    assert likelihood.noise_variance < 0.05


def test_pretraining_is_reproducible_from_the_generator():
    x, y = draw_from_a_known_gp()
    results = []
    for seed in (1, 1, 2):
        kernel, likelihood = RBF(1), GaussianLikelihood(0.1)
        generator = torch.Generator().manual_seed(seed)
        pretrain_hyperparameters(x, y, kernel, likelihood, subset_size=30, iterations=5, lr=0.05, generators=generator)
        results.append(hyperparameters_to_dict(kernel, likelihood))
    assert results[0] == results[1] and results[0] != results[2]


def test_hyperparameters_round_trip_through_json():
    kernel, likelihood = RBF(2, lengthscale=[0.3, 4.0], variance=2.5), GaussianLikelihood(0.02)
    saved = json.loads(json.dumps(hyperparameters_to_dict(kernel, likelihood)))
    assert saved == {
        "kernel": {
            "raw_lengthscale": saved["kernel"]["raw_lengthscale"],
            "raw_variance": saved["kernel"]["raw_variance"],
        },
        "likelihood": {"raw_noise_variance": saved["likelihood"]["raw_noise_variance"]},
    }  # state dicts
    restored_kernel, restored_likelihood = RBF(2), GaussianLikelihood()
    load_hyperparameters(restored_kernel, restored_likelihood, saved)
    torch.testing.assert_close(restored_kernel.lengthscale, kernel.lengthscale, rtol=1e-12, atol=0)
    torch.testing.assert_close(restored_kernel.variance, kernel.variance, rtol=1e-12, atol=0)
    torch.testing.assert_close(restored_likelihood.noise_variance, likelihood.noise_variance, rtol=1e-12, atol=0)
    readable = readable_hyperparameters(kernel, likelihood)
    assert readable["lengthscale"] == pytest.approx([0.3, 4.0]) and set(readable) == {
        "lengthscale",
        "variance",
        "noise_variance",
    }
    assert (readable["variance"], readable["noise_variance"]) == pytest.approx((2.5, 0.02))


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_every_kernel_round_trips_as_a_batch(name):
    """Each kernel owns its hyperparameters: a batch's state splits into per-split dicts and back."""
    kernels = [build_kernel(name, 2, {}, DTYPE, (2,)) for _ in range(2)]
    likelihoods = [GaussianLikelihood(0.1, batch_shape=(2,)) for _ in range(2)]
    with torch.no_grad():
        for parameter in kernels[0].parameters():
            parameter.add_(torch.arange(parameter.numel(), dtype=DTYPE).reshape(parameter.shape) / 10)
    per_split = unstack_hyperparameters(hyperparameters_to_dict(kernels[0], likelihoods[0]))
    assert len(per_split) == 2
    load_hyperparameters(kernels[1], likelihoods[1], stack_hyperparameters(per_split))
    for restored, original in zip(kernels[1].state_dict().values(), kernels[0].state_dict().values()):
        torch.testing.assert_close(restored, original, rtol=0, atol=0)


def test_a_pretraining_iteration_synchronises_with_the_host_once():
    x, y = draw_from_a_known_gp(40)
    kernel, likelihood = RBF(1), GaussianLikelihood(0.1)
    run = dict(subset_size=30, lr=0.01, generators=torch.Generator().manual_seed(0))
    pretrain_hyperparameters(x, y, kernel, likelihood, iterations=2, **run)  # warm-up
    with HostSyncCounter() as counter:
        pretrain_hyperparameters(x, y, kernel, likelihood, iterations=5, **run)
    assert counter.unexpected() == [] and len(counter.events) == 5, counter.summary()


def test_pretraining_without_a_checkpoint_stops_at_its_step_on_a_signal_and_restores_the_handlers(
    pretraining_steps, recorded_signals
):
    steps = pretraining_steps(sigterm_at=3)
    x = torch.linspace(-1, 1, 20, dtype=DTYPE)[:, None]
    with pytest.raises(Stopped, match="^pretraining stopped at iteration 3 on SIGTERM, no checkpoint$") as stopped:
        pretrain_hyperparameters(
            x,
            torch.sin(3 * x[:, 0]),
            RBF(1),
            GaussianLikelihood(0.1),
            subset_size=10,
            iterations=50,
            lr=0.01,
            generators=torch.Generator().manual_seed(0),
        )
    assert stopped.value.code == RERUN_STATUS and len(steps) == 3
    assert recorded_signals == []
    signal.raise_signal(signal.SIGTERM)
    assert recorded_signals == [signal.SIGTERM]  # the handler of before is back


def test_a_signalled_pretraining_checkpoints_and_resumes_to_an_uninterrupted_runs_numbers(
    tmp_path, caplog, pretraining_steps, recorded_signals
):
    """The checkpoint holds all that later steps read (parameters, Adam's moments and step counts, each
    split's subset) and the generators: a batch of two splits resumed after step 5 ends bit for bit as
    uninterrupted."""
    x, y = draw_from_a_known_gp(40)
    x, y = torch.stack([x, -x]), torch.stack([y, y.flip(0)])
    checkpoint = tmp_path / "c.pt"
    caplog.set_level(logging.INFO, logger="gpstudy")

    def pretrain(saved_to):
        kernel, likelihood = build_kernel("rbf", 1, {}, DTYPE, (2,)), GaussianLikelihood(0.1, batch_shape=(2,))
        generators = [torch.Generator().manual_seed(seed) for seed in (0, 1)]
        objective = pretrain_hyperparameters(
            x,
            y,
            kernel,
            likelihood,
            subset_size=30,
            iterations=12,
            lr=0.05,
            generators=generators,
            checkpoint=saved_to,
            fingerprint="run",
        )
        return hyperparameters_to_dict(kernel, likelihood), objective.tolist(), [g.get_state() for g in generators]

    uninterrupted = pretrain(None)
    steps = pretraining_steps(sigterm_at=5)
    with pytest.raises(Stopped, match="^checkpointed at iteration 5 on SIGTERM$") as stopped:
        pretrain(checkpoint)
    assert stopped.value.code == RERUN_STATUS and len(steps) == 5 and recorded_signals == []
    assert "checkpointed at iteration 5 on SIGTERM; exit status 75: rerun to resume" in caplog.messages
    assert torch.load(checkpoint, weights_only=True)["step"] == 5

    steps = pretraining_steps()
    hyperparameters, objective, generators = pretrain(checkpoint)
    assert f"resumed from {checkpoint} at iteration 6" in caplog.messages and len(steps) == 7
    assert (hyperparameters, objective) == uninterrupted[:2]  # bit for bit: the same steps on the same device
    assert all(torch.equal(state, expected) for state, expected in zip(generators, uninterrupted[2]))
