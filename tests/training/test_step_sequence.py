"""A training step dispatches the same aten operators from one step to the next: the same names, the same
non-tensor arguments and the same tensor shapes and dtypes, so that a CUDA graph captured at one step would replay
the next ones (a Python number new at each step, e.g. beta_t as a float, would be baked into the graph).

The step counted is ``optimizer_step``'s: the loss, its gradient, the host check, Adam's step and a natural
update, from a minibatch already taken (the sampler's slice and its epoch's permutation are the graph's input,
copied in before a replay). Each method the UCI study trains, at sizes where GPNet's tempered prior takes its
Gram form (``gpstudy.linalg.products.HALVES_FROM``)."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from gpstudy import generators as draws
from gpstudy.diagnostics.probes import build_probe
from gpstudy.linalg.products import HALVES_FROM
from gpstudy.training.optim import optimizer_step

SCALARS = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format)


class Sequence(TorchDispatchMode):
    """The aten operators dispatched: name, and arguments with each tensor as its shape and dtype."""

    def __init__(self):
        super().__init__()
        self.operators = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace == "aten":  # not the profiler's markers

            def describe(value):
                if isinstance(value, torch.Tensor):
                    return ("tensor", tuple(value.shape), value.dtype)
                return value if isinstance(value, SCALARS) else type(value).__name__

            self.operators.append((str(func), tree_map(describe, args), tree_map(describe, kwargs)))
        return func(*args, **kwargs)


def step_sequences(name: str, study_config: dict, steps: int = 3) -> list[list]:
    """The operator sequence of each of ``steps`` training steps of probe ``name`` after a warm-up step, with a
    minibatch and measurement set large enough for GPNet's Gram form of the tempered prior."""
    run = build_probe(name, study_config, "cpu")
    run.sampler.batch_size = min(run.sampler.n, HALVES_FROM)  # the batch [X_B; X_M] from HALVES_FROM points
    sequences = []
    for step in range(1, steps + 2):
        rows = run.sampler.next()
        x_batch, y_batch = draws.take_rows(run.x_train, rows), draws.take_rows(run.y_train, rows)
        with Sequence() as sequence:
            optimizer_step(
                run.optimizer,
                lambda: run.method.loss(x_batch, y_batch, step, run.generators),
                run.generators,
                run.method.natural_update,
            )
        sequences.append(sequence.operators)
    return sequences[1:]  # after the warm-up: Adam's state made


@pytest.mark.parametrize(
    "name", ["svgp", "gpnet", "gpnet_online_noisy", "fbnn", "fbnn_online_batch", "orth", "orthnat"]
)
def test_a_training_step_dispatches_the_same_operators_as_the_step_before(name, study_config, monkeypatch):
    monkeypatch.setattr("gpstudy.diagnostics.probes.N", 2 * HALVES_FROM)
    first, *later = step_sequences(name, study_config)
    for step, sequence in enumerate(later, start=3):
        differences = [(i, a, b) for i, (a, b) in enumerate(zip(first, sequence)) if a != b]
        assert len(sequence) == len(first) and not differences, f"{name}, step {step}: {differences[:3]}"
