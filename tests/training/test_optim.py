"""One optimizer step reads the host once; a failed factor reruns the step with the numbers of an eager step."""

import pytest
import torch

from gpstudy import generators as draws
from gpstudy.linalg import CholeskyError, cholesky
from gpstudy.runtime.host_sync import HostSyncCounter
from gpstudy.training.optim import adam, optimizer_step

DTYPE = torch.float64


def problem(singular_split: bool, draw: bool = True):
    """A batch of two 3x3 covariances from a parameter, split 1's indefinite (its Cholesky needs jitter) if
    asked, and an objective that draws noise from each split's generator (or, not ``draw``, takes ones:
    ``torch.compile`` traces no graph past a generator's draw)."""
    parameter = torch.nn.Parameter(torch.tensor([[1.0, 0.5, 0.2], [0.3, 0.1, 0.4]], dtype=DTYPE))
    generators = draws.new_generators([0, 1], torch.device("cpu"))

    def objective() -> torch.Tensor:
        noise = draws.randn((3,), generators, parameter) if draw else torch.ones(2, 3, dtype=DTYPE)
        base = torch.eye(3, dtype=DTYPE).expand(2, 3, 3).clone()
        if singular_split:
            base[1] = torch.ones(3, 3, dtype=DTYPE) - 1e-6 * torch.eye(3, dtype=DTYPE)  # rank one, slightly under
        factor = cholesky(base + 1e-9 * torch.diag_embed(parameter.square()))
        return factor.diagonal(dim1=-2, dim2=-1).log().sum(-1) + (parameter * noise).square().sum(-1)

    return parameter, generators, objective


def eager_step(singular_split: bool, draw: bool = True) -> tuple[torch.Tensor, torch.Tensor, list]:
    parameter, generators, objective = problem(singular_split, draw)
    optimizer = adam([parameter], 0.1, parameter.device)
    optimizer.zero_grad()
    loss = objective()
    loss.sum().backward()
    optimizer.step()
    return loss.detach(), parameter.detach().clone(), draws.get_state(generators)


def deferred_step(singular_split: bool) -> tuple[torch.Tensor, torch.Tensor, list, HostSyncCounter]:
    parameter, generators, objective = problem(singular_split)
    optimizer = adam([parameter], 0.1, parameter.device)
    with HostSyncCounter() as counter:
        loss = optimizer_step(optimizer, objective, generators)
    return loss.detach(), parameter.detach().clone(), draws.get_state(generators), counter


def test_a_step_reads_the_host_once_and_equals_an_eager_step():
    loss, parameter, state, counter = deferred_step(singular_split=False)
    assert [event.deliberate for event in counter.events] == [True], counter.summary()
    eager_loss, eager_parameter, eager_state = eager_step(singular_split=False)
    assert torch.equal(loss, eager_loss) and torch.equal(parameter, eager_parameter)
    assert all(torch.equal(a, b) for a, b in zip(state, eager_state))


def test_a_failed_factor_reruns_the_step_from_the_same_draws_with_the_eager_numbers():
    loss, parameter, state, counter = deferred_step(singular_split=True)
    eager_loss, eager_parameter, eager_state = eager_step(singular_split=True)
    assert torch.isfinite(loss).all()  # split 1 was saved by jitter, as eagerly
    assert torch.equal(loss, eager_loss) and torch.equal(parameter, eager_parameter)
    assert all(torch.equal(a, b) for a, b in zip(state, eager_state))  # the draws were made once, not twice
    assert counter.events[0].deliberate and len(counter.unexpected()) > 0  # the slow path reads as it retries


def lost_split_training(splits: list[int], steps: int = 3):
    """``steps`` deferred steps on ``splits`` of two splits, split 1 already lost (its parameters NaN, so its
    covariance too): the losses ``[steps, splits]``, the parameters, how often the objective ran, and the
    counter of the steps' host synchronisations."""
    parameter = torch.nn.Parameter(torch.tensor([[1.0, 0.5, 0.2], [torch.nan] * 3], dtype=DTYPE)[splits])
    generators = draws.new_generators(splits, torch.device("cpu"))
    calls = []

    def objective() -> torch.Tensor:
        calls.append(len(calls))
        noise = draws.randn((3,), generators, parameter)
        factor = cholesky(torch.eye(3, dtype=DTYPE) + parameter.unsqueeze(-1) * parameter.unsqueeze(-2))
        return factor.diagonal(dim1=-2, dim2=-1).log().sum(-1) + (parameter * noise).square().sum(-1)

    optimizer = adam([parameter], 0.1, parameter.device)
    with HostSyncCounter() as counter:
        losses = torch.stack([optimizer_step(optimizer, objective, generators).detach() for _ in range(steps)])
    return losses, parameter.detach(), len(calls), counter


def test_a_lost_split_makes_no_step_of_its_neighbour_run_twice():
    losses, parameter, calls, counter = lost_split_training([0, 1])
    assert calls == 3, "the objective ran again at a step: a lost split's factors counted as failures to retry"
    assert [event.deliberate for event in counter.events] == [True] * 6, counter.summary()  # two reads a step
    assert losses[:, 1].isnan().all() and parameter[1].isnan().all()  # lost it stays
    solo_losses, solo_parameter, solo_calls, _ = lost_split_training([0])  # the healthy split alone
    assert torch.equal(losses[:, :1], solo_losses) and torch.equal(parameter[:1], solo_parameter) and solo_calls == 3
    with pytest.raises(CholeskyError, match="non-finite"):  # every split lost: the checked rerun raises
        lost_split_training([1], steps=1)


def test_a_compiled_objective_takes_the_eager_path_through_the_deferred_checks():
    """``training.torch_compile``: the compiled objective records its factors' checks and, when one fails,
    reruns with the jitter an eager step takes (a compiled graph that skipped either would differ)."""
    torch._dynamo.reset()
    parameter, generators, objective = problem(singular_split=True, draw=False)
    compiled = torch.compile(objective)  # the deferred pass traced whole; the retry breaks at its checks
    loss = optimizer_step(adam([parameter], 0.1, parameter.device), compiled, generators)  # no dispatch mode: compiled
    eager_loss, eager_parameter, _ = eager_step(singular_split=True, draw=False)
    torch.testing.assert_close(loss.detach(), eager_loss, rtol=1e-8, atol=0)
    torch.testing.assert_close(parameter.detach(), eager_parameter, rtol=1e-8, atol=0)


def test_a_natural_update_is_computed_before_and_applied_after_the_optimizers_step():
    parameter, generators, objective = problem(singular_split=False)
    other = torch.nn.Parameter(torch.zeros(2, dtype=DTYPE))
    seen = []

    def natural_update():
        seen.append(parameter.detach().clone())  # before Adam moved it

        def apply() -> None:
            with torch.no_grad():
                other.add_(1.0)

        return apply

    optimizer_step(adam([parameter], 0.1, parameter.device), objective, generators, natural_update)
    assert not torch.equal(seen[0], parameter.detach())
    assert torch.equal(other.detach(), torch.ones(2, dtype=DTYPE))


def test_adam_is_fused_with_its_step_counts_on_the_device_and_not_capturable():
    """``capturable`` beside ``fused`` changes nothing but a warning at every step on a GPU."""
    parameter = torch.nn.Parameter(torch.ones(3, dtype=DTYPE))
    for device in ("cpu", "cuda"):  # the CUDA optimizer is only built here, never stepped
        group = adam([parameter], 0.1, torch.device(device)).param_groups[0]
        assert group["fused"] and not group["capturable"], device
    optimizer = adam([parameter], 0.1, parameter.device)
    parameter.grad = torch.ones_like(parameter)
    optimizer.step()
    assert optimizer.state[parameter]["step"].device == parameter.device
