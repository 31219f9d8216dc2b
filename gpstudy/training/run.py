"""A batch of runs: one method trained on several splits of a data set at once, each split evaluated on
its own test set and written to its own folder."""

import hashlib
import json
import logging
import traceback
from collections.abc import Mapping
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from gpstudy import generators as draws
from gpstudy.data import DataError, Split, load_split, non_finite
from gpstudy.io import read_json, source_digest, write_csv, write_json
from gpstudy.kernels import Kernel, build_kernel
from gpstudy.likelihoods import LIKELIHOODS, Likelihood, build_likelihood
from gpstudy.linalg import CholeskyError
from gpstudy.methods import Method, MethodConfig, Problem, build_method
from gpstudy.metrics import TASK_METRICS, task_metrics
from gpstudy.numerics import DTYPES
from gpstudy.runtime.devices import gpu_slot
from gpstudy.runtime.environment import run_environment
from gpstudy.runtime.flags import set_linalg_library, set_tf32
from gpstudy.study.settings import RunSettings
from gpstudy.training.finished import finished_path, job_identity, keep_outputs, restore_outputs
from gpstudy.training.fit import fit
from gpstudy.training.pretrain import (
    hyperparameters_to_dict,
    load_hyperparameters,
    negative_lml_per_point,
    pretrain_hyperparameters,
    readable_hyperparameters,
    stack_hyperparameters,
    unstack_hyperparameters,
)
from gpstudy.training.progress import format_values

log = logging.getLogger(__name__)

METHOD_FAILURES = (CholeskyError,)  # errors of the method itself: failed rows (any other error fails the job)
RUN_FILES = ("metrics.json", "learning_curve.csv", "predictions.csv")  # what a run writes in its folder
CHECKPOINT_SCHEDULE = ("checkpoint_minutes", "checkpoint_every")  # settings that change when, not what, is saved
# the settings pretrain_splits reads: the pretraining job's params (what reruns it) hold these alone
PRETRAINING_READS = (
    "seed",
    "kernel",
    "kernel_options",
    "initial_lengthscale",
    "likelihood",
    "likelihood_options",
    "device",
    "dtype",
    "tf32",
    "pretrain_iterations",
    "pretrain_subset",
    "pretrain_lr",
)
PRETRAIN_THREADS = 1  # torch CPU threads of a pretraining job (rules/pretrain.smk's threads): they set its rounding


class SplitsProblem(Problem):
    """Splits of one data set stacked along a leading split dimension on the run's device, with one
    kernel and likelihood per split (the settings' by name) and one generator per split (seeded
    ``settings.seed + s``): the ``Problem`` a method is built on, with the splits' test sets.

    Args:
        splits: split index -> split; all must have the same training and test sizes.
        settings: the run's settings.
        hyperparameters: split index -> kernel and likelihood to start from (``hyperparameters_to_dict``);
            None: STUDY.md's initial values (lengthscale 1, variance 1, noise 0.1).
    """

    def __init__(self, splits: dict[int, Split], settings: RunSettings, hyperparameters: dict[int, dict] | None):
        for s, split in splits.items():
            if problem := non_finite(split):  # bad input fails the job; it is no failure of the method
                raise DataError(f"split {s}: {problem}")
        _check_equal_sizes(splits)
        device, dtype = torch.device(settings.device), DTYPES[settings.dtype][0]
        set_tf32(settings.tf32)  # this process's float32 precision on CUDA, as the settings say
        set_linalg_library(device)  # cuSOLVER for this process's factorizations on CUDA
        self.splits, self.device = list(splits.values()), device
        x_train, y_train, self.x_test, self.y_test, self.y_std = (
            torch.as_tensor(_stack(self.splits, name), dtype=dtype, device=device)
            for name in ("x_train", "y_train", "x_test", "y_test", "y_std")
        )
        self.x_mean, self.x_std = _stack(self.splits, "x_mean"), _stack(self.splits, "x_std")
        batch_shape = (len(splits),)
        kernel = initial_kernel(settings, x_train.shape[-1], batch_shape)
        likelihood = initial_likelihood(settings, batch_shape)
        if hyperparameters is not None:
            load_hyperparameters(kernel, likelihood, stack_hyperparameters([hyperparameters[s] for s in splits]))
        self.seeds = [settings.seed + s for s in splits]
        super().__init__(x_train, y_train, kernel, likelihood, self.new_generators())

    def new_generators(self) -> list[torch.Generator]:
        """One generator per split, seeded ``settings.seed + s``, at the start of its stream."""
        return draws.new_generators(self.seeds, self.device)


def initial_kernel(settings: RunSettings, input_dim: int, batch_shape: tuple[int, ...] = ()) -> Kernel:
    """The run's prior kernel at its start, on the run's dtype and device: lengthscales ``initial_lengthscale``,
    variance 1 (STUDY.md)."""
    return build_kernel(
        settings.kernel,
        input_dim,
        settings.kernel_options,
        DTYPES[settings.dtype][0],
        batch_shape,
        settings.initial_lengthscale,
    ).to(torch.device(settings.device))


def initial_likelihood(settings: RunSettings, batch_shape: tuple[int, ...] = ()) -> Likelihood:
    """The run's likelihood at its start (STUDY.md's initial noise), on the run's dtype and device."""
    return build_likelihood(
        settings.likelihood, settings.likelihood_options, DTYPES[settings.dtype][0], batch_shape
    ).to(torch.device(settings.device))


def method_config(
    settings: RunSettings, n_train: int, x_mean: np.ndarray | None = None, x_std: np.ndarray | None = None
) -> MethodConfig:
    """The method's config of the run: M, ``n_train``, its options and the network's feature dtype (the run's
    ``dtype``); a ``box`` option moves from the data's units to standardized inputs, by each split's ``x_mean``
    and ``x_std`` ``[*batch, D]``."""
    options = dict(settings.options)
    if options.get("box") is not None:
        if x_mean is None or x_std is None:
            raise ValueError("a box option needs the splits' x_mean and x_std to standardize it")
        options["box"] = tuple(tuple(((np.asarray(bound) - x_mean) / x_std).tolist()) for bound in options["box"])
    return MethodConfig(M=settings.M, n_train=n_train, options=options, feature_dtype=DTYPES[settings.dtype][1])


def _stack(splits: list[Split], name: str) -> np.ndarray:
    """A field of every split, stacked along a new leading split dimension."""
    return np.stack([getattr(split, name) for split in splits])


def _check_equal_sizes(splits: dict[int, Split]) -> None:
    """Splits trained as one batch must have equal train and test sizes (they do under every protocol)."""
    sizes = {s: (split.x_train.shape, split.x_test.shape) for s, split in splits.items()}
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"split {s}: train {train}, test {test}" for s, (train, test) in sizes.items())
        raise ValueError(
            f"splits trained as one batch need equal train/test sizes; got {listed} "
            "(train them in separate batches: splits_per_job: 1)"
        )


def pretrain_splits(splits: dict[int, Split], settings: RunSettings, checkpoint: Path | None = None) -> dict[int, dict]:
    """Exact-GP hyperparameter pretraining on a random subset of each split (STUDY.md), as one batch; of
    ``settings`` it reads ``PRETRAINING_READS`` alone. Stopped by a signal, it saves its state to
    ``checkpoint`` (when given), from which a rerun resumes (:func:`gpstudy.training.pretrain.pretrain_hyperparameters`;
    a checkpoint of other settings, splits or code is discarded); the checkpoint is removed once it is done."""
    problem = SplitsProblem(splits, settings, None)
    objective = pretrain_hyperparameters(
        problem.x_train,
        problem.y_train,
        problem.kernel,
        problem.likelihood,
        subset_size=settings.pretrain_subset,
        iterations=settings.pretrain_iterations,
        lr=settings.pretrain_lr,
        generators=problem.generators,
        checkpoint=checkpoint,
        fingerprint=pretraining_fingerprint(settings, splits),
    )
    log.info(
        "pretraining done: %s",
        format_values(
            {"objective": objective.tolist(), **readable_hyperparameters(problem.kernel, problem.likelihood)}
        ),
    )
    if checkpoint is not None:
        checkpoint.unlink(missing_ok=True)
    return dict(zip(splits, unstack_hyperparameters(hyperparameters_to_dict(problem.kernel, problem.likelihood))))


def pretrain_split(
    split: int, split_file: str | Path, reads: Mapping[str, Any], output: str | Path, checkpoint: str | Path
) -> None:
    """The pretrain rule's job (``scripts/pretrain.py``; ``gpstudy train`` runs it too): split ``split``, read from
    ``split_file``, pretrained alone (:func:`pretrain_splits`) with the settings ``reads``
    (:func:`pretraining_reads`; the exact GP's, its device among them), ``checkpoint`` its signalled state;
    its hyperparameters written to ``output``. Torch's CPU threads are the caller's (``PRETRAIN_THREADS``)."""
    hyperparameters = pretrain_splits({split: load_split(split_file)}, pretraining_settings(reads), Path(checkpoint))
    write_json(output, hyperparameters[split])


@torch.no_grad()
def predict(method: Method, x: Tensor) -> tuple[Tensor, Tensor]:
    """The latent predictive mean and variance ``[*batch, n]`` (several latents: ``[*batch, n, Q]``) at
    ``x`` ``[*batch, n, D]``, in chunks of ``method.predict_chunk`` points."""
    parts = [method.predict_f(chunk) for chunk in x.split(method.predict_chunk, dim=-2)]
    return tuple(torch.cat(part, dim=x.dim() - 2) for part in zip(*parts))  # the points' dimension


@torch.no_grad()
def plot_predictions(method: Method, splits: list[Split]) -> list[pd.DataFrame]:
    """Predictions of a regression at each split's plot inputs, in original units: x, mean, var_f, var_y."""
    like = method.likelihood.noise_variance
    x_plot = torch.as_tensor(_stack(splits, "x_plot"), dtype=like.dtype, device=like.device)
    mean, var_f = predict(method, x_plot)
    var_y = method.likelihood.predictive(mean, var_f)[1]
    frames = []
    for split, mean, var_f, var_y in zip(splits, *(t.cpu().numpy() for t in (mean, var_f, var_y))):
        x = split.original_x(split.x_plot)
        columns = {"x": x[:, 0]} if x.shape[1] == 1 else {f"x{d}": x[:, d] for d in range(x.shape[1])}
        frames.append(
            pd.DataFrame(
                {
                    **columns,
                    "mean": split.original_y(mean),
                    "var_f": var_f * split.y_std**2,
                    "var_y": var_y * split.y_std**2,
                }
            )
        )
    return frames


def exact_reference(split: Split, hyperparameters: dict | None, settings: RunSettings) -> pd.DataFrame:
    """The exact GP posterior at the split's plot inputs (Figure 4's dashes) under fixed
    hyperparameters (None: STUDY.md's initial values); ``settings`` give kernel, dtype and device."""
    problem = SplitsProblem({0: split}, settings, None if hyperparameters is None else {0: hyperparameters})
    method = build_method("exact", problem, MethodConfig(M=0, n_train=problem.x_train.shape[-2]))
    with torch.no_grad():
        objective = negative_lml_per_point(problem.x_train, problem.y_train, problem.kernel, problem.likelihood)
    log.info(
        "exact GP on %d training points, posterior at %d plot inputs: %s",
        split.x_train.shape[0],
        split.x_plot.shape[0],
        format_values(
            {"objective": objective.tolist(), **readable_hyperparameters(problem.kernel, problem.likelihood)}
        ),
    )
    return plot_predictions(method, problem.splits)[0]


def build_batch(
    splits: dict[int, Split], settings: RunSettings, hyperparameters: dict[int, dict] | None = None
) -> tuple[SplitsProblem, Method, dict[int, dict] | None]:
    """``settings.method`` built on the problem of ``splits``, untrained, on the run's device; with the problem
    and the hyperparameters its kernel and noise start from: ``hyperparameters`` when given, else
    :func:`pretrain_splits`' when ``settings.pretrain``, else None (STUDY.md's initial values)."""
    if hyperparameters is None and settings.pretrain:
        hyperparameters = pretrain_splits(splits, settings)
    problem = SplitsProblem(splits, settings, hyperparameters)
    method = build_method(
        settings.method, problem, method_config(settings, problem.x_train.shape[-2], problem.x_mean, problem.x_std)
    ).to(problem.device)
    return problem, method, hyperparameters


def train_splits(
    splits: dict[int, Split],
    settings: RunSettings,
    out_dirs: dict[int, Path],
    checkpoint: Path,
    hyperparameters: dict[int, dict] | None = None,
) -> dict[int, dict]:
    """Train ``settings.method`` on ``splits`` as one batch; return each split's metrics.

    Split s trains exactly as it would alone: its own kernel, likelihood, parameters and generator
    (seed ``settings.seed + s``), and a loss that is summed, never mixed, over splits. Kernel and
    noise start from ``hyperparameters`` when given (pretrained by an earlier step), else from
    :func:`pretrain_splits` when ``settings.pretrain``, else from STUDY.md's initial values. Each
    ``out_dirs[s]`` receives ``learning_curve.csv`` and, when the split has plot inputs,
    ``predictions.csv``. Each split's metrics carry ``M_effective``, the points the method used for M
    (fewer where the training set is smaller: ``Method.effective_M``), a regression's rmse_of_mean and
    worse_than_mean (:func:`against_the_mean`) and what the run was made with
    (``gpstudy.runtime.environment.run_environment``: device, versions, commit). While training, the batch's state
    goes to ``checkpoint``, from which an interrupted run resumes. A split whose objective or metrics
    become non-finite gets a failed status while the others train on.
    """
    problem, method, hyperparameters = build_batch(splits, settings, hyperparameters)

    def evaluate() -> dict[str, Tensor]:  # Monte Carlo predictives draw from fresh generators, not training's
        return task_metrics(
            method.likelihood, *predict(method, problem.x_test), problem.y_test, problem.y_std, problem.new_generators()
        )

    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    fingerprint = run_fingerprint(settings, splits, hyperparameters)
    curve, seconds = fit(
        method,
        problem.x_train,
        problem.y_train,
        iterations=settings.iterations,
        batch_size=settings.batch_size,
        lr=settings.lr,
        generators=problem.generators,
        evaluate=evaluate,
        eval_every=settings.eval_every,
        checkpoint=checkpoint,
        checkpoint_every=settings.checkpoint_every,
        checkpoint_minutes=settings.checkpoint_minutes,
        fingerprint=fingerprint,
        torch_compile=settings.torch_compile,
    )
    predictions = plot_predictions(method, problem.splits) if problem.splits[0].x_plot is not None else None
    readable = readable_hyperparameters(problem.kernel, problem.likelihood)
    metrics = TASK_METRICS[problem.likelihood.task]
    results = {}
    for index, s in enumerate(splits):
        split_curve = pd.DataFrame(
            [{**record, **{key: record[key][index] for key in ("objective", *metrics)}} for record in curve]
        )
        write_csv(out_dirs[s] / "learning_curve.csv", split_curve)
        if predictions is not None:
            write_csv(out_dirs[s] / "predictions.csv", predictions[index])
        final = split_curve.iloc[-1]
        results[s] = {
            "M_effective": method.effective_M,
            **data_sizes(splits[s]),
            **{metric: float(final[metric]) for metric in metrics},
            **(against_the_mean(splits[s], float(final["rmse"])) if "rmse" in metrics else {}),
            "iterations": settings.iterations,
            "seconds": seconds,
            **run_environment(problem.device),
            "dtype": settings.dtype,
            "seed": settings.seed + s,
            "batch_splits": list(splits),
            "status": _status(split_curve, ("objective", *metrics)),
            "hyperparameters": {name: values[index] for name, values in readable.items()},
        }
    return results


def against_the_mean(split: Split, rmse: float) -> dict[str, float | bool | None]:
    """A regression run's test ``rmse`` beside the baseline it must beat: rmse_of_mean, the test RMSE of predicting
    y's training mean at every test point, in y's original units as ``rmse`` is (``gpstudy.metrics.rmse``); and
    worse_than_mean, whether ``rmse`` exceeds it (a finished run of a method that did badly: a learning rate too
    large gives finite garbage), None where ``rmse`` is not finite (a failed run)."""
    y_train, y_test = split.original_y(split.y_train), split.original_y(split.y_test)
    baseline = float(np.sqrt(np.mean(np.square(y_test - y_train.mean()))))
    return {"rmse_of_mean": baseline, "worse_than_mean": bool(rmse > baseline) if np.isfinite(rmse) else None}


def data_sizes(split: Split) -> dict[str, int]:
    """What a run learned from: n_train and n_test (rows) and D (inputs, after any dropped features)."""
    return {"n_train": split.x_train.shape[0], "n_test": split.x_test.shape[0], "D": split.x_train.shape[1]}


def run_fingerprint(settings: RunSettings, splits: dict[int, Split], hyperparameters: dict[int, dict] | None) -> str:
    """What a checkpoint belongs to: the settings (the device by its type: a rerun on another GPU of the
    same kind resumes; not when checkpoints are taken, which changes no number), the splits' data, the
    starting hyperparameters and the package's code."""
    described = asdict(settings)
    for schedule in CHECKPOINT_SCHEDULE:
        described.pop(schedule)
    return _fingerprint(described, settings, splits, hyperparameters)


def pretraining_reads(settings: RunSettings) -> dict[str, Any]:
    """The settings pretraining reads (``PRETRAINING_READS``), by name: the pretraining job's params."""
    return {key: getattr(settings, key) for key in PRETRAINING_READS}


def pretraining_settings(reads: Mapping[str, Any]) -> RunSettings:
    """Settings for :func:`pretrain_splits` from the values it reads (:func:`pretraining_reads`), every other field
    None: it reads none of them (``tests/training/test_run.py`` changes each and sees the same hyperparameters)."""
    return RunSettings(**{**dict.fromkeys(field.name for field in fields(RunSettings)), **reads})


def pretraining_fingerprint(settings: RunSettings, splits: dict[int, Split]) -> str:
    """What a pretraining checkpoint belongs to: :func:`run_fingerprint` with the settings pretraining reads
    (``PRETRAINING_READS``) alone."""
    return _fingerprint(pretraining_reads(settings), settings, splits, None)


def _fingerprint(
    described: dict, settings: RunSettings, splits: dict[int, Split], hyperparameters: dict[int, dict] | None
) -> str:
    described = {**described, "device": torch.device(settings.device).type}
    return json.dumps(
        {
            "settings": described,
            "splits": {s: _digest(split) for s, split in splits.items()},
            "hyperparameters": hyperparameters,
            "code": source_digest(),
        },
        sort_keys=True,
        default=str,
    )


def _digest(split: Split) -> str:
    """The sha256 of a split's arrays: the data a checkpoint was trained on."""
    digest = hashlib.sha256()
    for values in (split.x_train, split.y_train, split.x_test, split.y_test):
        digest.update(np.ascontiguousarray(values).tobytes())
    return digest.hexdigest()


def _status(curve: pd.DataFrame, values: tuple[str, ...]) -> str:
    """ "ok", or the failure of a split whose objective or metrics (``values``) became non-finite."""
    finite = np.isfinite(curve[list(values)].to_numpy())
    if finite.all():
        return "ok"
    row = int(np.flatnonzero(~finite.all(axis=1))[0])
    names = ", ".join(name for name, ok in zip(values, finite[row]) if not ok)
    return f"failed: non-finite {names} at iteration {int(curve['iteration'].iloc[row])} (the method diverged)"


def run_splits(
    splits: dict[int, Split],
    settings: RunSettings,
    out_dirs: dict[int, Path],
    checkpoint: Path,
    labels: dict[int, dict],
    hyperparameters: dict[int, dict] | None = None,
) -> dict[int, dict]:
    """:func:`train_splits`, writing each split's ``metrics.json`` (after removing what an earlier run of
    these splits left in their folders). When the batch finished, its outputs are kept beside the
    checkpoint (:mod:`gpstudy.training.finished`) and the checkpoint is removed; a rerun of the same
    batch (same settings, data, start, code and labels) rewrites them from there without training.

    A failure of the method (``METHOD_FAILURES``: no jitter saved a Cholesky of any split) is recorded as
    each split's failed status, not raised; any other error (a fault of the machine: disk, checkpoint,
    device) is raised, so the job fails and a rerun retries it. ``labels[s]`` (experiment, dataset,
    method, M, split) are written into split s's ``metrics.json``.
    """
    for folder in out_dirs.values():
        for name in RUN_FILES:
            (folder / name).unlink(missing_ok=True)
    record = finished_path(checkpoint)
    identity = job_identity(run_fingerprint(settings, splits, hyperparameters), labels)
    if restore_outputs(record, identity, out_dirs):
        return {s: read_json(folder / "metrics.json") for s, folder in out_dirs.items()}
    try:
        results = train_splits(splits, settings, out_dirs, checkpoint, hyperparameters)
    except METHOD_FAILURES as error:  # a failed run is a row with its status, not a hole in the study
        log.error("runs %s failed:\n%s", list(labels.values()), traceback.format_exc())
        metrics = TASK_METRICS[LIKELIHOODS[settings.likelihood].task]
        results = {
            s: {
                **data_sizes(splits[s]),
                **dict.fromkeys(metrics, np.nan),
                **(against_the_mean(splits[s], np.nan) if "rmse" in metrics else {}),
                "iterations": settings.iterations,
                "seconds": np.nan,
                **run_environment(torch.device(settings.device)),
                "dtype": settings.dtype,
                "seed": settings.seed + s,
                "batch_splits": list(splits),
                "status": f"failed: {type(error).__name__}: {error}",
            }
            for s in splits
        }
    for s, metrics in results.items():
        results[s] = {**labels[s], **metrics}
        write_json(out_dirs[s] / "metrics.json", results[s])
    keep_outputs(record, identity, out_dirs, RUN_FILES)  # before the checkpoint goes: a kill between loses nothing
    checkpoint.unlink(missing_ok=True)
    return results


def run_job(
    split_files: dict[int, Path],
    settings: RunSettings,
    out_dirs: dict[int, Path],
    checkpoint: Path,
    labels: dict,
    hyperparameter_files: dict[int, Path] | None,
    *,
    jobs_per_gpu: int,
    gpu_lock_dir: str | Path,
) -> dict[int, dict]:
    """One training job: load the splits (and their pretrained hyperparameters, when given), take a
    free GPU slot when the settings ask for ``cuda`` (``gpstudy.runtime.devices.gpu_slot``: ``jobs_per_gpu`` and
    ``gpu_lock_dir``, the config's), then
    :func:`run_splits`. ``labels`` (experiment, dataset, method, M) go into every split's
    ``metrics.json`` with the split's index."""
    splits = {s: load_split(path) for s, path in split_files.items()}
    hyperparameters = {s: read_json(path) for s, path in (hyperparameter_files or {}).items()} or None
    with gpu_slot(torch.device(settings.device), gpu_lock_dir, jobs_per_gpu) as device:
        return run_splits(
            splits,
            replace(settings, device=str(device)),
            out_dirs,
            checkpoint,
            {s: {**labels, "split": s} for s in splits},
            hyperparameters,
        )
