"""One run: a method trained on one split, evaluated on its test set, written to a folder."""

import csv
import logging
import traceback
from pathlib import Path

import torch
from torch import Tensor

from gpstudy.data import Split
from gpstudy.io import atomic_path, write_json
from gpstudy.kernels import RBF
from gpstudy.likelihoods import GaussianLikelihood
from gpstudy.methods import Method, build_method
from gpstudy.metrics import rmse, average_log_likelihood
from gpstudy.pretrain import hyperparameters_to_dict, load_hyperparameters, pretrain_hyperparameters
from gpstudy.training.fit import fit
from gpstudy.training.settings import RunSettings

log = logging.getLogger(__name__)

PREDICT_CHUNK = 4096  # test points predicted at a time (bounds memory on large test sets)
INITIAL_HYPERPARAMETERS = {"lengthscale": 1.0, "variance": 1.0, "noise_variance": 0.1}  # STUDY.md
CHECKPOINT = "checkpoint.pt"  # inside the run folder; removed when the run finishes


@torch.no_grad()
def predict(method: Method, x: Tensor) -> tuple[Tensor, Tensor]:
    """Predictive mean and variance of y ``[n]`` at ``x`` ``[n, D]``, in chunks."""
    parts = [method.predict(chunk) for chunk in x.split(PREDICT_CHUNK)]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def train_split(split: Split, settings: RunSettings, out_dir: Path, hyperparameters: dict | None = None) -> dict:
    """Train ``settings.method`` on ``split``; return the run's metrics (also written to ``out_dir``).

    Kernel and noise start from ``hyperparameters`` when given (pretrained by an earlier step), else
    from pretraining when ``settings.pretrain``, else from STUDY.md's initial values.
    ``out_dir`` receives ``metrics.json``, ``learning_curve.csv`` and, while training, a checkpoint
    from which an interrupted run resumes.
    """
    device, dtype = settings.torch_device(), settings.torch_dtype()
    tensors = [torch.as_tensor(a, dtype=dtype, device=device) for a in
               (split.x_train, split.y_train, split.x_test, split.y_test)]
    x_train, y_train, x_test, y_test = tensors
    generator = torch.Generator(device=device).manual_seed(settings.seed)
    kernel = RBF(x_train.shape[-1], dtype=dtype).to(device)
    likelihood = GaussianLikelihood(dtype=dtype).to(device)
    load_hyperparameters(kernel, likelihood, hyperparameters or INITIAL_HYPERPARAMETERS)
    if hyperparameters is None and settings.pretrain:
        pretrain_hyperparameters(x_train, y_train, kernel, likelihood, subset_size=settings.pretrain_subset,
                                 iterations=settings.pretrain_iterations, lr=settings.pretrain_lr,
                                 generator=generator)
    method = build_method(settings.method, x_train, y_train, kernel, likelihood,
                          settings.method_config(x_train.shape[0], split.x_mean, split.x_std), generator).to(device)

    def evaluate() -> dict[str, float]:
        mean, var = predict(method, x_test)
        return {"rmse": rmse(mean, y_test, split.y_std), "test_ll": average_log_likelihood(mean, var, y_test, split.y_std)}

    out_dir.mkdir(parents=True, exist_ok=True)
    curve, seconds = fit(method, x_train, y_train, iterations=settings.iterations, batch_size=settings.batch_size,
                         lr=settings.lr, generator=generator, evaluate=evaluate, eval_every=settings.eval_every,
                         checkpoint=out_dir / CHECKPOINT, checkpoint_every=settings.checkpoint_every)
    write_learning_curve(out_dir / "learning_curve.csv", curve)
    metrics = {**curve[-1], "iterations": settings.iterations, "seconds": seconds, "device": str(device),
               "seed": settings.seed, "status": "ok",
               "hyperparameters": hyperparameters_to_dict(kernel, likelihood)}
    del metrics["iteration"], metrics["objective"]
    return metrics


def train_run(split: Split, settings: RunSettings, out_dir: Path, labels: dict,
              hyperparameters: dict | None = None) -> dict:
    """:func:`train_split`, recording a failure as a metrics file with its status instead of raising.

    ``labels`` (dataset, method, M, split, ...) are written into ``metrics.json`` with the results.
    """
    try:
        metrics = train_split(split, settings, out_dir, hyperparameters)
        (out_dir / CHECKPOINT).unlink(missing_ok=True)
    except Exception as error:  # a failed run is a row with its status, not a hole in the study
        log.error("run %s failed:\n%s", labels, traceback.format_exc())
        metrics = {"rmse": float("nan"), "test_ll": float("nan"), "iterations": settings.iterations,
                   "seconds": float("nan"), "device": str(settings.torch_device()), "seed": settings.seed,
                   "status": f"failed: {type(error).__name__}: {error}"}
    metrics = {**labels, **metrics}
    write_json(out_dir / "metrics.json", metrics)
    return metrics


def write_learning_curve(path: Path, curve: list[dict[str, float]]) -> None:
    """Write the learning curve as CSV, atomically."""
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(curve[0]))
        writer.writeheader()
        writer.writerows(curve)
