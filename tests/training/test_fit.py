"""The training loop: batches of splits, checkpoint and bit-identical resume, failures recorded as rows; what
pretraining and the exact GP log."""

import json
import logging
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

from gpstudy.data import Split
from gpstudy.kernels import RBF
from gpstudy.likelihoods import GaussianLikelihood
from gpstudy.methods import METHODS, compile_problem
from gpstudy.study.settings import SettingsError
from gpstudy.training import BatchSampler, exact_reference, pretrain_splits, progress, run_splits, train_splits
from gpstudy.training.fit import step_as_symbol_supported
from gpstudy.training.pretrain import load_hyperparameters, readable_hyperparameters
from gpstudy.training.run import SplitsProblem, method_config


def toy_split(n=60, n_test=20, d=2, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, size=(n + n_test, d))
    y = np.sin(2 * x[:, 0]) + 0.3 * x[:, -1] + 0.1 * rng.normal(size=n + n_test)
    x_mean, x_std = x[:n].mean(0), x[:n].std(0)
    return Split((x[:n] - x_mean) / x_std, y[:n], (x[n:] - x_mean) / x_std, y[n:], x_mean, x_std, 0.0, 2.0 + seed, {})


def folders(root, splits):
    return {s: root / f"split{s}" for s in splits}


def test_batch_sampler_visits_every_point_once_per_epoch():
    sampler = BatchSampler(10, 3, torch.Generator().manual_seed(0), torch.device("cpu"))
    first_epoch = torch.cat([sampler.next() for _ in range(3)])
    assert sorted(first_epoch.tolist()) == sorted(set(first_epoch.tolist())) and len(first_epoch) == 9
    whole = BatchSampler(10, 50, torch.Generator().manual_seed(0), torch.device("cpu"))
    assert whole.next().tolist() == list(range(10))


def test_batch_sampler_of_splits_shuffles_each_with_its_own_generator():
    batch = BatchSampler(10, 3, [torch.Generator().manual_seed(s) for s in (4, 7)], torch.device("cpu"))
    alone = BatchSampler(10, 3, torch.Generator().manual_seed(7), torch.device("cpu"))
    for _ in range(5):
        indices = batch.next()
        assert indices.shape == (2, 3) and torch.equal(indices[1], alone.next())


@pytest.mark.parametrize("method", sorted(set(METHODS) - {"exact"}))
def test_split_trained_in_a_batch_equals_the_split_trained_alone(tmp_path, method, settings_for):
    splits = {s: toy_split(seed=s) for s in range(3)}
    options = {"hidden_units": 16, "measurement": "noisy", "mean_basis": 5}  # small, for the methods that have them
    network = {key: value for key, value in options.items() if key in METHODS[method].options_schema}
    settings = settings_for(
        method=method,
        M=8,
        iterations=30,
        batch_size=16,
        pretrain=True,
        pretrain_iterations=5,
        eval_every=10,
        checkpoint_every=1000,
        **network,
    )
    batched = train_splits(splits, settings, folders(tmp_path / "batch", splits), tmp_path / "batch.pt")
    alone = train_splits({1: splits[1]}, settings, folders(tmp_path / "alone", [1]), tmp_path / "alone.pt")
    assert batched[1]["batch_splits"] == [0, 1, 2] and alone[1]["batch_splits"] == [1]
    for key in ("rmse", "test_ll"):
        assert batched[1][key] == pytest.approx(alone[1][key], rel=1e-8, abs=1e-8)
        assert len({batched[s][key] for s in splits}) == 3  # every split has numbers of its own
    np.testing.assert_allclose(
        np.array(batched[1]["hyperparameters"]["lengthscale"]),
        np.array(alone[1]["hyperparameters"]["lengthscale"]),
        rtol=1e-8,
        atol=1e-8,
    )
    curves = [pd.read_csv(tmp_path / run / "split1/learning_curve.csv") for run in ("batch", "alone")]
    np.testing.assert_allclose(
        curves[0][["objective", "rmse", "test_ll"]], curves[1][["objective", "rmse", "test_ll"]], rtol=1e-8, atol=1e-8
    )


def test_batch_parameters_equal_each_split_alone(settings_for):
    """The state after training, compared tensor by tensor (GPNet: network, kernel, likelihood)."""
    from gpstudy.methods import build_method
    from gpstudy.training import fit

    splits = {s: toy_split(seed=s) for s in range(3)}
    settings = settings_for(
        method="gpnet",
        M=8,
        iterations=25,
        batch_size=16,
        hidden_units=16,
        measurement="train",
        online_hyperparameters=True,
    )
    trained = {}
    for name, chosen in (("batch", splits), ("alone", {2: splits[2]})):
        problem = SplitsProblem(chosen, settings, None)
        method = build_method(
            "gpnet", problem, method_config(settings, problem.x_train.shape[-2], problem.x_mean, problem.x_std)
        )
        fit(
            method,
            problem.x_train,
            problem.y_train,
            iterations=25,
            batch_size=16,
            lr=0.01,
            generators=problem.generators,
            evaluate=dict,
            eval_every=100,
        )
        trained[name] = method.state_dict()
    for key, value in trained["alone"].items():
        torch.testing.assert_close(trained["batch"][key][2], value[0], rtol=1e-8, atol=1e-8, msg=key)


def test_splits_of_unequal_sizes_are_refused_with_their_sizes(tmp_path, settings_for):
    splits = {0: toy_split(), 1: toy_split(n=50, seed=1)}
    with pytest.raises(ValueError, match=r"equal train/test sizes.*split 1: train \(50, 2\)"):
        train_splits(
            splits, settings_for(method="svgp", M=4, iterations=2), folders(tmp_path, splits), tmp_path / "c.pt"
        )


def test_a_split_that_fails_becomes_a_failed_row_while_the_others_train_on(tmp_path, monkeypatch, settings_for):
    import gpstudy.methods.svgp as svgp

    real_predict = svgp.SVGP.predict_f

    def poisoned(self, x):  # split 1's predictions turn NaN from iteration 10 on, as after a lost Cholesky
        mean, var = real_predict(self, x)
        if self.steps >= 10:
            mean = torch.where(torch.arange(mean.shape[0]).unsqueeze(-1) == 1, torch.nan, mean)
        return mean, var

    monkeypatch.setattr(svgp.SVGP, "predict_f", poisoned)
    real_loss = svgp.SVGP.loss

    def counted(self, x, y, step, generators):  # the iteration the method is at
        self.steps = step
        return real_loss(self, x, y, step, generators)

    monkeypatch.setattr(svgp.SVGP, "loss", counted)
    monkeypatch.setattr(svgp.SVGP, "steps", 0, raising=False)
    splits = {s: toy_split(seed=s) for s in range(3)}
    settings = settings_for(method="svgp", M=8, iterations=30, batch_size=16, eval_every=10)
    labels = {s: {"dataset": "toy", "split": s} for s in splits}
    results = run_splits(splits, settings, folders(tmp_path, splits), tmp_path / "c.pt", labels)
    assert results[1]["status"].startswith("failed: non-finite") and "iteration 10" in results[1]["status"]
    assert results[0]["status"] == results[2]["status"] == "ok"
    assert np.isfinite([results[s]["rmse"] for s in (0, 2)]).all()
    assert json.loads((tmp_path / "split1/metrics.json").read_text())["status"] == results[1]["status"]


@pytest.mark.parametrize(
    "method, options",
    [
        ("svgp", {}),
        (
            "svgp",
            {
                "inducing_init": "training_points",
                "learn_inducing_inputs": False,  # L_Z factored once per session
                "online_hyperparameters": False,
            },
        ),
        ("gpnet", {"hidden_units": 16, "measurement": "train"}),
        ("svgp", {"checkpoint_every": None, "checkpoint_minutes": 1e-9}),  # by the clock: after every iteration
    ],
    ids=["svgp", "svgp_fixed_z", "gpnet", "svgp_by_time"],
)
def test_resume_after_a_crash_is_bit_identical(tmp_path, method, options, monkeypatch, settings_for):
    settings = settings_for(
        method=method, M=8, iterations=30, batch_size=16, eval_every=5, **{"checkpoint_every": 10, **options}
    )
    splits = {0: toy_split(), 1: toy_split(seed=1)}
    uninterrupted = train_splits(splits, settings, folders(tmp_path / "a", splits), tmp_path / "a.pt")

    import gpstudy.training.run as run_module

    real_metrics = run_module.task_metrics
    calls = {"n": 0}

    def crash_at_third_evaluation(*args):
        calls["n"] += 1
        if calls["n"] == 3:  # iteration 15: after the checkpoint of iteration 10 (by time: of 14)
            raise KeyboardInterrupt("killed")
        return real_metrics(*args)

    monkeypatch.setattr(run_module, "task_metrics", crash_at_third_evaluation)
    with pytest.raises(KeyboardInterrupt):
        train_splits(splits, settings, folders(tmp_path / "b", splits), tmp_path / "b.pt")
    assert (tmp_path / "b.pt").exists()
    monkeypatch.setattr(run_module, "task_metrics", real_metrics)
    resumed = train_splits(splits, settings, folders(tmp_path / "b", splits), tmp_path / "b.pt")
    for s in splits:
        for key in ("rmse", "test_ll", "hyperparameters"):
            assert resumed[s][key] == uninterrupted[s][key]
        curves = [
            pd.read_csv(tmp_path / run / f"split{s}/learning_curve.csv").drop(columns="seconds") for run in ("a", "b")
        ]
        pd.testing.assert_frame_equal(curves[0], curves[1])
        assert len(curves[0]) == 6


def test_an_error_that_is_not_the_methods_fails_the_job(tmp_path, settings_for):
    """Only a failure of the method itself is a failed row (tests/faults); anything else is raised."""
    settings = replace(
        settings_for(method="gpnet", M=4, iterations=3),
        options={**settings_for(method="gpnet", M=4).options, "measurement": "nowhere"},
    )  # past the config's validation
    with pytest.raises(ValueError, match="nowhere"):
        run_splits({0: toy_split()}, settings, {0: tmp_path}, tmp_path / "c.pt", {0: {"dataset": "toy"}})
    assert not (tmp_path / "metrics.json").exists()


def test_finished_run_leaves_metrics_and_no_checkpoint(tmp_path, settings_for):
    settings = settings_for(method="svgp", M=8, iterations=20, batch_size=16, eval_every=10, checkpoint_every=5)
    metrics = run_splits({0: toy_split()}, settings, {0: tmp_path / "run"}, tmp_path / "c.pt", {0: {"dataset": "toy"}})
    assert metrics[0]["status"] == "ok" and np.isfinite(metrics[0]["rmse"])
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["learning_curve.csv", "metrics.json"]
    assert not (tmp_path / "c.pt").exists()


def test_eager_training_runs_on_a_torch_without_compiler_config(tmp_path, monkeypatch, settings_for):
    """pyproject.toml allows torch 2.4, which has no ``torch.compiler.config`` (2.6 brought it, 2.7 its
    ``dynamic_sources``): eager training must not touch it, and compiled training goes without it."""
    monkeypatch.delattr(torch.compiler, "config", raising=False)  # absent already before torch 2.6
    assert not step_as_symbol_supported()
    settings = settings_for(method="svgp", M=8, iterations=4, batch_size=16, eval_every=2)
    metrics = run_splits({0: toy_split()}, settings, {0: tmp_path / "run"}, tmp_path / "c.pt", {0: {"dataset": "toy"}})
    assert metrics[0]["status"] == "ok" and np.isfinite(metrics[0]["rmse"])


def test_exact_reference_predicts_at_the_plot_inputs(settings_for):
    split = replace(toy_split(d=1), x_plot=np.linspace(-2, 2, 7)[:, None])
    reference = exact_reference(split, None, settings_for("exact", 1))
    assert list(reference.columns) == ["x", "mean", "var_f", "var_y"] and len(reference) == 7
    assert np.isfinite(reference.to_numpy()).all() and (reference["var_y"] > reference["var_f"]).all()


def test_a_pretraining_log_names_its_final_objective_and_hyperparameters(settings_for, caplog):
    caplog.set_level(logging.INFO, logger="gpstudy")
    settings = settings_for("exact", 1, pretrain_iterations=20, pretrain_subset=40)
    learned = pretrain_splits({0: toy_split(d=1)}, settings)[0]
    kernel, likelihood = RBF(1), GaussianLikelihood(0.1)
    load_hyperparameters(kernel, likelihood, learned)
    values = readable_hyperparameters(kernel, likelihood)
    [done] = [message for message in caplog.messages if message.startswith("pretraining done")]
    assert done.startswith("pretraining done: objective [")
    for name in ("lengthscale", "variance", "noise_variance"):
        assert f", {progress.format_values({name: [values[name]]})}" in done  # a batch of one split
    assert values["lengthscale"] != [1.0]  # learned, not the initial values


def test_an_exact_gp_log_names_its_objective_and_hyperparameters(settings_for, caplog):
    caplog.set_level(logging.INFO, logger="gpstudy")
    split = replace(toy_split(d=1), x_plot=np.linspace(-2, 2, 7)[:, None])
    exact_reference(split, None, settings_for("exact", 1))
    [line] = [message for message in caplog.messages if message.startswith("exact GP")]
    assert line.startswith("exact GP on 60 training points, posterior at 7 plot inputs: objective [")
    assert ", lengthscale [[1]], variance [1], noise_variance [" in line


def labelled_split(seed: int = 0) -> Split:
    """20 training and 10 test points of 2 inputs, labels in {0, 1, 2}."""
    rng = np.random.default_rng(seed)
    x, labels = rng.normal(size=(30, 2)), rng.integers(0, 3, size=30).astype(float)
    return Split(x[:20], labels[:20], x[20:], labels[20:], np.zeros(2), np.ones(2), 0.0, 1.0, {})


def test_a_softmax_run_evaluates_by_monte_carlo_the_same_each_time(tmp_path, settings_for):
    settings = settings_for(
        "autogp",
        4,
        likelihood="softmax",
        likelihood_options={"classes": 3},
        iterations=6,
        batch_size=10,
        eval_every=3,
        samples=5,
    )
    runs = [
        train_splits(
            {0: labelled_split(0), 1: labelled_split(1)},
            settings,
            folders(tmp_path / run, [0, 1]),
            tmp_path / f"{run}.pt",
        )
        for run in ("a", "b")
    ]
    for s in (0, 1):
        assert runs[0][s]["status"] == "ok" and all(
            runs[0][s][key] == runs[1][s][key] for key in ("error_rate", "test_ll")
        )
    assert 0 <= runs[0][0]["error_rate"] <= 1 and runs[0][0]["test_ll"] < 0


def test_predictions_in_chunks_keep_every_latent(monkeypatch, settings_for):
    """A method of several latents (AutoGP, softmax over 3 classes) predicts ``[*batch, n, Q]`` chunk by chunk."""
    import gpstudy.training.run as run_module

    split = labelled_split()
    settings = settings_for("autogp", 4, likelihood="softmax", likelihood_options={"classes": 3})
    problem = SplitsProblem({0: split, 1: split}, settings, None)
    method = run_module.build_method("autogp", problem, run_module.method_config(settings, 20))
    whole = run_module.predict(method, problem.x_test)
    monkeypatch.setattr(method, "predict_chunk", 3)
    chunked = run_module.predict(method, problem.x_test)
    assert whole[0].shape == (2, 10, 3)
    for a, b in zip(whole, chunked):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("method", ["svgp", "gpnet", "fbnn"])
def test_a_compiled_method_trains_as_the_eager_one(tmp_path, settings_for, method):
    """``torch_compile: true`` changes the speed, not the numbers: two splits of each method
    configs/paper-cpu.yaml compiles, learning curves and hyperparameters equal to eager's to 1e-8
    relative (the issue's bound). Skipped where gpstudy refuses to compile the method on this torch."""
    from torch._dynamo.utils import counters

    if problem := compile_problem(method):
        pytest.skip(problem)
    torch._dynamo.reset()
    counters.clear()
    splits = {s: toy_split(seed=s) for s in range(2)}
    runs = {}
    for compiled in (False, True):
        settings = settings_for(method=method, M=8, iterations=20, batch_size=16, eval_every=10, torch_compile=compiled)
        folder = tmp_path / str(compiled)
        # compiled once, step included (a torch before 2.7 compiles again at step 2: fit's docstring)
        with torch._dynamo.config.patch(error_on_recompile=step_as_symbol_supported()):
            runs[compiled] = train_splits(splits, settings, folders(folder, splits), folder / "c.pt")
        assert (counters["stats"]["unique_graphs"] > 0) == compiled  # the loss was compiled, and only when asked
    for s in splits:
        for key in ("rmse", "test_ll"):
            assert runs[True][s][key] == pytest.approx(runs[False][s][key], rel=1e-8)
        np.testing.assert_allclose(
            runs[True][s]["hyperparameters"]["lengthscale"], runs[False][s]["hyperparameters"]["lengthscale"], rtol=1e-8
        )
        curves = [pd.read_csv(tmp_path / str(compiled) / f"split{s}/learning_curve.csv") for compiled in (False, True)]
        np.testing.assert_allclose(
            curves[1][["objective", "rmse", "test_ll"]], curves[0][["objective", "rmse", "test_ll"]], rtol=1e-8
        )


def test_a_job_refuses_to_compile_a_method_its_torch_cannot(tmp_path, monkeypatch, settings_for):
    """The job's own torch is checked too (under ``--sdm conda`` it is not the plan's): below the method's
    ``compile_needs_torch`` the run raises before training, a fault of the environment, not a failed row."""
    needed = METHODS["gpnet"].compile_needs_torch
    major, minor = map(int, needed.split("."))
    monkeypatch.setattr(torch, "__version__", f"{major}.{minor - 1}.9")
    settings = settings_for(method="gpnet", M=8, iterations=4, batch_size=16, eval_every=2, torch_compile=True)
    with pytest.raises(SettingsError, match=rf"needs torch >= {needed} for method 'gpnet' .* upgrade torch"):
        run_splits({0: toy_split()}, settings, {0: tmp_path / "run"}, tmp_path / "c.pt", {0: {}})
    assert not (tmp_path / "run" / "metrics.json").exists() and not (tmp_path / "c.pt").exists()
