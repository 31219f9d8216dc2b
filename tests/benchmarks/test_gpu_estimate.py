"""benchmarks/gpu_estimate.py: what its counter counts for single operators on ``meta``, its model's arithmetic,
and the bytes of the forms issue 39's item 4 made move fewer (BlockTril's product, the Fourier features, the
RBF kernel, ``scale_tril``, the in-place jitter, the Gram by halves)."""

import importlib
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from gpstudy import gaussian, linalg, numerics
from gpstudy.kernels import RBF
from gpstudy.kernels.features import FourierFeatures
from gpstudy.nets.block_tril import BlockTril, _LeftProduct
from gpstudy.training.optim import adam

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
ESTIMATE = importlib.import_module("gpu_estimate")  # as gpu_check.py imports it
CostCount, Costs, Rates = ESTIMATE.CostCount, ESTIMATE.Costs, ESTIMATE.Rates
META = dict(device="meta", dtype=torch.float64)


def costs_of(function) -> Costs:
    with CostCount() as count:
        function()
    return count.costs


def test_an_elementwise_operator_reads_its_inputs_and_writes_its_output():
    a, b = torch.empty(4, 5, **META), torch.empty(4, 5, **META)
    costs = costs_of(lambda: a + b)
    assert costs.bytes == 3 * 20 * 8 and costs.host == {"memory": 1} and costs.product_flops == 0


def test_a_broadcast_input_is_read_once_and_a_view_moves_nothing():
    a, row = torch.empty(100, 50, **META), torch.empty(1, 50, **META)
    assert costs_of(lambda: a * row).bytes == (5000 + 50 + 5000) * 8
    costs = costs_of(lambda: a.mT.unsqueeze(0).expand(3, 50, 100))
    assert costs.bytes == 0 and costs.host == {"view": 3} and costs.launches == 0 and costs.views == 3


def test_in_place_operators_read_and_write_their_argument_copy_only_writes_it():
    a, b = torch.empty(10, **META), torch.empty(10, **META)
    assert costs_of(lambda: a.add_(b)).bytes == 3 * 80
    assert costs_of(lambda: a.copy_(b)).bytes == 2 * 80
    assert costs_of(lambda: torch.empty(10, **META)).host == {"allocation": 1}


def test_a_gather_reads_the_rows_it_takes_not_its_whole_source():
    source, rows = torch.empty(1000, 8, **META), torch.zeros(5, dtype=torch.long, device="meta")
    assert costs_of(lambda: source[rows]).bytes == 2 * 5 * 8 * 8 + 5 * 8


def test_products_and_factorizations_are_counted_in_flops_by_kind():
    a, b = torch.empty(3, 40, 30, **META), torch.empty(3, 30, 20, **META)
    c = torch.empty(3, 40, 20, **META)
    costs = costs_of(lambda: (torch.bmm(a, b), c.baddbmm_(a, b)))
    assert costs.product_flops == 2 * 2 * 3 * 40 * 30 * 20 and costs.bytes == 0 and costs.host == {"product": 2}
    spd, rhs = torch.empty(2, 50, 50, **META), torch.empty(2, 50, 7, **META)
    costs = costs_of(
        lambda: (
            torch.linalg.cholesky_ex(spd),
            torch.linalg.solve_triangular(spd, rhs, upper=False),
            torch.cholesky_solve(rhs, spd),
            torch.cholesky_inverse(spd),
        )
    )
    assert costs.factorization_flops == {
        "potrf": 2 * 50**3 // 3,
        "trsm": 2 * 50 * 50 * 7,
        "potrs": 2 * 2 * 50 * 50 * 7,
        "inverse": 2 * 2 * 50**3,
    }
    assert costs.host == {"factorization": 4} and costs.bytes == 0


def test_a_product_with_a_size_of_one_is_memory_bound_and_beta_zero_does_not_read_its_output():
    """A matrix-vector product, an outer product and a dot do 2 FLOPs per element they move: counted in bytes
    (GEMV, GER), not at the product rate; a GEMM with beta 0 only writes its C."""
    matrix, vector, row = torch.empty(3, 40, 30, **META), torch.empty(3, 30, 1, **META), torch.empty(3, 1, 40, **META)
    column = torch.empty(3, 40, 1, **META)
    for product, moved in [
        (lambda: torch.bmm(matrix, vector), 3 * (40 * 30 + 30 + 40)),
        (lambda: torch.bmm(vector, row), 3 * (30 + 40 + 30 * 40)),
        (lambda: torch.bmm(row, column), 3 * (40 + 40 + 1)),
    ]:
        costs = costs_of(product)
        assert costs.product_flops == 0 and costs.host == {"memory": 1} and costs.bytes == moved * 8
    c, a, b = torch.empty(3, 40, 20, **META), torch.empty(3, 40, 30, **META), torch.empty(3, 30, 20, **META)
    outer = torch.empty(3, 40, 30, **META)
    assert costs_of(lambda: outer.baddbmm_(row.mT, vector.mT, beta=0)).bytes == 3 * (40 + 30 + 40 * 30) * 8
    assert costs_of(lambda: outer.baddbmm_(row.mT, vector.mT)).bytes == 3 * (40 + 30 + 2 * 40 * 30) * 8
    assert costs_of(lambda: c.baddbmm_(a, b, beta=0)).product_flops == 2 * 3 * 40 * 30 * 20


def test_adam_is_counted_as_the_fused_cuda_adam():
    weights = [torch.nn.Parameter(torch.empty(30, 10, **META)), torch.nn.Parameter(torch.empty(10, **META))]
    optimizer = adam(weights, 0.01, torch.device("meta"))  # meta: the per-tensor loop
    count = CostCount()
    count.watch(optimizer)
    for weight in weights:
        weight.grad = torch.empty_like(weight)
    with count:
        optimizer.step()
        optimizer.step()
    assert count.costs.host == {"adam": 4}  # per step: the step counts' _foreach_add_ and one _fused_adam_
    assert count.costs.bytes == 2 * 7 * 310 * 8  # param, grad, 2 moments read; param, 2 moments written


def test_the_model_adds_gpu_times_with_each_calls_least_time_and_overlaps_the_host_with_one_sync():
    rates = Rates(
        product_tflops=10,
        potrf_tflops=1,
        trsm_tflops=2,
        potrs_tflops=4,
        inverse_tflops=5,
        bandwidth_tbs=2,
        kernel_min_us=3,
        factor_min_us=200,
        launch_us=10,
        blas_call_us=11,
        solver_call_us=40,
        view_us=1,
        sync_us=100,
    )
    costs = Costs(syncs=1.0)
    costs.calls.update({("product", 10**10): 1, ("product", 10): 2, ("memory", 2 * 10**9): 1, ("memory", 8): 97})
    costs.calls.update({("potrf", 10**9): 1, ("trsm", 10**9): 1, ("potrs", 10**9): 1, ("inverse", 10**9): 1})
    costs.calls.update({("potrf", 1000): 3, ("trsm", 1000): 5})  # latency-bound: 200 us each
    costs.host.update(view=50)
    time = ESTIMATE.estimate(costs, rates)
    assert time.factorizations == pytest.approx(1e-3 + 0.5e-3 + 0.25e-3 + 0.2e-3 + 8 * 200e-6)
    assert time.memory == pytest.approx(1e-3 + 97 * 3e-6)
    assert time.gpu == pytest.approx(1e-3 + 2 * 3e-6 + time.factorizations + time.memory)
    assert time.host == pytest.approx((98 * 10 + 3 * 11 + 6 * 11 + 6 * 40 + 50 * 1) * 1e-6)
    assert time.iteration == pytest.approx(time.gpu + 100e-6)  # the GPU's time, the host hidden behind it
    assert time.graph == pytest.approx(time.gpu + 100e-6)
    costs.syncs = 2.0  # each sync exposes the host's launches
    assert ESTIMATE.estimate(costs, rates).iteration == pytest.approx(time.gpu + time.host + 200e-6)
    costs.calls, costs.syncs = Counter({("memory", 8): 1000}), 1.0  # launch-bound: the host's time
    host_bound = ESTIMATE.estimate(costs, rates)
    assert host_bound.iteration == pytest.approx(1000 * 10e-6 + 50e-6 + 100e-6) and host_bound.graph < 4e-3


def test_the_rate_sets_are_ordered_from_optimistic_to_pessimistic():
    sets = ESTIMATE.RATE_SETS
    costs = Costs()
    costs.calls.update({("product", 10**12): 1, ("memory", 10**10): 1, ("memory", 8): 300, ("potrf", 10**6): 20})
    costs.calls.update({("potrf", 10**11): 1, ("trsm", 10**11): 1, ("potrs", 10**11): 1, ("inverse", 10**11): 1})
    costs.host.update(view=300)
    times = [ESTIMATE.estimate(costs, sets[name]).iteration for name in ("optimistic", "central", "pessimistic")]
    assert times == sorted(times) and times[0] < times[2]


def test_the_study_is_counted_by_the_options_each_data_set_trains_a_method_with(study_config):
    """GPNet and FBNN train with online hyperparameters on Energy, Power and Wine (config.yaml's dataset_options)
    and with a noisy measurement set on the others: two steps each; the odvgp experiment's 28 jobs are counted."""
    found = ESTIMATE.variants(study_config)
    by_row = {}
    for variant in found:
        by_row.setdefault((variant.experiment, variant.method, variant.M), []).append(variant)
    online = {
        dataset
        for variant in by_row["uci", "gpnet", 500]
        if variant.options["online_hyperparameters"]
        for dataset in variant.datasets
    }
    assert online == {"energy", "power", "wine_red"} and len(by_row["uci", "fbnn", 500]) == 2
    assert len(by_row["uci", "svgp", 100]) == 1  # SVGP learns its hyperparameters everywhere
    jobs = {
        experiment: sum(len(v.datasets) for v in found if v.experiment == experiment) for experiment in ("uci", "odvgp")
    }
    assert jobs == {"uci": 35, "odvgp": 28}
    assert all(v.iterations == 10000 * len(v.datasets) for v in found)
    assert "online_hyperparameters" in ESTIMATE.label(by_row["uci", "gpnet", 100][0], found)


@pytest.mark.parametrize("blocks", [1, 4])
@pytest.mark.parametrize("with_vector", [False, True])
def test_block_tril_product_moves_no_bytes_outside_its_products(blocks, with_vector):
    """Its product (with Phi v beside it: RFE's mean) and backward write into the result's and the gradient's
    columns (before issue 39's item 4: an add of two products, a concatenation, a zero fill, read-modify-writes
    of slices and the sum of Phi's two gradients, about 5 passes over [splits, n, K] each way)."""
    factor = BlockTril(64, 1.0, torch.zeros((), **META), (3,), blocks)
    phi = torch.empty(3, 50, 64, **META, requires_grad=True)
    vector = torch.empty(3, 64, 1, **META, requires_grad=True) if with_vector else None
    blocks_ = [block.detach() for block in (*factor.diagonal_blocks(), *factor.below_blocks)]

    def products():
        outputs = _LeftProduct.apply(factor.edges, phi, vector, *blocks_)
        (outputs[0].sum() + outputs[1].sum() if with_vector else outputs.sum()).backward()

    costs = costs_of(products)
    assert costs.host["product"] >= 3 * blocks
    own_sums = (phi.numel() + 3 * 50) * 8 + 128  # the test's sums (one read each) and scalars
    # with v: Phi v, Phi^T dm and the outer product dm v^T (Phi's gradient's first write), matrix-vector
    # products, memory-bound: each reads or writes Phi once, and the vectors
    vector_products = (3 * phi.numel() + 4 * 3 * (50 + 64)) * 8 if with_vector else 0
    assert costs.bytes <= own_sums + vector_products
    assert costs.bytes >= own_sums - 128 + vector_products - 4 * 3 * (50 + 64) * 8


def test_fourier_features_move_at_most_eight_and_a_half_passes_over_the_features():
    """cos and sin into their halves and the scaling in place (4 passes of the features' size; with a
    concatenation 6), their gradient from the output (3.5); before issue 39's item 4 the gradient was
    autograd's chain through all four (9.5)."""
    projection = torch.empty(3, 100, 128, **META, requires_grad=True)  # from WRITE_HALVES_FROM (32768) projections
    variance = torch.ones(3, **META)
    costs = costs_of(lambda: FourierFeatures()(projection, variance).sum().backward())
    feature_bytes = 3 * 100 * 256 * 8
    assert 7.5 * feature_bytes < costs.bytes <= 8.5 * feature_bytes  # with the test's sum (1 pass)


def test_the_rbf_kernel_moves_four_passes_over_its_matrix_and_six_backward():
    """The exponential and the variance in place on the product (issue 47; before: two in-place subtractions from
    the product, the exponential, the variance: 8 passes; before issue 39's item 4, 14); backward the exponential
    formed again in place, multiplied by the gradient in place, summed (2 + 3 + 1 passes, its products' reads
    aside), the variance on the products' small factors (before: on the matrix in place, 2 passes more)."""
    kernel = RBF(3, batch_shape=(2,)).to("meta")
    x1 = torch.empty(2, 300, 3, **META, requires_grad=True)
    x2 = torch.empty(2, 200, 3, **META)
    matrix_bytes = 2 * 300 * 200 * 8
    assert 4 * matrix_bytes < costs_of(lambda: kernel.K(x1, x2)).bytes < 4.5 * matrix_bytes
    upstream = torch.empty(2, 300, 200, **META)
    both = costs_of(lambda: torch.autograd.grad(kernel.K(x1, x2), x1, upstream)).bytes
    assert 10 * matrix_bytes < both < 10.5 * matrix_bytes


def test_scale_tril_moves_four_passes_over_its_matrix_forward_and_backward():
    """The strict lower triangle copied, forward and backward (2 + 2 passes), and O(n) on the diagonal (before
    issue 39's item 4: tril, diag_embed and their sum, and backward tril, the diagonal's embedding and the sum of
    the two gradients: 12 passes)."""
    raw = torch.empty(3, 64, 64, **META, requires_grad=True)
    upstream = torch.empty(3, 64, 64, **META)
    matrix_bytes = 3 * 64 * 64 * 8
    costs = costs_of(lambda: torch.autograd.grad(linalg.scale_tril(raw), raw, upstream))
    assert 4 * matrix_bytes < costs.bytes < 4.5 * matrix_bytes


def test_the_standard_normal_kl_s_backward_is_one_pass_over_its_factor():
    """SVGP's KL[q(v) || N(0, I)]: its factor's gradient g L read and written once, the diagonal's term in place (2
    passes; autograd's squared norm, the diagonal's zeros and their sum made 6)."""
    mean = torch.empty(3, 400, **META, requires_grad=True)
    chol = torch.empty(3, 400, 400, **META, requires_grad=True)
    kl = gaussian.kl_to_standard_normal(mean, chol)
    costs = costs_of(lambda: torch.autograd.grad(kl, (mean, chol), torch.empty(3, **META)))
    matrix_bytes = 3 * 400**2 * 8
    assert 2 * matrix_bytes < costs.bytes < 2.1 * matrix_bytes


def test_the_jitter_added_in_place_moves_only_the_diagonal():
    """``add_jitter_`` reads and writes the diagonal, its backward nothing: only the test's own product's
    backward (2 passes) is left (``add_jitter``: a clone, and autograd's copy of the gradient, 6 passes)."""
    leaf = torch.empty(3, 64, 64, **META, requires_grad=True)
    upstream = torch.empty(3, 64, 64, **META)
    matrix = leaf * 2.0
    matrix_bytes = 3 * 64 * 64 * 8
    costs = costs_of(lambda: torch.autograd.grad(linalg.add_jitter_(matrix), leaf, upstream))
    assert costs.bytes == 2 * matrix_bytes + 2 * 3 * 64 * 8


@pytest.mark.parametrize("upper_triangular", [False, True])
def test_the_gram_by_halves_moves_only_its_mirrored_block(upper_triangular):
    """The products write into the result's blocks; one copy mirrors the off-diagonal block (a quarter of the
    result read and written; the concatenations before issue 39's item 4: 4 passes over it)."""
    factor = torch.empty(3, 200, 200 if upper_triangular else 30, **META)
    costs = costs_of(lambda: linalg.symmetric_product(factor, upper_triangular))
    assert costs.bytes == 2 * 3 * 100 * 100 * 8 and costs.host["product"] == 3


def test_a_squared_norm_reads_its_matrix_once_and_its_gradient_is_one_pass():
    """The norm reduced from one read (``x.square().sum()``: the square written and read, 3 passes) and x * 2 dS
    backward (autograd's ``square`` backward: 2 x and its product by the gradient, 4 passes)."""
    x = torch.empty(3, 200, 100, **META, requires_grad=True)
    matrix_bytes = 3 * 200 * 100 * 8
    forward = costs_of(lambda: linalg.products.squared_norm(x, -2)).bytes
    assert matrix_bytes <= forward < 1.1 * matrix_bytes
    upstream = torch.empty(3, 100, **META)
    both = costs_of(lambda: torch.autograd.grad(linalg.products.squared_norm(x, -2), x, upstream)).bytes
    assert 3 * matrix_bytes <= both < 3.1 * matrix_bytes


def test_the_inverse_by_products_solves_the_identity_only_at_its_leaves():
    """L^-1 by halves: n^3 / 4 of triangular solves at two leaves of n / 2 rows (a blocked solve of the whole
    identity: n^3 / 2, each leaf with n right-hand sides), n^3 / 2 of products, and the Gram of L^-T by halves: at
    most n^3, less where its diagonal blocks are split again (off a CPU, ``products._diagonal_block_into``)."""
    size, batch = 2 * numerics.FACTOR_BLOCK, 3
    costs = costs_of(lambda: linalg.inverse_by_products(torch.empty(batch, size, size, **META)))
    gram = costs_of(lambda: linalg.symmetric_product(torch.empty(batch, size, size, **META), upper_triangular=True))
    assert costs.factorization_flops == {"trsm": batch * size**3 // 4}
    assert costs.product_flops == batch * size**3 // 2 + gram.product_flops
    assert 0.5 * batch * size**3 < gram.product_flops < batch * size**3
    assert costs.host["factorization"] == 2


def test_the_blocked_factor_s_backward_forms_only_the_lower_triangle_of_its_product():
    """The backward of a factor split once: tril(L^T dL) by halves (n^3; the full L^T dL 2 n^3) and two blocked
    solves of n right-hand sides (n^3 / 2 of products each); of memory-bound work the mirrored P in one ``where``
    (3 passes over the matrix; tril, tril(-1), their sum and the halving made 9: 13.25 in all) and the solves'
    four leaf copies (half the matrix each)."""
    size, batch = 2 * numerics.FACTOR_BLOCK, 3
    matrix = torch.empty(batch, size, size, **META, requires_grad=True)
    factor = linalg.blocked.blocked_cholesky_ex(matrix)[0]
    upstream = torch.empty(batch, size, size, **META)
    costs = costs_of(lambda: torch.autograd.grad(factor, matrix, upstream))
    assert costs.product_flops == batch * 2 * size**3
    matrix_bytes = batch * size**2 * 8
    assert 7 * matrix_bytes < costs.bytes < 7.5 * matrix_bytes


@pytest.mark.parametrize(
    "method, M, dataset, potrf, trsm",
    [
        ("svgp", 100, "boston", 1, 4),  # per-point variances off a CPU: the summed form made 1 / 8
        ("gpnet", 100, "boston", 5, 7),  # the conjugate KL's closed-form backward: autograd's made 5 / 9
        ("gpnet", 500, "boston", 5, 7),  # 5 / 9
        ("orth", 300, "boston", 1, 6),  # every solve with L_beta stacked in two: separate ones made 1 / 12
        ("orthnat", 300, "boston", 4, 9),  # the natural step from one factor of the new precision: 5 / 14
    ],
)
def test_a_training_step_makes_few_latency_bound_factorization_calls(method, M, dataset, potrf, trsm):
    """The potrf and trsm calls of one UCI step at the study's sizes (two splits: the count is the same for 20),
    each a latency-bound call on a GPU (issue 47): the counts the estimate's rows are made of."""
    costs, _ = ESTIMATE.counts(method, M, splits=2, dataset=dataset)
    calls = Counter()
    for (kind, _), count in costs.calls.items():
        calls[kind] += count
    assert (calls["potrf"], calls["trsm"]) == (potrf, trsm)
