"""Every method and config variant trains with at most one host synchronisation per iteration (counted on
the CPU, each event named by file and line), and takes training steps on the ``meta`` device, the CPU-side
stand-in for CUDA that has no values and refuses to mix with CPU tensors."""

import pytest

from gpstudy.diagnostics.probes import PROBES, build_probe
from gpstudy.methods import METHODS
from gpstudy.runtime.host_sync import HostSyncCounter

WARM_UP, COUNTED = 3, 3  # iterations before counting (caches fill), iterations counted
SYNCS_PER_ITERATION = (
    1  # the budget: the deliberate check of the step's factors (gpstudy.training.optim.optimizer_step)
)


def test_every_method_and_variant_has_a_probe(study_config):
    probed = {probe.method for probe in PROBES.values()}
    assert set(METHODS) | set(study_config["variants"]) <= probed


@pytest.mark.parametrize("name", sorted(PROBES))
def test_an_iteration_synchronises_with_the_host_at_most_once(name, study_config):
    run = build_probe(name, study_config, "cpu")
    run.train(range(1, WARM_UP + 1))
    with HostSyncCounter() as counter:
        run.train(range(WARM_UP + 1, WARM_UP + COUNTED + 1))
    assert counter.unexpected() == [], f"{name}: synchronisations besides the deliberate one:\n{counter.summary()}"
    assert len(counter.events) <= SYNCS_PER_ITERATION * COUNTED, counter.summary()


@pytest.mark.parametrize("name", sorted(PROBES))
def test_three_training_steps_run_on_the_meta_device(name, study_config):
    run = build_probe(name, study_config, "meta")
    loss = run.train(range(1, 4))
    assert loss.device.type == "meta" and loss.shape == (PROBES[name].splits,)
    assert all(tensor.device.type == "meta" for tensor in [*run.method.parameters(), *run.method.buffers()])
