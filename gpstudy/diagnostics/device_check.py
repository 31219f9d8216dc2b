"""Checks of the GPU path that only a GPU can answer: what ``benchmarks/gpu_check.py`` reports and
``tests/diagnostics/test_device_check.py`` asserts on CUDA.

On CUDA, every probe (``gpstudy.diagnostics.probes``) trains under ``torch.cuda.set_sync_debug_mode("error")``
after its warm-up, so that any host synchronisation other than the step's deliberate one
(``gpstudy.runtime.host_sync.deliberate``) raises; its peak device memory is read; and a batched Cholesky
factor is timed under cuSOLVER and MAGMA and by ``gpstudy.linalg.blocked`` (products around the library's small
factors: whether that pays on a GPU only a GPU can say), which must all agree; and RFE's product Phi L with
L stored in 1, 4 and 8 column blocks (the same FLOPs in products of other widths: which is fastest,
likewise). On the CPU the same functions run (what a machine without a GPU can check: synchronisations
counted by dispatch, LAPACK's factor and the blocked one), and report the CUDA-only parts as not applicable.
"""

import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor

from gpstudy import generators as draws
from gpstudy.diagnostics.probes import build_probe
from gpstudy.linalg import raw_of_scale_tril
from gpstudy.linalg.blocked import blocked_cholesky_ex
from gpstudy.nets.block_tril import BlockTril
from gpstudy.runtime.devices import synchronize
from gpstudy.runtime.host_sync import HostSyncCounter, in_package, place

CUDA_LIBRARIES = ("cusolver", "magma")  # torch.backends.cuda.preferred_linalg_library's choices compared
CPU_LIBRARY = "lapack"  # the only linear-algebra library of the CPU
AGREEMENT = 1e-10  # relative residual and difference of factors below which two Cholesky factors agree (float64)


def reset_peak_memory(device: torch.device) -> None:
    """Start a new peak of allocated device memory (CUDA; nothing on other devices)."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device: torch.device) -> int | None:
    """Bytes of device memory allocated at the peak since :func:`reset_peak_memory`; None off CUDA."""
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None


@contextmanager
def cuda_syncs_raise(device: torch.device) -> Iterator[None]:
    """Inside the block a synchronising CUDA operation raises (``set_sync_debug_mode("error")``), except
    inside ``host_sync.deliberate``; on other devices the block runs unchanged."""
    if device.type != "cuda":
        yield
        return
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)


def matmul_rate(device: torch.device, dtype: torch.dtype, repeats: int = 5) -> float:
    """GFLOP/s of a [1000, 2000] x [2000, 2000] ``torch.mm`` in ``dtype`` (the shape of the RFE products)."""
    a, b = (
        draws.randn(shape, draws.new_generators([0], device)[0], torch.empty(0, dtype=dtype, device=device))
        for shape in ((1000, 2000), (2000, 2000))
    )
    a @ b
    synchronize(device)
    tic = time.perf_counter()
    for _ in range(repeats):
        a @ b
    synchronize(device)
    return 2 * 1000 * 2000 * 2000 * repeats / (time.perf_counter() - tic) / 1e9


def origin(error: BaseException) -> str:
    """file:line of the innermost frame of the gpstudy package in ``error``'s traceback ("" if none)."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if in_package(frame)]
    return place(frames[-1]) if frames else ""


def describe(error: BaseException) -> str:
    """``Type: message`` of an error, on one line."""
    return f"{type(error).__name__}: {' '.join(str(error).split())}"


@dataclass(frozen=True)
class ProbeCheck:
    """A probe trained on a device: its error if any, the synchronisations counted while checked, its peak."""

    name: str
    error: str | None  # None: trained, and on CUDA no synchronising operation raised
    where: str  # the gpstudy file:line the error came from
    deliberate: float  # deliberate synchronisations counted per checked iteration (at most 1)
    unexpected: tuple[str, ...]  # "count x file:line reason" of every other synchronisation counted
    peak_bytes: int | None  # CUDA memory allocated at the peak (build and training); None off CUDA

    @property
    def passed(self) -> bool:
        return self.error is None and not self.unexpected and self.deliberate <= 1


def check_probe(name: str, config: dict, device: torch.device, warmup: int, steps: int) -> ProbeCheck:
    """Build probe ``name`` on ``device``, train ``warmup`` iterations, then ``steps`` more counting host
    synchronisations (:class:`gpstudy.runtime.host_sync.HostSyncCounter`) and, on CUDA, with synchronising operations
    raising.
    An error of the probe is recorded in the result, not raised."""
    reset_peak_memory(device)
    counter, error, where = HostSyncCounter(), None, ""
    try:
        run = build_probe(name, config, device)
        run.train(range(1, warmup + 1))
        with cuda_syncs_raise(device), counter:
            run.train(range(warmup + 1, warmup + steps + 1))
        synchronize(device)
    except Exception as caught:  # any failure of one probe is its result
        error, where = describe(caught), origin(caught)
    unexpected = counter.unexpected()
    places = sorted({(event.where, event.reason) for event in unexpected})
    counts = tuple(
        f"{sum(1 for event in unexpected if (event.where, event.reason) == place)} x {place[0]} {place[1]}"
        for place in places
    )
    deliberate = sum(event.deliberate for event in counter.events) / steps
    return ProbeCheck(name, error, where, deliberate, counts, peak_memory(device))


@dataclass(frozen=True)
class CholeskyTiming:
    """A batched Cholesky factor under one linear-algebra library, or by blocks (:func:`blocked_form`)."""

    library: str
    seconds: float | None  # per factorization of the whole batch
    residual: float | None  # max over the batch of |L L^T v - A v| / |A v| for a random v
    difference: float | None  # max |L - L_0| / max |L_0| against the first library's factor L_0
    error: str | None


def spd_batch(batch: int, size: int, device: torch.device) -> Tensor:
    """``[batch, size, size]`` float64 symmetric positive-definite matrices B B^T / size + I."""
    like = torch.empty(0, dtype=torch.float64, device=device)
    factors = draws.randn((size, size), draws.new_generators(range(batch), device), like)
    return factors @ factors.mT / size + torch.eye(size, dtype=torch.float64, device=device)


def blocked_form(library: str) -> str:
    """The name of ``gpstudy.linalg.blocked``'s Cholesky factor, its leaves by ``library``, in a timing's row."""
    return f"blocked ({library} leaves)"


def cholesky_libraries(device: torch.device, batch: int, size: int, repeats: int) -> list[CholeskyTiming]:
    """Time ``torch.linalg.cholesky_ex`` of :func:`spd_batch` under each of :data:`CUDA_LIBRARIES` (on the
    CPU: LAPACK alone), then ``gpstudy.linalg.blocked.blocked_cholesky_ex`` with its leaves by the first (the
    study's cuSOLVER, ``gpstudy.runtime.flags.set_linalg_library``), and compare the factors. The preferred
    library is restored afterwards."""
    matrices = spd_batch(batch, size, device)
    vector = draws.randn((size, 1), draws.new_generators([1], device)[0], matrices)
    target = matrices @ vector
    libraries = CUDA_LIBRARIES if device.type == "cuda" else (CPU_LIBRARY,)
    forms = [(library, library, torch.linalg.cholesky_ex) for library in libraries]
    forms.append((blocked_form(libraries[0]), libraries[0], blocked_cholesky_ex))
    previous = torch.backends.cuda.preferred_linalg_library()
    rows, first = [], None
    try:
        for name, library, factorize in forms:
            try:
                if device.type == "cuda":
                    torch.backends.cuda.preferred_linalg_library(library)
                factor, info = factorize(matrices)  # warm-up: workspace, kernels
                synchronize(device)
                tic = time.perf_counter()
                for _ in range(repeats):
                    factor, info = factorize(matrices)
                synchronize(device)
                seconds = (time.perf_counter() - tic) / repeats
                if info.any():
                    raise RuntimeError(f"factorization failed for matrices {info.nonzero().flatten().tolist()}")
                residual = (
                    ((factor @ (factor.mT @ vector) - target).norm(dim=(-2, -1)) / target.norm(dim=(-2, -1)))
                    .max()
                    .item()
                )
                first = factor if first is None else first
                difference = ((factor - first).abs().max() / first.abs().max()).item()
                rows.append(CholeskyTiming(name, seconds, residual, difference, None))
            except Exception as caught:  # a library missing from the build is a result
                rows.append(CholeskyTiming(name, None, None, None, describe(caught)))
    finally:
        torch.backends.cuda.preferred_linalg_library(previous)
    return rows


@dataclass(frozen=True)
class BlockTrilTiming:
    """RFE's products Phi L and Phi m, forward and backward, with L stored in ``blocks`` column blocks."""

    blocks: int
    seconds: float  # per forward and backward pass of the whole batch
    difference: float  # max |Phi L - (Phi L)_first| / max |(Phi L)_first|, against the first block count's


def block_tril_products(
    device: torch.device, batch: int, rows: int, size: int, blocks: tuple[int, ...], repeats: int
) -> list[BlockTrilTiming]:
    """Time ``BlockTril.vector_and_left_multiply`` (RFE's Phi m and Phi L) and its backward at Phi ``[batch,
    rows, size]`` float64 for one random lower-triangular L stored in each number of column ``blocks``. A
    diagonal block of at least ``block_tril.DENSE_BELOW`` columns is multiplied by halves, so 1, 4 and 8
    blocks of 2000 columns all do 9/16 of a dense product's FLOPs, in products of different widths (1000-250,
    500-250, 250): which is fastest only a GPU can say (the estimate counts one rate)."""
    like = torch.empty(0, dtype=torch.float64, device=device)
    generators = draws.new_generators(range(batch), device)
    dense = draws.randn((size, size), generators, like).tril(-1) / size**0.5 + 2 * torch.eye(
        size, dtype=like.dtype, device=device
    )
    phi = draws.randn((rows, size), generators, like).requires_grad_()
    vector, upstream = draws.randn((size,), generators, like), draws.randn((rows, size), generators, like)
    timings, first = [], None
    for count in blocks:
        factor = BlockTril(size, 1.0, like, (batch,), count)
        with torch.no_grad():
            for j, (start, stop) in enumerate(zip(factor.edges[:-1], factor.edges[1:])):
                factor.raw_diagonal_blocks[j].copy_(raw_of_scale_tril(dense[..., start:stop, start:stop]))
                if j < len(factor.below_blocks):
                    factor.below_blocks[j].copy_(dense[..., stop:, start:stop])

        def step() -> Tensor:
            phi.grad = None
            factor.zero_grad(set_to_none=True)
            mean, product = factor.vector_and_left_multiply(phi, vector)
            (mean.sum() + (product * upstream).sum()).backward()
            return product.detach()

        product = step()  # warm-up: allocations, kernels
        synchronize(device)
        tic = time.perf_counter()
        for _ in range(repeats):
            step()
        synchronize(device)
        seconds = (time.perf_counter() - tic) / repeats
        first = product if first is None else first
        timings.append(
            BlockTrilTiming(len(factor.edges) - 1, seconds, ((product - first).abs().max() / first.abs().max()).item())
        )
    return timings


def environment(device: torch.device, repeats: int = 5) -> list[tuple[str, str]]:
    """What the checks ran on: versions, devices and their compute capability, matrix-product rates
    (``repeats`` products timed per dtype)."""
    from torch.utils import collect_env  # reads nvidia-smi for the driver's version

    facts = [("torch", torch.__version__), ("device", str(device))]
    if device.type == "cuda":
        facts += [
            ("CUDA (torch built with)", str(torch.version.cuda)),
            ("cuDNN", str(torch.backends.cudnn.version())),
            ("driver", collect_env.get_nvidia_driver_version(collect_env.run) or "unknown (no nvidia-smi)"),
            ("MAGMA in this build", str(torch.cuda.has_magma)),
        ]
        for index in range(torch.cuda.device_count()):
            properties = torch.cuda.get_device_properties(index)
            facts.append(
                (
                    f"cuda:{index}",
                    f"{properties.name}, compute capability {properties.major}."
                    f"{properties.minor}, {properties.total_memory / 2**30:.1f} GiB",
                )
            )
    else:
        facts.append(("threads", str(torch.get_num_threads())))
    for dtype in (torch.float64, torch.float32):
        facts.append(
            (
                f"torch.mm {str(dtype).removeprefix('torch.')} [1000, 2000] x [2000, 2000]",
                f"{matmul_rate(device, dtype, repeats):.1f} GFLOP/s",
            )
        )
    return facts


def block_counts_agree(rows: list[BlockTrilTiming]) -> bool:
    """Every block count's Phi L equals the first's to ``AGREEMENT``."""
    return all(row.difference < AGREEMENT for row in rows)


def libraries_agree(rows: list[CholeskyTiming]) -> bool:
    """Every library and the blocked form factored the batch, each factor solves its matrices and matches
    the first one's."""
    return all(row.error is None and row.residual < AGREEMENT and row.difference < AGREEMENT for row in rows)
