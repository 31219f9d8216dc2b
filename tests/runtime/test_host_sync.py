"""The synchronisation counter sees every kind of host synchronisation, names its place, and marks the deliberate
one."""

import numpy as np
import pytest
import torch

from gpstudy.runtime.host_sync import HostSyncCounter, deliberate

X = torch.arange(6, dtype=torch.float64).reshape(2, 3) - 2.0
SPD = X @ X.mT + torch.eye(2, dtype=X.dtype)  # symmetric positive definite


def branch(tensor: torch.Tensor) -> int:
    if tensor.sum() > 0:  # a Python branch on a tensor
        return 1
    return 0


SYNCHRONISING = {  # name -> code that makes a GPU wait for the host
    "item": lambda: X.sum().item(),
    "float": lambda: float(X.sum()),
    "bool": lambda: bool(X.sum() > 0),
    "if": lambda: branch(X),
    "equal": lambda: torch.equal(X, X),
    "python number to tensor": lambda: torch.as_tensor(1e-6, dtype=X.dtype, device=X.device),
    "numpy to tensor": lambda: torch.as_tensor(np.ones(3), device=X.device),
    "boolean mask": lambda: X[X > 0],
    "nonzero": lambda: X.nonzero(),
    "masked_select": lambda: X.masked_select(X > 0),
    "unique_consecutive": lambda: X.unique_consecutive(),
    "bincount": lambda: torch.bincount(torch.ones(3, dtype=torch.long)),
    "histc without a range": lambda: torch.histc(X, bins=4),
    "multinomial without replacement": lambda: torch.multinomial(X.exp(), 2),
    "linalg.cholesky": lambda: torch.linalg.cholesky(SPD),
    "linalg.cholesky_ex checking its errors": lambda: torch.linalg.cholesky_ex(SPD, check_errors=True),
    "linalg.inv": lambda: torch.linalg.inv(SPD),
    "linalg.solve": lambda: torch.linalg.solve(SPD, X),
    "linalg.eigh": lambda: torch.linalg.eigh(SPD),
    "linalg.eigvalsh": lambda: torch.linalg.eigvalsh(SPD),
    "linalg.eig": lambda: torch.linalg.eig(SPD),
    "linalg.svd": lambda: torch.linalg.svd(X),
    "linalg.matrix_exp": lambda: torch.linalg.matrix_exp(SPD),
}
NOT_SYNCHRONISING = {  # name -> code that queues device work only (on CUDA as on the CPU)
    "linalg.cholesky_ex": lambda: torch.linalg.cholesky_ex(SPD),
    "linalg.inv_ex": lambda: torch.linalg.inv_ex(SPD),
    "linalg.solve_ex": lambda: torch.linalg.solve_ex(SPD, X),
    "linalg.solve_triangular": lambda: torch.linalg.solve_triangular(SPD.tril(), X, upper=False),
    "cholesky_solve": lambda: torch.cholesky_solve(X, SPD.tril()),
    "cholesky_inverse": lambda: torch.cholesky_inverse(SPD.tril()),
    "linalg.slogdet": lambda: torch.linalg.slogdet(SPD),
    "histc over a given range": lambda: torch.histc(X, bins=4, min=-2.0, max=3.0),
    "multinomial with replacement": lambda: torch.multinomial(X.exp(), 2, replacement=True),
    "where": lambda: torch.where(X > 0, X, 0.0),
}


@pytest.mark.parametrize("name", sorted(SYNCHRONISING))
def test_each_kind_of_synchronisation_is_counted_once_with_its_place(name):
    with HostSyncCounter() as counter:
        SYNCHRONISING[name]()
    assert len(counter.events) == 1, counter.summary()
    assert counter.events[0].where.startswith("test_host_sync.py:")
    assert counter.unexpected() == counter.events


@pytest.mark.parametrize("name", sorted(NOT_SYNCHRONISING))
def test_device_work_without_a_host_read_is_not_counted(name):
    with HostSyncCounter() as counter:
        NOT_SYNCHRONISING[name]()
    assert counter.events == [], counter.summary()


def test_a_deliberate_synchronisation_is_counted_apart():
    with HostSyncCounter() as counter:
        with deliberate():
            X.sum().item()
        X.max().item()
    assert [event.deliberate for event in counter.events] == [True, False]
    assert len(counter.unexpected()) == 1


def test_linear_algebra_is_counted_on_the_meta_device_too():
    """On ``meta`` linalg's error check returns without reading (there are no values), so the probes'
    steps on ``meta`` would not notice one: the counter does."""
    matrix = SPD.to("meta")
    for solve in (torch.linalg.cholesky, torch.linalg.inv, lambda a: torch.linalg.solve(a, a), torch.linalg.eigh):
        with HostSyncCounter() as counter:
            solve(matrix)
        assert len(counter.events) == 1, counter.summary()


def test_a_synchronisation_is_placed_at_the_innermost_frame_of_the_package_in_any_wing():
    """A sync made by code outside the package that a package function calls (here a kernel that reads a
    value, called by ``linalg.kernel_scale_tril``) is placed at the package's frame, in linalg/: the package
    is gpstudy's whole folder, not host_sync's own (runtime/), which would place it in this test."""
    from gpstudy.linalg import kernel_scale_tril

    def reading_kernel(inputs: torch.Tensor) -> torch.Tensor:
        inputs.sum().item()
        return SPD

    with HostSyncCounter() as counter:
        kernel_scale_tril(reading_kernel, X)
    places = [event.where.split(":")[0] for event in counter.events]  # the kernel's read, then the factor's check
    assert places == ["factor.py", "factor.py"], counter.summary()
