"""The CPU emulation of TF32 (gpstudy.diagnostics.tf32_emulation): its rounding on known values, and which products
it rounds."""

import pandas as pd
import pytest
import torch

from gpstudy.diagnostics.tf32_emulation import EmulatedTF32, round_to_tf32, study_split, train_with_and_without_tf32
from gpstudy.methods import METHODS
from gpstudy.methods.base import InferenceNetworkMethod
from gpstudy.paper import paper_table
from gpstudy.report.claims import FAIL, PASS, Evidence, Posterior, evaluate_claims, load_claims
from gpstudy.study import run_settings
from gpstudy.training.run import exact_reference, pretrain_splits, train_splits

EPS = 2.0**-11  # half of TF32's last mantissa place at 1 (its unit roundoff)


@pytest.mark.parametrize(
    ("value", "rounded"),
    [
        (1 + EPS, 1.0),  # a tie: to the even neighbour, 1
        (1 + 3 * EPS, 1 + 4 * EPS),  # a tie: to the even neighbour, 1 + 2^-9
        (1 + EPS + 2.0**-20, 1 + 2 * EPS),  # past the tie: up
        (1 + EPS - 2.0**-20, 1.0),  # short of it: down
        (-(1 + 3 * EPS), -(1 + 4 * EPS)),  # the sign kept, the magnitude rounded
        (2 - EPS / 2, 2.0),  # a carry into the exponent
        (2.0**-130 + 2.0**-137, 2.0**-130),  # a subnormal's tie (TF32's last place there: 2^-136)
        (2.0**-130 + 3 * 2.0**-137, 2.0**-130 + 2.0**-135),
        (3.4e38, (2 - 2.0**-9) * 2.0**127),  # near float32's largest: TF32's largest but one
        (float("inf"), float("inf")),
        (-float("inf"), -float("inf")),
    ],
)
def test_round_to_tf32_of_known_values(value, rounded):
    result = round_to_tf32(torch.tensor([value], dtype=torch.float32))
    assert result.item() == torch.tensor(rounded, dtype=torch.float32).item()


def test_round_to_tf32_keeps_nan_and_refuses_other_dtypes():
    nans = torch.tensor([0x7FC00000, 0x7F800001], dtype=torch.int32).view(torch.float32)  # the second: no bit kept
    assert round_to_tf32(nans).isnan().all()
    with pytest.raises(TypeError, match="float64"):
        round_to_tf32(torch.ones(2, dtype=torch.float64))


def test_round_to_tf32_keeps_10_mantissa_bits_and_errs_by_at_most_half_their_last_place():
    x = torch.randn(10_000, generator=torch.Generator().manual_seed(0))
    rounded = round_to_tf32(x)
    assert torch.equal(rounded.view(torch.int32) & 0x1FFF, torch.zeros_like(rounded, dtype=torch.int32))
    relative = ((rounded - x) / x).abs()
    assert relative.max() <= EPS and relative.max() > EPS / 2  # within half a place, and it does round


def relative_error(product: torch.Tensor, exact: torch.Tensor) -> float:
    return ((product.double() - exact).norm() / exact.norm()).item()


def test_a_product_under_the_mode_errs_like_tf32_not_float32():
    """A 64 x 256 by 256 x 32 product: float32's error ~1e-7, TF32's ~1e-4 (random signs: sqrt(K) terms
    partly cancel), and the mode's equals the product of the rounded operands exactly."""
    generator = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 256, generator=generator), torch.randn(256, 32, generator=generator)
    exact = a.double() @ b.double()
    with EmulatedTF32() as tf32:
        emulated = a @ b
    assert tf32.products == 1
    assert torch.equal(emulated, round_to_tf32(a) @ round_to_tf32(b))
    assert relative_error(a @ b, exact) < 1e-6
    assert 1e-5 < relative_error(emulated, exact) < 1e-3


@pytest.mark.parametrize(
    "product",
    [
        lambda a, b, c: a @ b,  # mm
        lambda a, b, c: torch.matmul(a.expand(3, *a.shape), b),  # matmul, broadcast: one mm of the stacked rows
        lambda a, b, c: a.expand(3, *a.shape) @ b.expand(3, *b.shape),  # bmm
        lambda a, b, c: torch.nn.functional.linear(a, b.T, c),  # addmm
        lambda a, b, c: torch.addmm(c, a, b, beta=0.5),
        lambda a, b, c: torch.baddbmm(c.expand(2, 1, -1), a.expand(2, *a.shape), b.expand(2, *b.shape)),
        lambda a, b, c: torch.einsum("ij,jk->ik", a, b),
        lambda a, b, c: a @ b[:, 0],  # mv
        lambda a, b, c: a[0] @ b[:, 0],  # dot
    ],
)
def test_every_float32_product_is_rounded_and_no_float64_one(product):
    generator = torch.Generator().manual_seed(1)
    a, b, c = torch.randn(8, 16, generator=generator), torch.randn(16, 4, generator=generator), torch.randn(4)
    with EmulatedTF32() as tf32:
        emulated = product(a, b, c)
        as_float64 = product(a.double(), b.double(), c.double())
    assert tf32.products == 1
    assert torch.equal(emulated, product(round_to_tf32(a), round_to_tf32(b), c))  # the added input c not rounded
    assert not torch.equal(emulated, product(a, b, c))
    assert torch.equal(as_float64, product(a.double(), b.double(), c.double()))


def test_backward_products_are_rounded_too():
    """The gradients of a @ b, computed inside the mode, are the products of rounded operands: two more."""
    generator = torch.Generator().manual_seed(2)
    a = torch.randn(8, 16, generator=generator, requires_grad=True)
    b = torch.randn(16, 4, generator=generator, requires_grad=True)
    upstream = torch.randn(8, 4, generator=generator)
    with EmulatedTF32() as tf32:
        (a @ b).backward(upstream)
    assert tf32.products == 3
    assert torch.equal(a.grad, round_to_tf32(upstream) @ round_to_tf32(b.detach()).T)
    assert torch.equal(b.grad, round_to_tf32(a.detach()).T @ round_to_tf32(upstream))


UCI_CELLS = [("boston", "gpnet", 100), ("boston", "fbnn", 500), ("concrete", "gpnet", 100), ("concrete", "fbnn", 500)]
UCI_STEPS = 5  # at config.yaml's sizes a step costs ~0.1-0.5 s (FBNN-500 most); more steps: benchmarks/tf32.py
PRETRAIN_STEPS = 20  # float64, shared by both ways: the start, not what is compared (config.yaml: 1000)
SE_FRACTION = 0.05  # the most TF32 may move a metric, in standard errors of the paper's cell
SNELSON_STEPS = 100  # each Snelson run's steps (config.yaml: 40000)


@pytest.mark.parametrize(("dataset", "method", "M"), UCI_CELLS)
def test_tf32_moves_uci_metrics_by_under_5_percent_of_the_paper_s_standard_error(
    study_config, shared_data, tmp_path, dataset, method, M
):
    """``dtype: mixed`` on split 0 at the study's sizes, with and without TF32's rounding of the float32
    feature products: test RMSE and log-likelihood within SE_FRACTION of the paper cell's standard error."""
    settings = run_settings(
        study_config,
        dataset,
        method=method,
        M=M,
        dtype="mixed",
        iterations=UCI_STEPS,
        eval_every=UCI_STEPS,
        pretrain_iterations=PRETRAIN_STEPS,
    )
    split = study_split(study_config, dataset, 0, shared_data / dataset)
    results, rounded = train_with_and_without_tf32({0: split}, settings, tmp_path)
    assert rounded > 0 and results["float32"][0]["status"] == results["tf32"][0]["status"] == "ok"
    for metric in ("rmse", "test_ll"):
        paper = paper_table(metric).set_index(["dataset", "method", "M"]).loc[(dataset, method, M)]
        moved = abs(results["tf32"][0][metric] - results["float32"][0][metric])
        assert 0 < moved <= SE_FRACTION * paper["se"], (metric, moved, paper["se"])  # 0: TF32 changed nothing


def snelson_evidence(study_config, shared_data, folder) -> dict[str, Evidence]:
    """Snelson's runs (split 0, every method and M of the experiment) trained SNELSON_STEPS steps under
    ``mixed`` without and with TF32 (SVGP, all float64, once for both), and the exact GP under pretrained
    hyperparameters: each way's evidence."""
    split = study_split(study_config, "snelson", 0, shared_data / "snelson")
    runs, predictions = {"float32": [], "tf32": []}, {"float32": [], "tf32": []}
    reference = None
    for method, Ms in study_config["experiments"]["snelson"]["methods"].items():
        for M in Ms:
            settings = run_settings(
                study_config,
                "snelson",
                method=method,
                M=M,
                dtype="mixed",
                iterations=SNELSON_STEPS,
                eval_every=SNELSON_STEPS,
            )
            out = folder / f"{method}{M}"
            if issubclass(METHODS[method], InferenceNetworkMethod):
                results, rounded = train_with_and_without_tf32({0: split}, settings, out)
                assert rounded > 0
                folders = {way: out / way / "split0" for way in results}
            else:  # nothing in float32 to round: one run serves both ways
                once = train_splits({0: split}, settings, {0: out}, out / "checkpoint.pt")
                results, folders = dict.fromkeys(runs, once), dict.fromkeys(runs, out)
            labels = {"experiment": "snelson", "dataset": "snelson", "method": method, "M": M, "split": 0}
            for way, result in results.items():
                runs[way].append({**labels, **result[0]})
                predictions[way].append(pd.read_csv(folders[way] / "predictions.csv").assign(method=method, M=M))
            if reference is None and settings.pretrain:
                reference = exact_reference(split, pretrain_splits({0: split}, settings)[0], settings)
    x_train = split.original_x(split.x_train)[:, 0]
    return {
        way: Evidence(
            pd.DataFrame(runs[way]), {"snelson": Posterior("snelson", pd.concat(predictions[way]), reference, x_train)}
        )
        for way in runs
    }


def test_snelson_claims_keep_their_verdicts_under_tf32(study_config, shared_data, tmp_path):
    """Every check of the Snelson claims, measured on short runs under ``mixed`` (not the study's verdicts:
    it trains 40K steps), gives the same verdict with TF32's rounding as without."""
    claims = [claim for claim in load_claims() if claim.experiment == "snelson"]
    evidence = snelson_evidence(study_config, shared_data, tmp_path)
    float32, tf32 = (evaluate_claims(claims, evidence[way]) for way in ("float32", "tf32"))
    print(
        pd.concat(
            [
                float32[["claim", "subject", "measure", "value", "threshold", "verdict"]],
                tf32[["value", "verdict"]].add_prefix("tf32_"),
            ],
            axis=1,
        ).to_string()
    )
    assert set(float32["verdict"]) <= {PASS, FAIL} and list(tf32["verdict"]) == list(float32["verdict"])
    assert (tf32["value"] != float32["value"]).any()  # TF32 changed some number
