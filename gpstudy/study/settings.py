"""The settings of one training run, resolved from the study config (where every default lives)."""

import functools
import json
import math
from dataclasses import asdict, dataclass
from typing import Any

import jsonschema

from gpstudy.data.registry import Dataset
from gpstudy.kernels import KERNELS
from gpstudy.likelihoods import LIKELIHOODS
from gpstudy.methods import METHODS, compile_problem, pairing_problems
from gpstudy.runtime.devices import resolve_device
from gpstudy.study.schema import object_schema, training_keys

STUDY_WIDE = ("iterations", "device")  # top-level config keys that override every training run (see run_settings)


def method_names(config: dict[str, Any]) -> list[str]:
    """Every method a run may name: the registered ones and the config's variants of them."""
    return sorted({*METHODS, *config.get("variants", {})})


def variant_labels(config: dict[str, Any]) -> dict[str, str]:
    """The display names the config's variants give themselves (``label``), variant -> name, in its order."""
    return {name: variant["label"] for name, variant in config.get("variants", {}).items() if "label" in variant}


class SettingsError(ValueError):
    """Settings that do not fit together (a kernel, likelihood or option the method cannot take) or the
    installed torch (``compile_problem``)."""


@dataclass(frozen=True)
class RunSettings:
    """Everything one run of one method needs, as plain values: the fields are the config's ``training`` keys
    (see ``gpstudy/study/config.schema.yaml`` for their meaning), the method and M, the seed and the method's
    own options. No field has a default here: ``run_settings`` takes them from the config. What a run builds
    of them (kernel, likelihood, dtypes, the method's config) it builds where it uses them
    (``gpstudy.training.run``); :func:`check_settings` checks them against a data set."""

    method: str  # a name in gpstudy.methods.METHODS (a variant's registered method)
    M: int  # inducing (SVGP) or measurement (GPNet, FBNN) points
    seed: int  # the study's seed: split s draws from a generator seeded seed + s
    options: dict[str, Any]  # the method's own options (its options_schema)
    iterations: int
    batch_size: int
    lr: float
    kernel: str
    kernel_options: dict[str, Any]
    initial_lengthscale: float
    likelihood: str
    likelihood_options: dict[str, Any]
    pretrain: bool
    pretrain_iterations: int
    pretrain_subset: int
    pretrain_lr: float
    device: str  # cpu, cuda or cuda:K, never "auto": run_settings resolves it
    dtype: str  # a name in gpstudy.numerics.DTYPES
    tf32: bool
    checkpoint_minutes: float
    checkpoint_every: int | None
    eval_every: int
    torch_compile: bool


def check_settings(settings: RunSettings, dataset: Dataset) -> None:
    """Raise :class:`SettingsError` unless kernel, likelihood and method of ``settings`` fit each other and
    ``dataset``, and, with ``torch_compile``, the installed torch compiles the method (``compile_problem``)."""
    method = METHODS[settings.method]
    if found := non_finite_paths(asdict(settings)):  # as validate_config refuses them in a config
        raise SettingsError(f"setting {found[0].removeprefix('$.')}: a number must be finite, not NaN or infinite")
    if settings.M < 1:
        raise SettingsError(f"M = {settings.M}: a method needs at least one inducing or measurement point")
    _validate(
        {name: getattr(settings, name) for name in training_keys()}, object_schema(training_keys()), "training settings"
    )
    for kind, name, registry in (
        ("kernel", settings.kernel, KERNELS),
        ("likelihood", settings.likelihood, LIKELIHOODS),
    ):
        if name not in registry:
            raise SettingsError(f"unknown {kind} {name!r}; known: {', '.join(sorted(registry))}")
    _validate(
        settings.kernel_options, KERNELS[settings.kernel].options_schema, f"kernel_options of {settings.kernel!r}"
    )
    _validate(
        settings.likelihood_options,
        LIKELIHOODS[settings.likelihood].options_schema,
        f"likelihood_options of {settings.likelihood!r}",
    )
    _validate(settings.options, object_schema(method.options_schema), f"options of method {settings.method!r}")
    task = LIKELIHOODS[settings.likelihood].task
    if task != dataset.task:
        raise SettingsError(
            f"likelihood {settings.likelihood!r} is for {task}, but data set {dataset.name!r} is "
            f"a {dataset.task} task; set `likelihood` under dataset_options.{dataset.name}"
        )
    if problems := pairing_problems(
        settings.method, settings.options, settings.kernel, settings.kernel_options, settings.likelihood
    ):
        raise SettingsError("; ".join(problems))
    phases = settings.options.get("variational_phase"), settings.options.get("loo_phase")
    if phases[0] is not None and phases[1] and settings.iterations <= phases[0]:  # AutoGP's (Algorithm 1)
        raise SettingsError(
            f"iterations = {settings.iterations} ends within the first ELBO phase (variational_phase = {phases[0]}): "
            f"the leave-one-out phase (loo_phase = {phases[1]}) never runs; give more iterations, a shorter "
            "variational_phase, or loo_phase: 0"
        )
    if settings.torch_compile and (problem := compile_problem(settings.method)):
        raise SettingsError(problem)
    if settings.pretrain and settings.likelihood != "gaussian":
        raise SettingsError(
            "pretrain: true fits the exact GP's marginal likelihood, which needs the gaussian "
            f"likelihood, not {settings.likelihood!r}"
        )


def run_settings(config: dict[str, Any], dataset: str | None, **overrides: Any) -> RunSettings:
    """The settings of a method's runs on a data set, from the lowest precedence to the highest: the
    config's ``training``; ``methods.<method>`` (the method's options, and training keys for it); the
    data set's options (a method option only for methods that have it); the data set's
    ``methods.<method>``; for a variant (``variants.<name>``, a registered method under a name of its
    own) the variant's keys, which make it the variant; the config's study-wide ``iterations`` and
    ``device`` when set (``device``: training runs only, see below); then
    ``overrides``, which must name ``method`` (registered or a variant) and ``M`` (a None is ignored).
    ``dataset=None`` gives the config's defaults alone. The settings' ``method`` is the registered one.

    The device is resolved here, once per run: "auto" becomes ``cuda`` when this process sees a GPU,
    else ``cpu`` (:func:`gpstudy.runtime.devices.resolve_device`); ``cuda`` keeps no index unless the config
    pinned one. In the workflow this process is Snakemake's, which derives the job's ``gpu`` resource
    and its params from these same settings, so the two cannot disagree, and the job never resolves
    "auto" again. The study-wide ``device`` is the device of training runs; the exact GP that
    pretrains hyperparameters and draws Figure 4's reference takes its own (:func:`exact_gp_settings`).

    Raises:
        SettingsError: an unknown method, a key that is neither a training key nor an option of the
            method (in the overrides or a variant), or a method option that has no value.
    """
    return traced_run_settings(config, dataset, **overrides)[0]


def traced_run_settings(
    config: dict[str, Any], dataset: str | None, **overrides: Any
) -> tuple[RunSettings, dict[str, str | None]]:
    """:func:`run_settings`, and where each of its values came from: setting (``method``, ``M``, ``seed``,
    a training key or a method option) -> the config key path that set it (e.g.
    ``dataset_options.mnist.methods.gpnet.lr``), or None for the caller's ``overrides``."""
    given = {key: value for key, value in overrides.items() if value is not None}
    name, M = given.pop("method"), given.pop("M")
    variant = dict(config.get("variants", {}).get(name, {}))
    method = variant.pop("method", name)
    variant.pop("label", None)  # its display name (variant_labels), no setting
    if method not in METHODS:
        raise SettingsError(f"unknown method {name!r}; known: {', '.join(method_names(config))}")
    training, option_names = set(training_keys()), set(METHODS[method].options_schema)
    for where, keys in (("variants." + name, variant), ("the overrides", given)):
        unknown = sorted(set(keys) - training - option_names)
        if unknown:
            raise SettingsError(
                f"{where}: {', '.join(unknown)} is neither a training setting nor an option of "
                f"method {method!r}; valid: {', '.join(sorted(training | option_names))}"
            )
    data_options = config.get("dataset_options", {}).get(dataset, {}) if dataset is not None else {}
    data_settings = {key: value for key, value in data_options.items() if key in training | option_names}
    layers = [  # (config key path, its settings), from the lowest precedence to the highest
        ("training", config["training"]),
        (f"methods.{method}", config["methods"].get(method, {})),
        (f"dataset_options.{dataset}", data_settings),
        (f"dataset_options.{dataset}.methods.{method}", data_options.get("methods", {}).get(method, {})),
        (f"variants.{name}", variant),
        ("", {key: config[key] for key in STUDY_WIDE if config.get(key) is not None}),
        (None, given),
    ]
    values, sources = {}, {"method": f"variants.{name}.method" if name != method else None, "M": None, "seed": "seed"}
    for where, settings in layers:
        for key, value in settings.items():
            values[key], sources[key] = value, None if where is None else f"{where}.{key}".lstrip(".")
    missing = sorted(option_names - set(values))
    if missing:
        raise SettingsError(f"method {method!r} has no value for {', '.join(missing)} (give it under methods.{method})")
    options = {option: values.pop(option) for option in sorted(option_names)}
    values["device"] = str(resolve_device(values["device"]))
    return RunSettings(
        method=method, M=M, seed=config["seed"], options=options, **{name: values[name] for name in training}
    ), sources


def exact_gp_settings(config: dict[str, Any], dataset: str | None, **overrides: Any) -> RunSettings:
    """The settings of the exact GP beside the training runs on ``dataset``: hyperparameter pretraining
    (at most ``pretrain_subset`` points) and Figure 4's reference posterior. They are
    :func:`run_settings`' for method ``exact`` but without the study-wide ``device``, which sets the
    device of training runs only: the exact GP's device comes from ``methods.exact.device`` (cpu in
    config.yaml), unless a data set's options set one, so a study moved to CUDA keeps these small jobs
    on the CPU (on a cluster: on its CPU partition, with no GPU). ``overrides`` as :func:`run_settings`'."""
    return run_settings({**config, "device": None}, dataset, method="exact", M=1, **overrides)


def non_finite_paths(value: Any, path: str = "$") -> list[str]:
    """The paths of every NaN or infinite number in a config or settings (JSON schema's bounds let NaN through)."""
    if isinstance(value, float) and not math.isfinite(value):
        return [path]
    if isinstance(value, dict):
        return [found for key, item in value.items() for found in non_finite_paths(item, f"{path}.{key}")]
    if isinstance(value, list):
        return [found for index, item in enumerate(value) for found in non_finite_paths(item, f"{path}[{index}]")]
    return []


def _validate(value: dict, schema: dict, what: str) -> None:
    """As ``jsonschema.validate``, but each distinct schema is checked against its metaschema once, not at
    every call (a study's config validates each planned run's settings: 96% of load_config's time)."""
    error = jsonschema.exceptions.best_match(_validator(json.dumps(schema, sort_keys=True)).iter_errors(value))
    if error is not None:
        raise SettingsError(f"{what}, {error.json_path}: {error.message}") from None


@functools.cache
def _validator(schema: str) -> jsonschema.protocols.Validator:
    """The validator of a JSON schema given as JSON text, the schema checked (``SchemaError``) when first made."""
    loaded = json.loads(schema)
    validator = jsonschema.validators.validator_for(loaded)
    validator.check_schema(loaded)
    return validator(loaded)
