"""A study configuration checked against the schema, the registries and itself, before any job runs.

After the schema, every training job's settings are resolved and checked: the kernel, the likelihood
and the method by name, the kernel's options by its own schema, the likelihood against the data set's
task and against what the method supports.
"""

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema

from gpstudy import paths
from gpstudy.data.fetch import FetchError, mirror_path, mirror_root
from gpstudy.data.registry import CLASSES, DATASETS, READER_OPTIONS, get_dataset
from gpstudy.data.split import SIZED_PROTOCOLS, split_sizes
from gpstudy.data.user import file_spec
from gpstudy.likelihoods import LIKELIHOODS
from gpstudy.methods import METHODS
from gpstudy.paper import quoted_tables
from gpstudy.study.datasets import USER_DATASET_KEYS, data_plan, data_stage_params, dataset_of, user_datasets
from gpstudy.study.jobs import experiment_metrics, study_jobs
from gpstudy.study.schema import ConfigError, load_schema
from gpstudy.study.settings import (
    SettingsError,
    check_settings,
    method_names,
    non_finite_paths,
    run_settings,
    traced_run_settings,
    variant_labels,
)

SEED_MAX = load_schema()["properties"]["seed"]["maximum"]  # the largest seed + s of a split s: 2**32 - 1
MAX_VALUES = 100_000  # the values a config may hold, its YAML aliases expanded (config.yaml's: 360)
OVERSIZED = f"more than {MAX_VALUES} values once its YAML aliases are expanded (nested aliases?), or holds itself"


def validate_config(config: dict[str, Any]) -> None:
    """Check a configuration against the schema, the registries and itself.

    Raises:
        ConfigError: naming the offending key (e.g. ``$.datasets[1]``) and what is wrong with it.
    """
    if (key := oversized(config)) is not None:
        raise ConfigError(f"invalid configuration:\n  config key {key}: {OVERSIZED}")
    errors = sorted(
        jsonschema.Draft202012Validator(load_schema()).iter_errors(config), key=lambda e: list(e.absolute_path)
    )
    problems = [f"  config key {e.json_path}: {e.message}" for e in errors]
    problems += [
        f"  config key {path}: a number must be finite, not NaN or infinite" for path in non_finite_paths(config)
    ]
    problems = problems or [f"  config key {path}: {problem}" for path, problem in _bad_names(config)]
    if problems:
        raise ConfigError("invalid configuration:\n" + "\n".join(problems))
    for name, label in variant_labels(config).items():
        if (problem := mathtext_problem(label)) is not None:
            raise ConfigError(
                f"invalid configuration:\n  config key $.variants.{name}.label: {label!r} is not mathtext "
                f"matplotlib can draw in the figures ({problem}); escape a literal dollar as \\$"
            )
    if config.get("mirror"):  # its form here, on every machine; its folder by check_mirror, where it is read
        try:
            mirror_path(config["mirror"])
        except FetchError as error:
            raise ConfigError(f"invalid configuration:\n  config key $.mirror: {error}") from None
    known = set(DATASETS) | set(user_datasets(config))
    named = [("datasets", config["datasets"]), ("dataset_options", config.get("dataset_options", {}))]
    named += [(f"experiments.{name}.datasets", spec["datasets"]) for name, spec in config["experiments"].items()]
    for key, names in named:
        for index, name in enumerate(names):
            if name not in known:
                where = f"$.{key}[{index}]" if isinstance(names, list) else f"$.{key}.{name}"
                raise ConfigError(
                    f"invalid configuration:\n  config key {where}: unknown data set {name!r}; "
                    f"known: {', '.join(sorted(known))} (or give it a `source` under dataset_options)"
                )
    for name, options in user_datasets(config).items():
        try:
            file_spec(options)
        except ValueError as error:
            raise ConfigError(
                f"invalid configuration:\n  config key $.dataset_options.{name}.source: {error}"
            ) from None
    clashes = sorted(set(user_datasets(config)) & set(DATASETS))  # a user's file would train as the built-in one
    if clashes:
        raise ConfigError(
            f"invalid configuration:\n  config key $.dataset_options.{clashes[0]}.source: "
            f"{clashes[0]!r} is a built-in data set, whose tables print the paper's numbers beside it; "
            f"give a data set of your own a name of its own (e.g. my_{clashes[0]})"
        )
    used = {
        *config["datasets"],
        *config.get("dataset_options", {}),
        *(name for spec in config["experiments"].values() for name in spec["datasets"]),
    }
    for name in sorted(used - set(user_datasets(config))):
        try:
            get_dataset(name).with_reader_options(config.get("dataset_options", {}).get(name, {}))
        except ValueError as error:
            raise ConfigError(f"invalid configuration:\n  config key $.dataset_options.{name}: {error}") from None
    for name, options in config.get("dataset_options", {}).items():
        if "sha256" in options and "source" not in options:  # a user data set's: refused below
            try:
                dataset_of(config, name)
            except ValueError as error:
                raise ConfigError(
                    f"invalid configuration:\n  config key $.dataset_options.{name}.sha256: {error}"
                ) from None
    for name in sorted(used - set(user_datasets(config))):
        dataset = dataset_of(config, name)
        plan = data_plan(config, name)
        if dataset.shape is not None and plan.protocol in SIZED_PROTOCOLS:  # N is the registry's
            try:
                split_sizes(dataset.shape[0], plan.train_size, plan.test_size, plan.protocol)
            except ValueError as error:
                raise ConfigError(
                    f"invalid configuration:\n  config key $.dataset_options.{name}.train_size / test_size: "
                    f"{error} ({name} has {dataset.shape[0]} rows)"
                ) from None
    for name in config.get("variants", {}):
        if name in METHODS:
            raise ConfigError(
                f"invalid configuration:\n  config key $.variants.{name}: a registered method's name; "
                "give the variant a name of its own"
            )
    for index, name in enumerate(config.get("run_experiments") or []):
        if name not in config["experiments"]:
            raise ConfigError(
                f"invalid configuration:\n  config key $.run_experiments[{index}]: unknown experiment "
                f"{name!r}; known: {', '.join(sorted(config['experiments']))}"
            )
    for name, spec in config["experiments"].items():
        for method in spec["methods"]:
            if method not in method_names(config):
                raise ConfigError(
                    f"invalid configuration:\n  config key $.experiments.{name}.methods.{method}: "
                    f"unknown method {method!r}; known: {', '.join(method_names(config))} "
                    "(or define it under `variants`)"
                )
        metrics = experiment_metrics(config, name)  # one task per experiment
        if "quoted" in spec and quoted_tables()[spec["quoted"]]["metric"] not in metrics:
            raise ConfigError(
                f"invalid configuration:\n  config key $.experiments.{name}.quoted: table "
                f"{spec['quoted']!r} holds {quoted_tables()[spec['quoted']]['metric']}, not one of the "
                f"experiment's metrics ({', '.join(metrics)})"
            )
        if "posteriors" in spec.get("outputs", []) and len(spec["datasets"]) != 1:
            raise ConfigError(
                f"invalid configuration:\n  config key $.experiments.{name}.outputs: posteriors draws "
                f"one data set of one input, not {len(spec['datasets'])}"
            )
    for name, options in user_datasets(config).items():
        if "sha256" in options:
            raise ConfigError(
                f"invalid configuration:\n  config key $.dataset_options.{name}.sha256: a user data set "
                "pins its file with source.sha256"
            )
        if set(options) & READER_OPTIONS:
            raise ConfigError(
                f"invalid configuration:\n  config key $.dataset_options.{name}: "
                f"{', '.join(sorted(set(options) & READER_OPTIONS))} is an option of a registered "
                "data set's reader, not of a user data set"
            )
        missing = [key for key in USER_DATASET_KEYS if key not in options]
        if missing:
            raise ConfigError(
                f"invalid configuration:\n  config key $.dataset_options.{name}: a user data set "
                f"(one with a `source`) needs {', '.join(missing)}"
            )
    for name, options in config.get("dataset_options", {}).items():
        if "standardize_inputs" in options and dataset_of(config, name).task == "regression":
            raise ConfigError(
                f"invalid configuration:\n  config key $.dataset_options.{name}.standardize_inputs: "
                f"{name!r} is a regression data set, whose x and y are always standardized with "
                "training statistics; the option is a classification data set's"
            )
    for job in study_jobs(config):
        if config["seed"] + job.splits[-1] > SEED_MAX:  # split s and its runs draw from seed + s
            raise ConfigError(
                f"invalid configuration:\n  config key $.seed: {config['seed']} + split {job.splits[-1]} of "
                f"data set {job.dataset!r} is past {SEED_MAX}, the largest seed numpy takes; use a smaller seed"
            )
        try:
            check_settings(
                run_settings(config, job.dataset, method=job.method, M=job.M), dataset_of(config, job.dataset)
            )
        except SettingsError as error:
            raise ConfigError(
                f"invalid configuration:\n  experiment {job.experiment!r}, data set {job.dataset!r}, "
                f"method {job.method!r}: {error}"
            ) from None
    for name in sorted({job.dataset for job in study_jobs(config)} & set(CLASSES) - set(user_datasets(config))):
        for classes, key in declared_classes(config, name):  # a user data set's labels: checked by its table rule
            if classes != CLASSES[name]:
                raise ConfigError(
                    f"invalid configuration:\n  config key $.{key}: data set {name!r} has "
                    f"{CLASSES[name]} classes (labels 0..{CLASSES[name] - 1}), but {key} declares {classes}"
                )


def tabulate_params(config: dict[str, Any], name: str, protocol: str) -> dict[str, Any]:
    """The tabulate rule's params: ``data_stage_params``' and, for a user's classification data set, the
    classes its runs' likelihoods declare (:func:`declared_classes`), which the rule checks its labels
    against. A registered data set's are checked here, by ``validate_config``: its params, and every other
    data set's, are ``data_stage_params``' alone, as before."""
    params = data_stage_params(config, name, protocol)["tabulate"]
    if name in user_datasets(config) and dataset_of(config, name).task == "classification":
        params = {**params, "classes": [list(pair) for pair in declared_classes(config, name)]}
    return params


def declared_classes(config: dict[str, Any], name: str) -> list[tuple[int, str]]:
    """The numbers of classes that the likelihoods of the study's runs on data set ``name`` take
    (``Likelihood.label_classes``), each with the config key that declares it for the first run that
    does (its ``likelihood_options``, or its ``likelihood`` for bernoulli's two), in increasing order; none
    for a regression data set."""
    declared: dict[int, str] = {}
    for method in dict.fromkeys(job.method for job in study_jobs(config) if job.dataset == name):
        settings, sources = traced_run_settings(config, name, method=method, M=1)
        classes = LIKELIHOODS[settings.likelihood].label_classes(settings.likelihood_options)
        if classes is not None:
            key = "likelihood_options" if "classes" in settings.likelihood_options else "likelihood"
            declared.setdefault(classes, sources[key])
    return sorted(declared.items())


def _bad_names(config: dict[str, Any]) -> list[tuple[str, str]]:
    """(path, problem) of every data set, method, variant and experiment name that breaks its rule in ``paths``:
    the names become parts of the study's file paths, and Snakemake matches them by those rules."""
    named = [(paths.DATASET_NAME, "data set", f"$.datasets[{i}]", name) for i, name in enumerate(config["datasets"])]
    named += [
        (paths.DATASET_NAME, "data set", f"$.dataset_options.{name}", name)
        for name in config.get("dataset_options", {})
    ]
    named += [(paths.METHOD_NAME, "variant", f"$.variants.{name}", name) for name in config.get("variants", {})]
    named += [
        (paths.EXPERIMENT_NAME, "experiment", f"$.run_experiments[{i}]", name)
        for i, name in enumerate(config.get("run_experiments") or [])
    ]
    for experiment, spec in config["experiments"].items():
        named.append((paths.EXPERIMENT_NAME, "experiment", f"$.experiments.{experiment}", experiment))
        named += [
            (paths.DATASET_NAME, "data set", f"$.experiments.{experiment}.datasets[{i}]", name)
            for i, name in enumerate(spec["datasets"])
        ]
        named += [
            (paths.METHOD_NAME, "method", f"$.experiments.{experiment}.methods.{name}", name)
            for name in spec["methods"]
        ]
    return [
        (path, f"{kind} name {name!r} must match {rule.pattern} ({rule.words})")
        for rule, kind, path, name in named
        if not rule.allows(name)
    ]


def mathtext_problem(label: str) -> str | None:
    """Why matplotlib cannot draw ``label`` (the last line of its mathtext parser's error), or None: a label with
    an even number of unescaped ``$`` is mathtext (``matplotlib.cbook.is_math_text``), drawn by that parser."""
    from matplotlib.cbook import is_math_text
    from matplotlib.mathtext import MathTextParser

    if not is_math_text(label):
        return None
    try:
        MathTextParser("path").parse(label)
    except ValueError as error:
        return str(error).strip().splitlines()[-1].split(":")[0]
    return None


def oversized(config: Any) -> str | None:
    """The key (e.g. ``$.training.kernel_options``) of a config value that holds more than :data:`MAX_VALUES`
    values (each mapping, list and scalar one) counted as a reader of it meets them, a value reached through
    several aliases once per alias, or that holds itself (a recursive alias); None when the config holds
    none. Each distinct value is counted once, so a document of nested aliases is measured without its
    expansion."""
    sizes: dict[int, float] = {}

    def size(value: Any) -> float:
        if not isinstance(value, dict | list):
            return 1
        if id(value) not in sizes:
            sizes[id(value)] = math.inf  # until counted: a value met again inside itself holds itself
            sizes[id(value)] = 1 + sum(map(size, value.values() if isinstance(value, dict) else value))
        return sizes[id(value)]

    if size(config) <= MAX_VALUES:
        return None
    key, value = "$", config
    while isinstance(value, dict):  # down the mapping keys to the largest value that is too large itself
        name, inner = max(value.items(), key=lambda item: size(item[1]))
        if size(inner) <= MAX_VALUES:
            break
        key, value = f"{key}.{name}", inner
    return key


def check_mirror(config: dict[str, Any], datasets: Iterable[str]) -> None:
    """Refuse the config's ``mirror`` before any job, where it is read (Snakemake's own process, which runs the
    fetch jobs, a local rule; a gpstudy command): a mirror that names no directory of this machine, or one
    that holds none of the files of ``datasets`` still to fetch (no raw manifest yet), laid out
    ``<mirror>/<dataset>/<file>``: the wrong folder. A mirror holding some of them is a partial one: the
    fetch takes the others from their sources.

    Raises:
        ConfigError: naming ``$.mirror``, its folder and a file it lacks.
    """
    if not config.get("mirror"):
        return
    try:
        root = mirror_root(config["mirror"])
    except FetchError as error:
        raise ConfigError(f"invalid configuration:\n  config key $.mirror: {error}") from None
    wanted = []
    for name in datasets:
        protocol = data_plan(config, name).protocol
        if not Path(paths.RAW_MANIFEST.format(dataset=name, protocol=protocol)).exists():
            wanted += [root / name / spec.path for spec in dataset_of(config, name).files(protocol)]
    if wanted and not any(path.is_file() for path in wanted):
        raise ConfigError(
            f"invalid configuration:\n  config key $.mirror: {config['mirror']!r} holds none of the files to "
            f"fetch (no {wanted[0]}); a mirror holds each data set's files as <mirror>/<dataset>/<file>"
        )
