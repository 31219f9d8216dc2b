"""One run: a method trained on one split, evaluated on its test set, written to a folder."""

import logging
import traceback
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from gpstudy.data import Split
from gpstudy.io import write_csv, write_json
from gpstudy.kernels import RBF
from gpstudy.likelihoods import GaussianLikelihood
from gpstudy.methods import Method, MethodConfig, build_method
from gpstudy.metrics import average_log_likelihood, rmse
from gpstudy.pretrain import hyperparameters_to_dict, load_hyperparameters, pretrain_hyperparameters
from gpstudy.training.fit import fit
from gpstudy.training.settings import RunSettings

log = logging.getLogger(__name__)

PREDICT_CHUNK = 4096  # test points predicted at a time (bounds memory on large test sets)
INITIAL_HYPERPARAMETERS = {"lengthscale": 1.0, "variance": 1.0, "noise_variance": 0.1}  # STUDY.md
CHECKPOINT = "checkpoint.pt"  # inside the run folder; removed when the run finishes


class Problem:
    """A split's tensors on the run's device, with a fresh kernel and likelihood."""

    def __init__(self, split: Split, settings: RunSettings, hyperparameters: dict):
        device, dtype = settings.torch_device(), settings.torch_dtype()
        self.split, self.device = split, device
        self.x_train, self.y_train, self.x_test, self.y_test = (
            torch.as_tensor(a, dtype=dtype, device=device)
            for a in (split.x_train, split.y_train, split.x_test, split.y_test))
        self.kernel = RBF(self.x_train.shape[-1], dtype=dtype).to(device)
        self.likelihood = GaussianLikelihood(dtype=dtype).to(device)
        load_hyperparameters(self.kernel, self.likelihood, hyperparameters)


def pretrain_split(split: Split, settings: RunSettings) -> dict:
    """Exact-GP hyperparameter pretraining on a random subset (STUDY.md), seeded by the run's seed."""
    problem = Problem(split, settings, INITIAL_HYPERPARAMETERS)
    generator = torch.Generator(device=problem.device).manual_seed(settings.seed)
    pretrain_hyperparameters(problem.x_train, problem.y_train, problem.kernel, problem.likelihood,
                             subset_size=settings.pretrain_subset, iterations=settings.pretrain_iterations,
                             lr=settings.pretrain_lr, generator=generator)
    return hyperparameters_to_dict(problem.kernel, problem.likelihood)


@torch.no_grad()
def predict(method: Method, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Predictive mean, latent variance and variance of y ``[n]`` at ``x`` ``[n, D]``, in chunks."""
    parts = []
    for chunk in x.split(PREDICT_CHUNK):
        mean, var_f = method.predict_f(chunk)
        parts.append((mean, var_f, method.likelihood.predictive(mean, var_f)[1]))
    return tuple(torch.cat(part) for part in zip(*parts))


def plot_predictions(method: Method, split: Split) -> pd.DataFrame:
    """Predictions at the split's plot inputs, in original units: x, mean, var_f, var_y."""
    x_plot = torch.as_tensor(split.x_plot, dtype=method.likelihood.noise_variance.dtype,
                             device=method.likelihood.noise_variance.device)
    mean, var_f, var_y = (t.cpu().numpy() for t in predict(method, x_plot))
    x = split.original_x(split.x_plot)
    columns = {"x": x[:, 0]} if x.shape[1] == 1 else {f"x{d}": x[:, d] for d in range(x.shape[1])}
    return pd.DataFrame({**columns, "mean": split.original_y(mean),
                         "var_f": var_f * split.y_std**2, "var_y": var_y * split.y_std**2})


def exact_reference(split: Split, hyperparameters: dict | None, settings: RunSettings) -> pd.DataFrame:
    """The exact GP posterior at the split's plot inputs (Figure 4's dashes) under fixed
    hyperparameters (None: STUDY.md's initial values)."""
    problem = Problem(split, settings, hyperparameters or INITIAL_HYPERPARAMETERS)
    generator = torch.Generator(device=problem.device).manual_seed(settings.seed)
    config = MethodConfig(M=0, n_train=problem.x_train.shape[0])
    method = build_method("exact", problem.x_train, problem.y_train, problem.kernel, problem.likelihood,
                          config, generator)
    return plot_predictions(method, split)


def train_split(split: Split, settings: RunSettings, out_dir: Path, hyperparameters: dict | None = None) -> dict:
    """Train ``settings.method`` on ``split``; return the run's metrics.

    Kernel and noise start from ``hyperparameters`` when given (pretrained by an earlier step), else
    from :func:`pretrain_split` when ``settings.pretrain``, else from STUDY.md's initial values.
    ``out_dir`` receives ``learning_curve.csv``, ``predictions.csv`` when the split has plot inputs,
    and, while training, a checkpoint from which an interrupted run resumes.
    """
    if hyperparameters is None:
        hyperparameters = pretrain_split(split, settings) if settings.pretrain else INITIAL_HYPERPARAMETERS
    problem = Problem(split, settings, hyperparameters)
    generator = torch.Generator(device=problem.device).manual_seed(settings.seed)
    method = build_method(settings.method, problem.x_train, problem.y_train, problem.kernel, problem.likelihood,
                          settings.method_config(problem.x_train.shape[0], split.x_mean, split.x_std),
                          generator).to(problem.device)

    def evaluate() -> dict[str, float]:
        mean, _, var_y = predict(method, problem.x_test)
        return {"rmse": rmse(mean, problem.y_test, split.y_std),
                "test_ll": average_log_likelihood(mean, var_y, problem.y_test, split.y_std)}

    out_dir.mkdir(parents=True, exist_ok=True)
    curve, seconds = fit(method, problem.x_train, problem.y_train, iterations=settings.iterations,
                         batch_size=settings.batch_size, lr=settings.lr, generator=generator, evaluate=evaluate,
                         eval_every=settings.eval_every, checkpoint=out_dir / CHECKPOINT,
                         checkpoint_every=settings.checkpoint_every)
    write_csv(out_dir / "learning_curve.csv", pd.DataFrame(curve))
    if split.x_plot is not None:
        write_csv(out_dir / "predictions.csv", plot_predictions(method, split))
    final = curve[-1]
    return {"rmse": final["rmse"], "test_ll": final["test_ll"], "iterations": settings.iterations,
            "seconds": seconds, "device": str(problem.device), "seed": settings.seed, "status": "ok",
            "hyperparameters": hyperparameters_to_dict(problem.kernel, problem.likelihood)}


def train_run(split: Split, settings: RunSettings, out_dir: Path, labels: dict,
              hyperparameters: dict | None = None) -> dict:
    """:func:`train_split`, writing ``metrics.json``; a failure is recorded with its status, not raised.

    ``labels`` (experiment, dataset, method, M, split) are written into ``metrics.json`` with the results.
    """
    try:
        metrics = train_split(split, settings, out_dir, hyperparameters)
        (out_dir / CHECKPOINT).unlink(missing_ok=True)
    except Exception as error:  # a failed run is a row with its status, not a hole in the study
        log.error("run %s failed:\n%s", labels, traceback.format_exc())
        metrics = {"rmse": np.nan, "test_ll": np.nan, "iterations": settings.iterations, "seconds": np.nan,
                   "device": str(settings.torch_device()), "seed": settings.seed,
                   "status": f"failed: {type(error).__name__}: {error}"}
    metrics = {**labels, **metrics}
    write_json(out_dir / "metrics.json", metrics)
    return metrics
