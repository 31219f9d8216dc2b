"""The synchronisation counter sees every kind of host synchronisation, names its place, and marks the deliberate one."""

import numpy as np
import pytest
import torch

from gpstudy.host_sync import HostSyncCounter, deliberate

X = torch.arange(6, dtype=torch.float64).reshape(2, 3) - 2.0


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
}


@pytest.mark.parametrize("name", sorted(SYNCHRONISING))
def test_each_kind_of_synchronisation_is_counted_once_with_its_place(name):
    with HostSyncCounter() as counter:
        SYNCHRONISING[name]()
    assert len(counter.events) == 1, counter.summary()
    assert counter.events[0].where.startswith("test_host_sync.py:")
    assert counter.unexpected() == counter.events


def test_device_work_without_a_host_read_is_not_counted():
    with HostSyncCounter() as counter:
        factor, info = torch.linalg.cholesky_ex(X @ X.mT + torch.eye(2, dtype=X.dtype))
        (torch.where(info.unsqueeze(-1) == 0, factor, torch.nan) * 2.0 + 1).exp().sum()
    assert counter.events == [], counter.summary()


def test_a_deliberate_synchronisation_is_counted_apart():
    with HostSyncCounter() as counter:
        with deliberate():
            X.sum().item()
        X.max().item()
    assert [event.deliberate for event in counter.events] == [True, False]
    assert len(counter.unexpected()) == 1
