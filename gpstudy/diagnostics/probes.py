"""Small problems for every method and config variant: what the device checks run without real data.

A probe is a method (registered, or a variant of ``config.yaml``) with the settings that choose a code
path (likelihood, network, fixed or learned Z, online hyperparameters, ...) changed from the config's
defaults, on a few dozen synthetic points. ``tests/diagnostics/test_probes.py`` runs each a few
iterations on the CPU counting host synchronisations, and on the ``meta`` device (a stand-in for CUDA
that has no values and refuses to mix with CPU tensors); ``benchmarks/gpu_check.py`` runs them on a GPU.
"""

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from gpstudy import generators as draws
from gpstudy.methods import Method, Problem, build_method
from gpstudy.numerics import DTYPES
from gpstudy.study.settings import RunSettings, run_settings
from gpstudy.training.fit import BatchSampler, train_iteration
from gpstudy.training.optim import adam
from gpstudy.training.run import initial_kernel, initial_likelihood, method_config

N, D, BATCH, M, HIDDEN, CLASSES = 48, 3, 16, 6, 10, 3  # a probe's points, inputs, minibatch, M, RFE units, classes
RFE = {"hidden_units": HIDDEN}  # the RFE network's size in a probe
IMAGE_SHAPE = [1, 4, 4]  # the NTK's probe images (C, H, W)
TINY_NTK = {
    "network": "ntk",
    "hidden_units": 4,
    "objective": "elbo",
    "kernel": "cnngp",
    "kernel_options": {"image_shape": IMAGE_SHAPE},
    "network_options": {"filters": [2, 2], "strides": [1, 2], "dense_units": 8},
}
CLASSES_OPTIONS = {"likelihood_options": {"classes": CLASSES}}
FIXED_PRIOR = {"online_hyperparameters": False, "learn_inducing_inputs": False, "inducing_init": "training_points"}
AUTOGP_SMALL = {"likelihood": "softmax", **CLASSES_OPTIONS, "samples": 2, "variational_phase": 1}


@dataclass(frozen=True)
class Probe:
    """A method or variant on synthetic data of one kind, with ``changes`` to config.yaml's settings."""

    method: str  # a registered method or a variant of the config
    data: str  # regression | binary | classes | images
    changes: dict[str, Any] = field(default_factory=dict)
    splits: int = 2  # trained as one batch (the NTK trains one split)


PROBES: dict[str, Probe] = {  # name -> probe; every method and variant of config.yaml appears (a test checks)
    "exact": Probe("exact", "regression"),
    "svgp": Probe("svgp", "regression"),
    "svgp_fixed_prior": Probe("svgp", "regression", FIXED_PRIOR),
    "svgp_bernoulli": Probe("svgp", "binary", {"likelihood": "bernoulli"}),
    "svgp_softmax": Probe("svgp", "classes", {"likelihood": "softmax", **CLASSES_OPTIONS}),
    "svgp_robustmax_fixed_prior": Probe(
        "svgp", "classes", {"likelihood": "robustmax", **CLASSES_OPTIONS, **FIXED_PRIOR}
    ),
    "gpnet": Probe("gpnet", "regression", RFE),
    "gpnet_online_noisy": Probe("gpnet", "regression", {**RFE, "online_hyperparameters": True, "measurement": "noisy"}),
    "gpnet_box": Probe("gpnet", "regression", {**RFE, "measurement": "box", "box": [[-2.0] * D, [2.0] * D]}),
    "gpnet_elbo_bernoulli": Probe("gpnet", "binary", {**RFE, "objective": "elbo", "likelihood": "bernoulli"}),
    "gpnet_mixed_precision": Probe("gpnet", "regression", {**RFE, "dtype": "mixed"}),
    "gpnet_ntk_softmax": Probe("gpnet", "images", {**TINY_NTK, "likelihood": "softmax", **CLASSES_OPTIONS}, splits=1),
    "fbnn": Probe("fbnn", "regression", RFE),
    "fbnn_online_batch": Probe("fbnn", "regression", {**RFE, "online_hyperparameters": True}),
    "fbnn_mixed_precision": Probe("fbnn", "regression", {**RFE, "dtype": "mixed"}),
    "fbnn_online_measurement_set": Probe(
        "fbnn", "regression", {**RFE, "online_hyperparameters": True, "hyperparameter_objective": "measurement_set"}
    ),
    "fbnn_ntk_robustmax": Probe(
        "fbnn",
        "images",
        {**{k: v for k, v in TINY_NTK.items() if k != "objective"}, "likelihood": "robustmax", **CLASSES_OPTIONS},
        splits=1,
    ),
    "odvgp": Probe("odvgp", "regression", {"mean_basis": 2 * M}),
    "orth": Probe("orth", "regression", {"mean_basis": 2 * M}),
    "orthnat": Probe("orthnat", "regression", {"mean_basis": 2 * M}),
    "autogp": Probe("autogp", "classes", AUTOGP_SMALL),
    "autogp_mixture_bernoulli": Probe(
        "autogp", "binary", {"likelihood": "bernoulli", "samples": 2, "components": 2, "covariance": "diagonal"}
    ),
    "autogp_loo": Probe("autogp_loo", "classes", {**AUTOGP_SMALL, "loo_phase": 1}),
    "autogp_arccos": Probe("autogp_arccos", "classes", AUTOGP_SMALL),
}


@dataclass
class ProbeRun:
    """A probe built on a device: its settings, method, data and generators, and Adam."""

    settings: RunSettings
    method: Method
    x_train: Tensor
    y_train: Tensor
    generators: list[torch.Generator]
    optimizer: torch.optim.Optimizer
    sampler: BatchSampler

    def train(self, steps: range) -> Tensor:
        """Train iterations ``steps`` (as ``fit`` does, without evaluation); the last loss."""
        loss = None
        for step in steps:
            loss = train_iteration(
                self.method, self.optimizer, self.sampler, self.x_train, self.y_train, step, self.generators
            )
        return loss


def probe_data(kind: str, splits: int, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Synthetic float64 data ``[splits, N, D']`` and ``[splits, N]`` of a kind: a smooth regression,
    binary labels, ``CLASSES`` labels, or flat ``IMAGE_SHAPE`` images whose class lights up a row."""
    generator, like = draws.new_generators([seed], torch.device("cpu"))[0], torch.empty(0, dtype=torch.float64)
    if kind == "images":
        labels = torch.arange(N).remainder(CLASSES).expand(splits, N)
        rows = torch.nn.functional.one_hot(labels, IMAGE_SHAPE[1]).to(torch.float64)  # [S, N, H]
        x = (2 * rows.unsqueeze(-1).expand(splits, N, *IMAGE_SHAPE[1:]) - 1).reshape(splits, N, -1)
        return x + 0.3 * draws.randn(tuple(x.shape), generator, like), labels.to(torch.float64)
    x = draws.randn((splits, N, D), generator, like)
    latent = torch.sin(2 * x[..., 0]) + x[..., 1]
    if kind == "regression":
        return x, latent + 0.1 * draws.randn(tuple(latent.shape), generator, like)
    if kind == "binary":
        return x, (latent > 0).to(torch.float64)
    if kind == "classes":
        return x, torch.bucketize(latent, torch.tensor([-0.5, 0.5], dtype=torch.float64)).to(torch.float64)
    raise ValueError(f"unknown probe data {kind!r}; known: regression, binary, classes, images")


def build_probe(name: str, config: dict, device: torch.device | str) -> ProbeRun:
    """Probe ``name`` on ``device`` with ``config``'s defaults (config.yaml, validated).

    On ``meta`` the method is built on the CPU and then moved (its initialization, k-means, needs values);
    its data follow and its generators stay on the CPU (``gpstudy.generators.new_generators``)."""
    probe, device = PROBES[name], torch.device(device)
    build_on = torch.device("cpu") if device.type == "meta" else device
    settings = run_settings(
        config, None, method=probe.method, M=M, batch_size=BATCH, device=str(build_on), **probe.changes
    )
    x, y = (t.to(device=build_on, dtype=DTYPES[settings.dtype][0]) for t in probe_data(probe.data, probe.splits))
    generators = draws.new_generators(range(probe.splits), build_on)
    kernel = initial_kernel(settings, x.shape[-1], (probe.splits,))
    likelihood = initial_likelihood(settings, (probe.splits,))
    config_of_method = method_config(
        settings, N, np.zeros((probe.splits, x.shape[-1])), np.ones((probe.splits, x.shape[-1]))
    )
    method = build_method(settings.method, Problem(x, y, kernel, likelihood, generators), config_of_method).to(device)
    x, y = x.to(device), y.to(device)
    return ProbeRun(
        settings,
        method,
        x,
        y,
        generators,
        adam(method.adam_parameters(), settings.lr, device),
        BatchSampler(N, BATCH, generators, device),
    )
