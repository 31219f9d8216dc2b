"""TF32 on a CPU: a dispatch mode that makes every float32 matrix product take the operands a GPU's
tensor cores would, so what ``training.tf32`` does to ``dtype: mixed``'s float32 feature products can be
measured where no GPU is (``tests/diagnostics/test_tf32_emulation.py``, ``benchmarks/tf32.py``).

TF32 keeps float32's sign and 8-bit exponent and 10 of its 23 mantissa bits (a unit roundoff of 2^-11
against float32's 2^-24); cuBLAS rounds both operands of a float32 product to it and accumulates in
float32. :class:`EmulatedTF32` rounds both operands of each float32 ``mm``, ``bmm``, ``mv``, ``dot`` and
their ``add*`` forms to nearest, ties to even, and leaves the accumulated input, the accumulation and
every other dtype alone. ``matmul``, ``linear`` and ``einsum`` reach the dispatcher as these operators, and
so do the products of a backward pass run inside the mode."""

import contextlib
from pathlib import Path

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

from gpstudy.data import Split, get_dataset, read_table, split_of_table
from gpstudy.study import RunSettings, data_plan
from gpstudy.training.run import pretrain_splits, train_splits

aten = torch.ops.aten

MANTISSA_BITS = 10  # TF32's stored mantissa bits (float32: 23)
DROPPED_BITS = 23 - MANTISSA_BITS  # the low mantissa bits of a float32 that TF32 drops
# each matrix product of the dispatcher -> the positions of its two multiplied operands
PRODUCT_OPERANDS = {
    aten.mm: (0, 1),
    aten.bmm: (0, 1),
    aten.mv: (0, 1),
    aten.dot: (0, 1),
    aten.addmm: (1, 2),
    aten.baddbmm: (1, 2),
    aten.addbmm: (1, 2),
    aten.addmv: (1, 2),
    aten._addmm_activation: (1, 2),
}


def round_to_tf32(x: Tensor) -> Tensor:
    """The float32 tensor ``x`` rounded to TF32's 10-bit mantissa, to nearest with ties to even, on the
    bit pattern: the low 13 bits cleared after adding half of their place less one, plus the kept last
    bit (a carry into the exponent is the next power of two, or inf past TF32's largest number); inf and
    NaN as they are."""
    if x.dtype != torch.float32:
        raise TypeError(f"round_to_tf32 rounds float32 tensors, not {x.dtype}")
    bits = x.view(torch.int32)
    kept_last_bit = (bits >> DROPPED_BITS) & 1
    half_less_one = (1 << (DROPPED_BITS - 1)) - 1
    rounded = ((bits + half_less_one + kept_last_bit) & ~((1 << DROPPED_BITS) - 1)).view(torch.float32)
    return torch.where(torch.isfinite(x), rounded, x)


class EmulatedTF32(TorchDispatchMode):
    """While active (``with EmulatedTF32() as tf32:``), every float32 matrix product of PRODUCT_OPERANDS
    multiplies its operands rounded by :func:`round_to_tf32`; ``products`` counts the products rounded."""

    def __init__(self):
        super().__init__()
        self.products = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        positions = PRODUCT_OPERANDS.get(func.overloadpacket, ())
        if positions and all(args[i].dtype == torch.float32 for i in positions):
            args = tuple(round_to_tf32(arg) if i in positions else arg for i, arg in enumerate(args))
            self.products += 1
        return func(*args, **(kwargs or {}))


def study_split(config: dict, dataset: str, split: int, raw: Path) -> Split:
    """Split ``split`` of ``dataset`` as the study ``config`` makes it (``gpstudy.data.split_of_table`` with the
    data set's plan), from the raw files in the folder ``raw``."""
    plan, data = data_plan(config, dataset), get_dataset(dataset)
    return split_of_table(
        data,
        plan.protocol,
        split,
        read_table(data, plan.protocol, raw),
        raw=raw,
        seed=config["seed"],
        **plan.split_options(),
    )


def train_with_and_without_tf32(
    splits: dict[int, Split], settings: RunSettings, folder: Path
) -> tuple[dict[str, dict[int, dict]], int]:
    """``settings``' method trained on ``splits`` twice from the same start (hyperparameters pretrained once
    where the settings say so), as a run trains (``gpstudy.training.run.train_splits``, its files in
    ``folder``/float32 and ``folder``/tf32): with float32 products as the CPU makes them, and under
    :class:`EmulatedTF32`. Returns each way's metrics per split, and the products the emulation rounded."""
    hyperparameters = pretrain_splits(splits, settings) if settings.pretrain else None
    emulation, results = EmulatedTF32(), {}
    for way, mode in (("float32", contextlib.nullcontext()), ("tf32", emulation)):
        with mode:
            results[way] = train_splits(
                splits,
                settings,
                {s: folder / way / f"split{s}" for s in splits},
                folder / way / "checkpoint.pt",
                hyperparameters,
            )
    return results, emulation.products
