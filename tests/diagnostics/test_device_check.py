"""gpstudy.diagnostics.device_check: the GPU checks on CUDA (skipped without a GPU) and what of them runs on the CPU."""

import pytest
import torch

from gpstudy import numerics
from gpstudy.diagnostics import device_check as check
from gpstudy.diagnostics import probes
from gpstudy.diagnostics.probes import PROBES

CPU = torch.device("cpu")
needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs a CUDA device: nothing in this repository has run on a GPU yet "
    "(docs/gpus.md, 'What has run on a GPU')",
)


@pytest.fixture
def planted(monkeypatch):
    """``planted(extra)``: every training iteration of a probe runs ``extra(loss)`` after its step."""

    def plant(extra) -> None:
        original = probes.train_iteration

        def iteration(*args, **kwargs):
            loss = original(*args, **kwargs)
            extra(loss)
            return loss

        monkeypatch.setattr(probes, "train_iteration", iteration)

    return plant


def test_a_probe_on_the_cpu_counts_its_one_deliberate_sync(study_config):
    result = check.check_probe("svgp", study_config, CPU, warmup=1, steps=2)
    assert result.error is None and result.unexpected == () and result.peak_bytes is None
    assert result.deliberate == 1.0 and result.passed


def test_a_planted_host_read_is_counted_and_fails_the_probe(study_config, planted):
    planted(lambda loss: loss.sum().item())
    result = check.check_probe("exact", study_config, CPU, warmup=1, steps=2)
    assert result.error is None and not result.passed
    assert len(result.unexpected) == 1 and result.unexpected[0].startswith("2 x probes.py:")
    assert "host read" in result.unexpected[0]


def test_a_crashing_probe_is_recorded_not_raised(study_config, planted):
    def crash(loss):
        raise RuntimeError("planted\nfailure")

    planted(crash)
    result = check.check_probe("exact", study_config, CPU, warmup=1, steps=2)
    assert result.error == "RuntimeError: planted failure" and result.where.startswith("probes.py:")
    assert not result.passed


def test_cholesky_on_the_cpu_is_lapack_and_the_blocked_form_and_both_solve_their_matrices():
    rows = check.cholesky_libraries(CPU, batch=3, size=numerics.FACTOR_BLOCK + 40, repeats=1)  # one split in halves
    assert [row.library for row in rows] == ["lapack", "blocked (lapack leaves)"]
    assert all(row.error is None and row.residual < 1e-13 and row.seconds > 0 for row in rows)
    assert rows[1].difference < 1e-13 and check.libraries_agree(rows)
    assert not check.libraries_agree([rows[0], check.CholeskyTiming("magma", None, None, None, "RuntimeError")])


def test_a_blocked_factor_that_differs_from_the_library_s_disagrees(monkeypatch):
    monkeypatch.setattr(check, "blocked_cholesky_ex", lambda matrices: torch.linalg.cholesky_ex(1.01 * matrices))
    rows = check.cholesky_libraries(CPU, batch=2, size=30, repeats=1)
    assert rows[1].difference > 1e-3 and not check.libraries_agree(rows)


def test_spd_batch_gives_each_matrix_its_own_generator_and_is_positive_definite():
    batch = check.spd_batch(3, 20, CPU)
    assert torch.equal(batch[0], check.spd_batch(1, 20, CPU)[0])
    assert not torch.equal(batch[0], batch[1])
    assert torch.linalg.eigvalsh(batch).min() > 0.9  # B B^T / n + I


@needs_cuda
@pytest.mark.parametrize("name", list(PROBES))
def test_every_probe_trains_on_cuda_without_an_undeclared_sync(study_config, name):
    result = check.check_probe(name, study_config, torch.device("cuda"), warmup=3, steps=10)
    assert result.error is None, f"{result.error} at {result.where}"
    assert result.passed, result.unexpected
    assert result.peak_bytes > 0


@needs_cuda
def test_sync_debug_mode_catches_a_planted_host_read_on_cuda(study_config, planted):
    planted(lambda loss: loss.sum().item())
    result = check.check_probe("exact", study_config, torch.device("cuda"), warmup=1, steps=2)
    assert result.error is not None and "synchroniz" in result.error, result.error
    assert torch.cuda.get_sync_debug_mode() == 0  # restored after the failure (pytest runs in mode 0)


@needs_cuda
def test_peak_memory_sees_an_allocation_after_its_reset():
    device = torch.device("cuda")
    check.reset_peak_memory(device)
    block = torch.empty(2**21, dtype=torch.float64, device=device)  # 16 MiB
    del block
    assert check.peak_memory(device) >= 2**24


@needs_cuda
def test_cusolver_and_magma_agree_on_a_batched_cholesky():
    before = torch.backends.cuda.preferred_linalg_library()
    rows = check.cholesky_libraries(torch.device("cuda"), batch=20, size=1000, repeats=1)
    assert [row.library for row in rows] == [*check.CUDA_LIBRARIES, check.blocked_form(check.CUDA_LIBRARIES[0])]
    assert check.libraries_agree(rows), rows
    assert torch.backends.cuda.preferred_linalg_library() == before


@needs_cuda
def test_the_environment_names_every_gpu_and_its_compute_capability():
    facts = dict(check.environment(torch.device("cuda"), repeats=1))
    for index in range(torch.cuda.device_count()):
        assert "compute capability" in facts[f"cuda:{index}"]


def test_the_rfe_product_by_any_block_count_is_the_same_product():
    """Section 5 of gpu_check.py's report: one L stored in 1, 4 and 8 column blocks gives one Phi L (to rounding);
    a block count that moved the product would disagree."""
    rows = check.block_tril_products(CPU, batch=2, rows=30, size=300, blocks=(1, 4, 8), repeats=1)
    assert [row.blocks for row in rows] == [1, 4, 8]
    assert all(row.seconds > 0 and row.difference < 1e-14 for row in rows) and check.block_counts_agree(rows)
    assert not check.block_counts_agree([*rows, check.BlockTrilTiming(8, 1.0, 1e-3)])
