"""The settings of one training run, built from the study config (defaults, then per data set)."""

from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import torch

from gpstudy.devices import resolve_device
from gpstudy.methods import MethodConfig


STUDY_WIDE = ("iterations", "device")  # top-level config keys that override every run


@dataclass(frozen=True)
class RunSettings:
    """Everything one run of one method on one split needs (STUDY.md's constants as defaults)."""

    method: str  # a name in gpstudy.methods.METHODS
    M: int  # inducing (SVGP) or measurement (GPNet, FBNN) points
    iterations: int = 10_000  # Adam steps
    batch_size: int = 500  # B; a data set smaller than B is used whole
    lr: float = 0.003  # Adam learning rate
    beta0: float = 1.0  # GPNet: beta_t = beta0 / (1 + xi sqrt(t-1))
    xi: float = 1.0  # GPNet: decay of beta_t
    hidden_units: int = 1000  # RFE units (20 for Snelson)
    measurement: str = "noisy"  # c(x): noisy | train | box (see gpstudy.measurement)
    box: tuple[tuple[float, ...], tuple[float, ...]] | None = None  # (low, high) of c(x) = box
    online_hyperparameters: bool = False  # GPNet, FBNN: learn kernel and noise during training
    objective: str = "conjugate"  # GPNet: conjugate (eq. 8-11) or elbo (section 3.2)
    pretrain: bool = False  # exact-GP hyperparameter pretraining before training
    pretrain_iterations: int = 1000  # Adam steps of pretraining (Snelson: 100)
    pretrain_subset: int = 1000  # pretraining uses min(N, this) random training points
    pretrain_lr: float = 0.01  # Adam learning rate of pretraining
    seed: int = 0  # the study's seed: split s draws from a generator seeded seed + s
    device: str = "auto"  # auto (cuda when available) | cpu | cuda | cuda:K
    dtype: str = "float64"  # float64 | float32
    checkpoint_every: int = 1000  # iterations between checkpoints
    eval_every: int = 1000  # iterations between test evaluations (learning curve)

    def method_config(self, n_train: int, x_mean: np.ndarray, x_std: np.ndarray) -> MethodConfig:
        """The method's own settings; ``box`` moves from the data's units to standardized inputs, by
        each split's ``x_mean`` and ``x_std`` ``[*batch, D]``."""
        names = {f.name for f in fields(MethodConfig)} - {"n_train", "box"}
        box = None if self.box is None else tuple(tuple(((np.asarray(bound) - x_mean) / x_std).tolist())
                                                  for bound in self.box)
        return MethodConfig(n_train=n_train, box=box, **{name: getattr(self, name) for name in names})

    def torch_device(self) -> torch.device:
        """The device this run trains on."""
        return resolve_device(self.device)

    def torch_dtype(self) -> torch.dtype:
        """The floating-point type of data and parameters."""
        return {"float64": torch.float64, "float32": torch.float32}[self.dtype]


def run_settings(config: dict[str, Any], dataset: str, **overrides: Any) -> RunSettings:
    """Settings of the runs of a data set: the config's ``training`` defaults, then the data set's
    options, then the method's options, then the config's study-wide ``iterations`` and ``device``
    when set, then ``overrides`` (which must name ``method`` and ``M``; a None is ignored). The seed
    is the config's ``seed``: split s draws from ``seed + s``.
    """
    given = {"seed": config["seed"], **{k: v for k, v in overrides.items() if v is not None}}
    study_wide = {key: config[key] for key in STUDY_WIDE if config.get(key) is not None}
    values = {**config.get("training", {}), **_training_options(config, dataset),
              **config.get("method_options", {}).get(given["method"], {}), **study_wide, **given}
    if values.get("box") is not None:
        values["box"] = tuple(tuple(bound) for bound in values["box"])
    return replace(RunSettings(method=values.pop("method"), M=values.pop("M")), **values)


def _training_options(config: dict[str, Any], dataset: str) -> dict[str, Any]:
    """The training keys among a data set's ``dataset_options`` (the others are split settings)."""
    names = {f.name for f in fields(RunSettings)}
    return {k: v for k, v in config.get("dataset_options", {}).get(dataset, {}).items() if k in names}
