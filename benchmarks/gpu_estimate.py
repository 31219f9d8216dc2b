"""An estimate of the UCI study's training time on one GPU, from what one iteration costs, counted without one.

Each training step of ``experiments.uci`` and ``experiments.odvgp`` (:data:`EXPERIMENTS`) is counted: every
(method, M), once per set of options its data sets train it with (:func:`variants`: config.yaml's
``dataset_options``, e.g. GPNet's and FBNN's online hyperparameters on Energy, Power and Wine and their noisy
measurement set on Boston, Concrete, Kin8nm and Protein), built at the study's sizes (20 splits as one batch,
batch 500, RFE with 1000 hidden units, float64, D = 8) on synthetic data, moved to the ``meta`` device
(shapes and dtypes, no values), and one training iteration is run there under :class:`CostCount`, which
sorts every aten operator dispatched into one kind and counts what each call costs:

- **product**: an operator with a formula in ``torch.utils.flop_counter`` (mm, bmm, addmm, baddbmm):
  its FLOPs, unless one of its three sizes (rows, columns, inner) is 1: a matrix-vector product, an outer
  product or a dot, which does 2 FLOPs per element it reads or writes (GEMV, GER), memory-bound below
  (``mv`` has no formula there and is memory-bound anyway);
- **factorization** by kind, with ``benchmarks/speed.py``'s formulas: ``potrf`` (``linalg.cholesky_ex``,
  n^3/3), ``trsm`` (``linalg.solve_triangular``, n^2 k), ``potrs`` (``cholesky_solve`` with k right-hand
  sides, 2 n^2 k), ``inverse`` (``cholesky_inverse``, 2 n^3: CUDA solves the identity);
- **memory-bound**: every other operator that runs a kernel, with the bytes a CUDA kernel would read
  and write: each tensor argument it reads, at the number of distinct elements its strides reach (an
  expanded, stride-0 dimension is read once, broadcasting from cache), plus each tensor it writes (a
  fresh output, or an argument written in place; ``copy_``, ``fill_``, ``zero_``, the random fills and
  a product's ``baddbmm_`` with beta 0 write without reading theirs), at element size x elements.
  Gathers (``index``, ``index_select``, ``gather``) read as many elements of their source as they write,
  not the whole source;
- **view** (the schema returns an alias: ``view``, ``expand``, ``transpose``, ``detach``, ...) and
  **allocation** (``empty``, ``empty_like``, ...): no kernel and no bytes, host time only;
- **adam**: the optimizer's step is counted as PyTorch's fused CUDA Adam (``gpstudy.training.optim.adam``: fused
  on CUDA) instead of the per-tensor operators it runs on ``meta``: per parameter group and dtype one
  ``_foreach_add_`` of the step counts and one ``_fused_adam_`` that reads parameter, gradient and both
  moments and writes parameter and moments (7 x the parameters' bytes).

Host synchronisations are counted on the CPU (``gpstudy.runtime.host_sync``) at a small size (they do not depend
on it). The model, whose rates (:class:`Rates`) are arguments:

    GPU time  = sum over calls of max(the call's work at its kind's rate, the call's least time)
                (products: FLOPs / product rate; memory-bound: bytes / bandwidth; both at least a kernel's
                least time; factorizations and triangular solves: FLOPs / that kind's rate, at least the
                latency of one such call, whatever its size)
    host time = memory-bound kernels (adam's too) x seconds per launch + products and trsm x seconds per
                cuBLAS call + potrf, potrs, inverse x seconds per cuSOLVER call + (views + allocations) x
                seconds per view
    iteration = max(GPU, host) + syncs x sync latency   with at most one sync: the host runs ahead
              = GPU + host + syncs x sync latency        with more: each sync exposes the host's launches
    graph     = GPU + syncs x sync latency: the step replayed as a CUDA graph (no launches on the host),
                which the training loop does not do (a column of its own, not in the study's minutes)

Not modelled: caches between kernels (every memory-bound operator reads and writes HBM); a factorization's
latency growing with its size (one least time for a 128-row leaf and a 1000-row matrix: this flatters
larger calls, and so a larger ``numerics.FACTOR_BLOCK``; the GPU run, ``benchmarks/gpu_check.py``'s
blocked-against-library section, says by how much).

    python benchmarks/gpu_estimate.py [--sets optimistic central pessimistic] [--markdown] [--top 15]
                                      [--product-tflops 45 --potrf-tflops 2 ...: a custom set]

Rate sets (H100 SXM, float64; :data:`RATE_SETS`), and where each number comes from:

- products: FP64 tensor-core peak 66.9 TFLOP/s (NVIDIA's H100 specification, as tabled at
  glennklockwood.com/garden/processors/h100, which also gives 55-59 TFLOP/s per H100 in HPL, a large
  GEMM-bound run); batched products of 500-2000 reach less: 60 / 45 / 30 TFLOP/s (assumed).
- potrf: 4 / 2 / 1 TFLOP/s, the range issue 39 gives for published cuSOLVER batched Cholesky timings of
  20 matrices of 600-1000 (not found by us in a primary source: the cuSOLVER, cuSolverDx and MAGMA
  pages we could search give no rates at these sizes).
- trsm: 20 / 10 / 4 TFLOP/s, assumed (cuBLAS triangular solves with many right-hand sides are
  GEMM-rich; no published batched rate at these sizes found).
- potrs and inverse: 10 / 5 / 2 TFLOP/s, assumed; PyTorch's CUDA ``cholesky_inverse`` is a
  ``cholesky_solve`` of the identity, so both run the same two triangular solves, through cuSOLVER's
  or MAGMA's potrs rather than cuBLAS's trsm.
- memory bandwidth: HBM3 peak 3.35 TB/s (NVIDIA's specification); 3.0 / 2.4 / 1.7 TB/s achieved (a
  coalesced read reaches about 2.8 TB/s, irregular ones 1.4-1.9: mikamirai.com/blog/gpu-memory-bandwidth;
  2.4 is issue 39's).
- least times, host costs: the figures of the review in issue 47 (its assumptions, not measured by it or by
  us; the central set is theirs, the others spread around them by us): a factorization or triangular-solve
  call latency-bound at about 0.2 ms (a potrf or trsm leaf of 128 rows; 0.1 / 0.2 / 0.3 ms), 9 us of host
  time a kernel launch (6 / 9 / 12), 11 us a cuBLAS call (8 / 11 / 15), 40 us a cuSOLVER call (25 / 40 /
  60). A kernel's least time on the GPU: 2 / 3 / 5 us, assumed. Views and allocations: 1 / 2 / 3 us of
  host time (PyTorch's dispatch without a launch is a few us:
  jiahuanglin.xyz/all_lessons/gpu_kernel_serving/18_pytorch_to_kernel.html).
- sync latency: 10 / 20 / 50 us, assumed.

None of these has been measured by the project: ``benchmarks/gpu_check.py`` measures the rows on a GPU
beside this estimate, so that its first report calibrates the rates.
"""

import argparse
import sys
import traceback
from collections import Counter
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpstudy.runtime.host_sync import HostSyncCounter, in_package, place  # noqa: E402
from gpstudy.study import run_settings  # noqa: E402
from gpstudy.training.fit import BatchSampler, train_iteration  # noqa: E402
from gpstudy.training.optim import adam  # noqa: E402

import speed  # noqa: E402  (its FLOP formulas register on import)

aten = torch.ops.aten
FACTORIZATIONS = {
    aten.linalg_cholesky_ex: "potrf",
    aten.linalg_solve_triangular: "trsm",
    aten.cholesky_solve: "potrs",
    aten.cholesky_inverse: "inverse",
}
KINDS = tuple(dict.fromkeys(FACTORIZATIONS.values()))  # potrf, trsm, potrs, inverse
OVERWRITE = {
    aten.copy_,
    aten.fill_,
    aten.zero_,
    aten.normal_,
    aten.uniform_,
    aten.bernoulli_,
    aten.random_,
    aten.exponential_,
}  # in-place operators that write their argument without reading it
GATHERS = {aten.index, aten.index_select, aten.gather}  # read as many source elements as they write
ALLOCATIONS = {aten.empty, aten.empty_like, aten.empty_strided, aten.new_empty, aten.new_empty_strided}
GEMMS = {aten.mm, aten.bmm, aten.addmm, aten.baddbmm}  # matrix products (in-place ones by their functional form)
METADATA = {aten._unsafe_view, aten._reshape_alias}  # no alias in their schema, but views all the same
SPLITS, N = 20, 1000  # the batch of one job; N only has to exceed the minibatch (the step does not grow with N)


def _bytes_read(tensor: torch.Tensor) -> int:
    """Bytes of the distinct elements a kernel reading ``tensor`` touches (stride-0 dimensions once)."""
    elements = 1
    for size, stride in zip(tensor.shape, tensor.stride()):
        elements *= size if stride != 0 else 1
    return elements * tensor.element_size()


def _tensors(value) -> list[torch.Tensor]:
    return [leaf for leaf in tree_flatten(value)[0] if isinstance(leaf, torch.Tensor)]


def _functional(packet):
    """The functional form of an in-place operator's packet (``baddbmm_`` -> ``baddbmm``), else the packet."""
    return getattr(aten, packet.__name__.removesuffix("_"), packet)


def _vector_product(packet, args) -> bool:
    """Whether ``packet`` is a matrix product (``GEMMS``) whose rows, columns or inner size is 1 (its last two
    operands ``[..., m, k]``, ``[..., k, n]``)."""
    if packet not in GEMMS:
        return False
    a, b = [arg for arg in args if isinstance(arg, torch.Tensor)][-2:]
    return 1 in (a.shape[-2], a.shape[-1], b.shape[-1])


def _site() -> str:
    """Where an operator is dispatched: the backward node running it ("backward of MulBackward0"), else
    file:line of the innermost gpstudy frame."""
    node = torch._C._current_autograd_node()
    if node is not None:
        return f"backward of {node.name()}"
    ours = [frame for frame in traceback.extract_stack() if in_package(frame)]
    return place(ours[-1]) if ours else "outside gpstudy"


@dataclass
class Costs:
    """What one iteration costs: FLOPs of products and of factorizations by kind, bytes of memory-bound
    operators, operators by kind (``host``), and host synchronisations."""

    product_flops: int = 0
    factorization_flops: Counter = field(default_factory=Counter)  # kind -> FLOPs
    bytes: int = 0
    host: Counter = field(default_factory=Counter)  # product, factorization, memory, adam, view, allocation
    syncs: float = 0.0
    # every kernel-launching call by (kind, its FLOPs or bytes): kind product, memory (adam's too) or a
    # factorization's (potrf, trsm, potrs, inverse)
    calls: Counter = field(default_factory=Counter)

    @property
    def launches(self) -> int:
        """Operators that launch a kernel on CUDA."""
        return self.host["product"] + self.host["factorization"] + self.host["memory"] + self.host["adam"]

    @property
    def views(self) -> int:
        """Operators that only dispatch (views and allocations)."""
        return self.host["view"] + self.host["allocation"]


class CostCount(TorchDispatchMode):
    """Counts the :class:`Costs` of the operators dispatched inside it (see the module's docstring);
    with ``by_site`` also the memory-bound bytes per (operator, shape of its first input, gpstudy
    file:line), in ``sites``. An optimizer watched by :meth:`watch` is counted as fused CUDA Adam."""

    def __init__(self, by_site: bool = False):
        super().__init__()
        self.costs = Costs()
        self.by_site = by_site
        self.sites: Counter = Counter()
        self._in_optimizer = False

    def watch(self, optimizer: torch.optim.Optimizer) -> None:
        """Count ``optimizer``'s steps as fused CUDA Adam instead of the operators they dispatch."""

        def before(optimizer, args, kwargs):
            self._in_optimizer = True
            for group in optimizer.param_groups:
                by_dtype = Counter()
                for parameter in group["params"]:
                    if parameter.grad is not None:
                        by_dtype[parameter.dtype] += parameter.numel() * parameter.element_size()
                for parameter_bytes in by_dtype.values():
                    self.costs.host["adam"] += 2  # _foreach_add_ of the step counts, _fused_adam_
                    self.costs.bytes += 7 * parameter_bytes
                    self.costs.calls["memory", 0] += 1  # the step counts (a few bytes)
                    self.costs.calls["memory", 7 * parameter_bytes] += 1

        def after(optimizer, args, kwargs):
            self._in_optimizer = False

        optimizer.register_step_pre_hook(before)
        optimizer.register_step_post_hook(after)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not self._in_optimizer and func.namespace == "aten":  # not the profiler's markers
            self._count(func, args, kwargs, out)
        return out

    def _count(self, func, args, kwargs, out) -> None:
        packet = func.overloadpacket
        functional = _functional(packet)
        packet = functional if functional in flop_registry else packet
        if packet in FACTORIZATIONS:
            kind, flops = FACTORIZATIONS[packet], flop_registry[packet](*args, **kwargs, out_val=out)
            self.costs.host["factorization"] += 1
            self.costs.factorization_flops[kind] += flops
            self.costs.calls[kind, flops] += 1
        elif packet in flop_registry and not _vector_product(packet, args):  # baddbmm_ too: the GEMM reads its C
            flops = flop_registry[packet](*args, **kwargs, out_val=out)
            self.costs.host["product"] += 1
            self.costs.product_flops += flops
            self.costs.calls["product", flops] += 1
        elif func.is_view or packet in METADATA:
            self.costs.host["view"] += 1
        elif packet in ALLOCATIONS:
            self.costs.host["allocation"] += 1
        else:
            self.costs.host["memory"] += 1
            moved = self._bytes(func, args, kwargs, out)
            self.costs.bytes += moved
            self.costs.calls["memory", moved] += 1
            if self.by_site:
                first = next(iter(_tensors(args)), None)
                shape = list(first.shape) if first is not None else []
                self.sites[(str(packet).removeprefix("aten."), str(shape), _site())] += moved

    @staticmethod
    def _bytes(func, args, kwargs, out) -> int:
        """Bytes read and written by one memory-bound operator (the module's docstring says which)."""
        schema = func._schema
        written, read = [], []
        bound = dict(zip((argument.name for argument in schema.arguments), args)) | kwargs
        for argument in schema.arguments:
            tensors = _tensors(bound.get(argument.name))
            if argument.alias_info is not None and argument.alias_info.is_write:
                written += tensors
                overwritten = func.overloadpacket in OVERWRITE or (
                    _functional(func.overloadpacket) in GEMMS and bound.get("beta") == 0
                )
                if not argument.kwarg_only and not overwritten:
                    read += tensors  # in place: read, then written (an ``out=`` argument is only written)
            else:
                read += tensors
        values = (out,) if len(schema.returns) == 1 else out or ()
        for value, returned in zip(values, schema.returns):
            if returned.alias_info is None:  # a fresh output (an aliased one is an argument written above)
                written += _tensors(value)
        write_bytes = sum(tensor.numel() * tensor.element_size() for tensor in written)
        if func.overloadpacket in GATHERS:  # the source as much as it writes, and the indices
            source, *indices = read
            return 2 * write_bytes + sum(_bytes_read(index) for index in indices if index is not source)
        return sum(_bytes_read(tensor) for tensor in read) + write_bytes


def preset(dataset: str | None) -> speed.Preset:
    """The UCI rows' sizes (``speed.UCI``: D, batch, RFE) with ``dataset``'s config.yaml options (None: the
    ``training`` and ``methods`` defaults)."""
    return replace(speed.UCI, dataset=dataset)


def counts(
    method_name: str, M: int, splits: int = SPLITS, by_site: bool = False, dataset: str | None = None
) -> tuple[Costs, Counter]:
    """The :class:`Costs` of one training iteration of ``method_name`` at M inducing points and ``splits``
    splits on ``meta`` (after a warm-up iteration), with ``dataset``'s options (:func:`preset`), syncs counted
    on the CPU; with ``by_site`` the memory-bound bytes per operator and site (:class:`CostCount`)."""
    device = torch.device("meta")
    method, x, y, generators = speed.build(method_name, M, N, splits, torch.device("cpu"), preset=preset(dataset))
    method, x, y = method.to(device), x.to(device), y.to(device)
    optimizer = adam(method.adam_parameters(), 0.003, device)
    sampler = BatchSampler(N, speed.BATCH, generators, device)
    train_iteration(method, optimizer, sampler, x, y, 1, generators)
    count = CostCount(by_site)
    count.watch(optimizer)
    with count:
        train_iteration(method, optimizer, sampler, x, y, 2, generators)
    count.costs.syncs = syncs(method_name, M, dataset)
    return count.costs, count.sites


def syncs(method_name: str, M: int, dataset: str | None = None) -> float:
    """Host synchronisations per iteration, counted on the CPU at a small size (they do not depend on it)."""
    method, x, y, generators = speed.build(method_name, min(M, 20), 64, 2, torch.device("cpu"), preset=preset(dataset))
    optimizer = adam(method.adam_parameters(), 0.003, x.device)
    sampler = BatchSampler(64, 16, generators, x.device)
    train_iteration(method, optimizer, sampler, x, y, 1, generators)
    with HostSyncCounter() as counter:
        for step in range(2, 5):
            train_iteration(method, optimizer, sampler, x, y, step, generators)
    return len(counter.events) / 3


VALUES_ONLY = ("beta0", "xi", "measurement_noise", "natural_step")  # options that change numbers, not a step's work
EXPERIMENTS = ("uci", "odvgp")  # the UCI study's experiments (config.yaml)


@dataclass
class Variant:
    """One training step of the study to count: a (method, M) with the options of the data sets it names, and
    how many iterations those data sets' jobs train in all."""

    experiment: str
    method: str
    M: int
    datasets: list[str]
    options: dict
    iterations: int = 0


def variants(study: dict = speed.STUDY) -> list[Variant]:
    """Every (experiment, method, M) of :data:`EXPERIMENTS`, split by the options its data sets train it with
    (config.yaml's ``dataset_options``: e.g. GPNet's online hyperparameters on Energy, Power and Wine, its noisy
    measurement set on the others), options that change only values (:data:`VALUES_ONLY`) aside."""
    found = {}
    for experiment in EXPERIMENTS:
        spec = study["experiments"][experiment]
        for method, sizes in spec["methods"].items():
            for M in sizes:
                for dataset in spec["datasets"]:
                    settings = run_settings(study, dataset, method=method, M=M)
                    options = {key: value for key, value in settings.options.items() if key not in VALUES_ONLY}
                    key = (experiment, method, M, repr(sorted(options.items())), settings.batch_size)
                    variant = found.setdefault(key, Variant(experiment, method, M, [], options))
                    variant.datasets.append(dataset)
                    variant.iterations += settings.iterations
    return list(found.values())


def label(variant: Variant, others: list[Variant]) -> str:
    """The options that set ``variant`` apart from the other variants of its (experiment, method, M)."""
    same = [
        other
        for other in others
        if (other.experiment, other.method, other.M) == (variant.experiment, variant.method, variant.M)
    ]
    differ = {key for other in same for key, value in other.options.items() if variant.options.get(key) != value}
    return ", ".join(f"{key} {variant.options[key]}" for key in sorted(differ)) or "-"


@dataclass(frozen=True)
class Rates:
    """What a GPU does per second, and what each call costs at least (module docstring: the sets and their
    sources)."""

    product_tflops: float  # float64 matrix products
    potrf_tflops: float  # batched Cholesky factors
    trsm_tflops: float  # triangular solves
    potrs_tflops: float  # Cholesky solves with k right-hand sides
    inverse_tflops: float  # cholesky_inverse
    bandwidth_tbs: float  # memory bandwidth achieved by memory-bound kernels, TB/s
    kernel_min_us: float  # the GPU's least time for any kernel (a product's or a memory-bound one's)
    factor_min_us: float  # the GPU's least time for a factorization or triangular-solve call (latency-bound)
    launch_us: float  # host time per memory-bound kernel launched
    blas_call_us: float  # host time per cuBLAS call: a matrix product or a triangular solve (trsm)
    solver_call_us: float  # host time per cuSOLVER call: potrf, potrs, cholesky_inverse
    view_us: float  # host time per view or allocation (no kernel)
    sync_us: float  # latency of one host synchronisation


RATE_SETS = {  # H100 SXM, float64
    "optimistic": Rates(60, 4, 20, 10, 10, 3.0, 2, 100, 6, 8, 25, 1, 10),
    "central": Rates(45, 2, 10, 5, 5, 2.4, 3, 200, 9, 11, 40, 2, 20),
    "pessimistic": Rates(30, 1, 4, 2, 2, 1.7, 5, 300, 12, 15, 60, 3, 50),
}
HOST_CALL = {"product": "blas_call_us", "trsm": "blas_call_us", "potrf": "solver_call_us", "potrs": "solver_call_us"}
HOST_CALL |= {"inverse": "solver_call_us", "memory": "launch_us"}  # the host's time per call of each kind


@dataclass(frozen=True)
class Estimate:
    """Seconds of one iteration: the GPU's busy time (of which factorizations and memory-bound kernels),
    the host's, the iteration's, and the iteration's if it were replayed as a CUDA graph (the GPU's time and
    the sync: no launch on the host)."""

    gpu: float
    factorizations: float
    memory: float
    host: float
    iteration: float
    graph: float


def call_seconds(kind: str, work: int, rates: Rates) -> float:
    """The GPU's seconds for one call of ``kind`` doing ``work`` FLOPs (bytes for ``memory``):
    its work at its rate, or its least time if that is longer."""
    if kind == "memory":
        return max(work / (rates.bandwidth_tbs * 1e12), rates.kernel_min_us * 1e-6)
    if kind == "product":
        return max(work / (rates.product_tflops * 1e12), rates.kernel_min_us * 1e-6)
    return max(work / (getattr(rates, f"{kind}_tflops") * 1e12), rates.factor_min_us * 1e-6)


def estimate(costs: Costs, rates: Rates) -> Estimate:
    """One iteration's seconds under ``rates`` (the model of the module's docstring)."""
    seconds = Counter()
    for (kind, work), calls in costs.calls.items():
        seconds[kind] += calls * call_seconds(kind, work, rates)
    factorizations = sum(seconds[kind] for kind in KINDS)
    gpu = seconds["product"] + factorizations + seconds["memory"]
    host = costs.views * rates.view_us * 1e-6
    host += sum(calls * getattr(rates, HOST_CALL[kind]) * 1e-6 for (kind, _), calls in costs.calls.items())
    busy = max(gpu, host) if costs.syncs <= 1 else gpu + host
    sync = costs.syncs * rates.sync_us * 1e-6
    return Estimate(gpu, factorizations, seconds["memory"], host, busy + sync, gpu + sync)


def table(header: list[str], rows: list[list], markdown: bool) -> str:
    """Aligned columns, or a Markdown table (first column left-aligned, the rest right-aligned; ``|`` inside
    a cell escaped)."""
    cells = [[str(cell) for cell in row] for row in [header, *rows]]
    if markdown:
        cells = [[cell.replace("|", "\\|") for cell in row] for row in cells]
        lines = ["| " + " | ".join(row) + " |" for row in cells]
        lines.insert(1, "| --- | " + " | ".join("---:" for _ in header[1:]) + " |")
        return "\n".join(lines)
    widths = [max(len(row[column]) for row in cells) for column in range(len(header))]
    return "\n".join(
        "  ".join(
            cell.ljust(width) if column == 0 else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(row, widths))
        )
        for row in cells
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sets", nargs="+", choices=sorted(RATE_SETS), default=list(RATE_SETS), help="rate sets to estimate under"
    )
    for rate in fields(Rates):
        parser.add_argument(
            f"--{rate.name.replace('_', '-')}",
            type=float,
            help=f"a custom set: the central one with this {rate.name} instead",
        )
    parser.add_argument("--iterations", type=int, help="iterations of every job (default: each data set's)")
    parser.add_argument("--markdown", action="store_true", help="Markdown tables (for docs/gpus.md)")
    parser.add_argument(
        "--top", type=int, default=0, help="also list, per row, the operators and sites moving the most bytes"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    sets = {name: RATE_SETS[name] for name in args.sets}
    custom = {rate.name: getattr(args, rate.name) for rate in fields(Rates) if getattr(args, rate.name) is not None}
    if custom:
        sets["custom"] = replace(RATE_SETS["central"], **custom)
    print(
        f"{SPLITS} splits per job, batch {speed.BATCH}, RFE {speed.HIDDEN}, float64, each data set's iterations "
        f"(config.yaml); torch {torch.__version__}\n"
    )
    rows, totals, tops = [], Counter(), []
    found = variants()
    for variant in found:
        costs, sites = counts(variant.method, variant.M, by_site=args.top > 0, dataset=variant.datasets[0])
        times = {name: estimate(costs, rates) for name, rates in sets.items()}
        iterations = args.iterations * len(variant.datasets) if args.iterations else variant.iterations
        for name, time in times.items():
            totals[variant.experiment, name] += time.iteration * iterations / 60
            totals[variant.experiment, f"{name} graph"] += time.graph * iterations / 60
        calls = Counter()
        for (kind, _), n in costs.calls.items():
            calls[kind] += n
        rows.append(
            [
                variant.experiment,
                variant.method,
                variant.M,
                label(variant, found),
                len(variant.datasets),
                f"{costs.product_flops / 1e9:.1f}",
                *(f"{costs.factorization_flops[kind] / 1e9:.1f}" for kind in KINDS),
                f"{calls['potrf']} / {calls['trsm']}",
                f"{costs.bytes / 1e9:.2f}",
                costs.launches,
                costs.views,
                f"{costs.syncs:.1f}",
                *(f"{time.iteration * 1e3:.2f}" for time in times.values()),
                f"{estimate(costs, RATE_SETS['central']).graph * 1e3:.2f}",
                " / ".join(f"{time.iteration * iterations / 60:.1f}" for time in times.values()),
            ]
        )
        name = f"{variant.experiment} {variant.method} M{variant.M} ({label(variant, found)})"
        if args.top:
            tops.append((name, costs.bytes, sites.most_common(args.top)))
        print(f"{name} counted", file=sys.stderr, flush=True)
    header = [
        "experiment",
        "method",
        "M",
        "options",
        "data sets",
        "GFLOP prod",
        *(f"GFLOP {kind}" for kind in KINDS),
        "potrf / trsm calls",
        "GB moved",
        "launches",
        "views",
        "syncs",
        *(f"ms/it {name}" for name in sets),
        "ms/it as a CUDA graph (central)",
        "min, its jobs (" + " / ".join(sets) + ")",
    ]
    print(table(header, rows, args.markdown))
    print("\nThe UCI study, one job at a time on one GPU, minutes of training (in brackets: if each step were")
    print("replayed as a CUDA graph, which the code does not do):")
    print(
        table(
            ["rate set", *(rate.name for rate in fields(Rates)), *EXPERIMENTS, "both"],
            [
                [
                    name,
                    *(getattr(rates, rate.name) for rate in fields(Rates)),
                    *(
                        f"{totals[experiment, name]:.0f} ({totals[experiment, name + ' graph']:.0f})"
                        for experiment in EXPERIMENTS
                    ),
                    f"{sum(totals[e, name] for e in EXPERIMENTS):.0f} "
                    f"({sum(totals[e, name + ' graph'] for e in EXPERIMENTS):.0f})",
                ]
                for name, rates in sets.items()
            ],
            args.markdown,
        )
    )
    for name, moved, top in tops:
        print(f"\n{name}: {moved / 1e9:.2f} GB moved by memory-bound operators; the largest:")
        print(
            table(
                ["operator", "first input", "site", "GB"],
                [[operator, shape, site, f"{value / 1e9:.3f}"] for (operator, shape, site), value in top],
                args.markdown,
            )
        )


if __name__ == "__main__":
    main()
