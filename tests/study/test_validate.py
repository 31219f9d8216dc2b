"""Config validation names the offending key; the data plan follows the config."""

import copy
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from gpstudy.study import (
    ConfigError,
    DataPlan,
    TrainJob,
    data_plan,
    dataset_of,
    load_config,
    merge,
    run_settings,
    splits_of,
    study_jobs,
    validate_config,
)

REPO = Path(__file__).resolve().parents[2]
BASE = yaml.safe_load((REPO / "config.yaml").read_text())


def with_changes(**changes):
    config = copy.deepcopy(BASE)
    config.update(changes)
    return config


def test_shipped_configs_are_valid():
    validate_config(BASE)
    quick = load_config(REPO / "config.yaml", REPO / "configs/quick.yaml")  # an overlay, as snakemake merges it
    assert quick["splits"] == 2 and quick["training"]["batch_size"] == 100 and quick["training"]["kernel"] == "rbf"
    assert quick["methods"]["gpnet"]["hidden_units"] == 50 and quick["methods"]["gpnet"]["beta0"] == 1.0
    assert quick["experiments"]["uci"]["methods"] == BASE["experiments"]["uci"]["methods"]


def test_merge_is_nested_and_replaces_lists():
    config = {"a": {"b": 1, "c": [1, 2]}, "d": 1}
    merge(config, {"a": {"c": [3]}, "e": 2})
    assert config == {"a": {"b": 1, "c": [3]}, "d": 1, "e": 2}


def with_nested(**changes):
    config = copy.deepcopy(BASE)
    merge(config, changes)
    return config


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"datasetz": ["boston"]}, r"\$: Additional properties .*'datasetz' was unexpected"),
        ({"splits": "two"}, r"\$\.splits: 'two' is not of type 'integer'"),
        ({"splits": 0}, r"\$\.splits: 0 is less than the minimum of 1"),
        ({"split_protocol": "kfold"}, r"\$\.split_protocol: 'kfold' is not one of"),
        ({"datasets": ["boston", "bostn"]}, r"\$\.datasets\[1\]: unknown data set 'bostn'; known: airline"),
        ({"dataset_options": {"snelson": {"train_sise": 100}}}, r"\$\.dataset_options\.snelson: .*'train_sise'"),
        ({"dataset_options": {"nope": {}}}, r"\$\.dataset_options\.nope: unknown data set"),
        (
            {"experiments": {"uci": {"datasets": ["boston"], "methods": {"gpnet": [0]}}}},
            r"\$\.experiments\.uci\.methods\.gpnet\[0\]: 0 is less than the minimum of 1",
        ),
        (
            {"experiments": {"uci": {"datasets": ["bostn"], "methods": {"gpnet": [5]}}}},
            r"\$\.experiments\.uci\.datasets\[0\]: unknown data set 'bostn'",
        ),
        ({"methods": {"svgpp": {}}}, r"\$\.methods: Additional properties .*'svgpp' was unexpected"),
        ({"methods": {"gpnet": {"beta0": 2.0}}}, r"\$\.methods\.gpnet\.beta0: 2\.0 is greater than the maximum of 1"),
        ({"methods": {"gpnet": {"hidden_units": 10}}}, r"\$\.methods\.gpnet: 'beta0' is a required property"),
        ({"training": {"lr": 0.1}}, r"\$\.training: 'batch_size' is a required property"),
        (
            {"experiments": {"uci": {"datasets": ["boston"], "methods": {"Od-SVGP": [5]}}}},
            r"\$\.experiments\.uci\.methods\.Od-SVGP: method name 'Od-SVGP' must match "
            r"\[a-z\]\[a-z0-9_\]\* \(a lowercase",
        ),
        (
            {"experiments": {"uci": {"datasets": ["boston"], "methods": {"od_svgp": [5]}}}},
            r"experiments\.uci\.methods\.od_svgp: unknown method 'od_svgp'; known: autogp, autogp_arccos, autogp_loo, "
            r"exact, fbnn, gpnet, odvgp, orth, orthnat, svgp",
        ),
        ({"device": "gpu"}, r"\$\.device: 'gpu' does not match"),
        ({"splits_per_job": 0}, r"\$\.splits_per_job: 0 is less than the minimum of 1"),
        ({"jobs_per_gpu": 0}, r"\$\.jobs_per_gpu: 0 is less than the minimum of 1"),
    ],
)
def test_bad_config_names_the_key(changes, message):
    with pytest.raises(ConfigError, match=message):
        validate_config(with_changes(**changes))


def test_standardize_inputs_is_refused_on_a_regression_data_set():
    validate_config(with_nested(dataset_options={"mnist": {"standardize_inputs": True}}))
    with pytest.raises(
        ConfigError,
        match=r"\$\.dataset_options\.boston\.standardize_inputs: 'boston' is a regression "
        r"data set, whose x and y are always standardized",
    ):
        validate_config(with_nested(dataset_options={"boston": {"standardize_inputs": False}}))
    with pytest.raises(ConfigError, match=r"\$\.dataset_options\.mnist\.standardize_inputs: 'yes' is not of type"):
        validate_config(with_nested(dataset_options={"mnist": {"standardize_inputs": "yes"}}))


def user_data_set(name):
    """A config whose study is the user data set ``name`` alone, in the uci experiment."""
    source = {"source": {"file": "mine.csv", "sha256": "0" * 64}, "format": "csv", "target": -1, "task": "regression"}
    return with_nested(datasets=[name], dataset_options={name: source}, experiments={"uci": {"datasets": [name]}})


RULE = r"must match \[a-z0-9_\]\+ \(lowercase letters, digits, underscore\)"


@pytest.mark.parametrize("name", ["MyData", "my data", "données", "my-data"])
def test_a_data_set_name_outside_the_path_rule_is_refused_at_validation(name):
    """Such a name passed validation and failed the DAG later (MissingInputException in rule collect)."""
    with pytest.raises(
        ConfigError,
        match=rf"\$\.datasets\[0\]: data set name '{name}' {RULE}\n"
        rf"  config key \$\.dataset_options\.{name}: data set name '{name}' {RULE}\n"
        rf"  config key \$\.experiments\.uci\.datasets\[0\]: data set name '{name}'",
    ):
        validate_config(user_data_set(name))
    validate_config(user_data_set("my_data_2"))


def test_a_variant_name_outside_the_method_rule_is_refused():
    with pytest.raises(ConfigError, match=r"\$\.variants\.Orth2: variant name 'Orth2' must match \[a-z\]\[a-z0-9_\]\*"):
        validate_config(with_nested(variants={"Orth2": {"method": "odvgp"}}))


def test_registered_names_keep_the_rules_the_workflow_matches_paths_by():
    from gpstudy import paths
    from gpstudy.data import DATASETS
    from gpstudy.methods import METHODS

    assert all(paths.DATASET_NAME.allows(name) for name in DATASETS)
    assert all(paths.METHOD_NAME.allows(name) for name in [*METHODS, *BASE["variants"]])
    assert all(paths.EXPERIMENT_NAME.allows(name) for name in BASE["experiments"])
    assert not paths.DATASET_NAME.allows("boston\n") and not paths.METHOD_NAME.allows("2svgp")
    constraints = (REPO / "rules/common.smk").read_text()  # the wildcard constraints ask the same rules
    assert "dataset=paths.DATASET_NAME.pattern," in constraints and "method=paths.METHOD_NAME.pattern," in constraints
    assert 'experiment="|".join(map(re.escape, EXPERIMENTS))' in constraints  # names as alternatives, escaped


def test_study_jobs_batch_all_splits_by_default():
    config = with_changes(datasets=["snelson", "boston"], splits=3)
    jobs = study_jobs(config)
    assert len(jobs) == 9 + 5 + 4  # snelson; uci and odvgp on boston
    assert TrainJob("uci", "boston", "fbnn", 500, (0, 1, 2)) in jobs
    assert TrainJob("odvgp", "boston", "orthnat", 300, (0, 1, 2)) in jobs
    assert TrainJob("snelson", "snelson", "svgp", 2, (0,)) in jobs
    assert jobs[-1].label == "0-2" and splits_of("0-2") == (0, 1, 2) and splits_of("4-4") == (4,)


def test_splits_per_job_cuts_the_batches():
    config = with_changes(datasets=["boston"], splits=5, splits_per_job=2)
    boston = [job.splits for job in study_jobs(config) if (job.method, job.M) == ("svgp", 100)]
    assert boston == [(0, 1), (2, 3), (4,)]
    one_each = with_changes(datasets=["boston"], splits=5, splits_per_job=1)
    assert len(study_jobs(one_each)) == 5 * (5 + 4)  # one job per split (uci and odvgp)


def test_data_plan():
    config = with_changes(splits=3)
    assert data_plan(config, "boston").splits == (0, 1, 2)
    assert data_plan(config, "boston").protocol == "random"
    snelson = data_plan(config, "snelson")
    assert snelson.splits == (0,) and snelson.train_size == 100
    assert data_plan(config, "mnist").protocol == "given" and data_plan(config, "mnist").splits == (0,)
    assert data_plan(with_changes(split_protocol="index_files"), "concrete").protocol == "index_files"
    first_rows = with_nested(
        dataset_options={"airline": {"protocol": "first_rows", "splits": 3, "train_size": 70000, "test_size": 10000}}
    )
    validate_config(first_rows)
    assert data_plan(first_rows, "airline") == DataPlan("first_rows", (0,), 70000, 10000)  # one split only


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"training": {"kernel": "rbff"}}, r"data set 'snelson', method 'svgp': unknown kernel 'rbff'; known: arccos"),
        (
            {"training": {"kernel": "arccos", "kernel_options": {"degree": 3}}},
            r"kernel_options of 'arccos', \$\.degree",
        ),
        (
            {"training": {"likelihood": "softmax", "likelihood_options": {"classes": 3}}},
            r"likelihood 'softmax' is for classification, but data set 'snelson'",
        ),
        ({"dataset_options": {"boston": {"beta00": 0.1}}}, r"\$\.dataset_options\.boston: .*'beta00' was unexpected"),
        (
            {"dataset_options": {"boston": {"methods": {"svgp": {"beta0": 0.1}}}}},
            r"\$\.dataset_options\.boston\.methods\.svgp: .*'beta0' was unexpected",
        ),
        ({"methods": {"gpnet": {"objective": "natural"}}}, r"\$\.methods\.gpnet\.objective: 'natural' is not one of"),
        (
            {
                "dataset_options": {"mine": {"source": {"file": "m.csv", "sha256": "0" * 64}, "format": "csv"}},
                "datasets": ["mine"],
            },
            r"\$\.dataset_options\.mine: a user data set \(one with a `source`\) needs target, task",
        ),
    ],
)
def test_settings_that_do_not_fit_name_the_run(changes, message):
    with pytest.raises(ConfigError, match=message):
        validate_config(with_nested(**changes))


def test_a_kernel_without_random_features_beside_the_rfe_network_is_refused_before_any_job():
    """Before ``pairing_problems`` these configs validated, and every such gpnet or fbnn job failed when it
    built its RFE network (ValueError: CNNGP has no random-feature map)."""
    with pytest.raises(
        ConfigError,
        match=r"method 'gpnet': method 'gpnet' with network 'rfe': kernel 'cnngp' with "
        r"options \{\}: CNNGP has no random-feature map; network 'rfe' needs one: "
        r"use a kernel with one \(rbf, .*arccos\) or network: ntk$",
    ):
        validate_config(with_nested(methods={"gpnet": {"kernel": "cnngp"}}))
    with pytest.raises(
        ConfigError,
        match=r"method 'fbnn' with network 'rfe': kernel 'arccos' with options "
        r"\{'depth': 3\}: ArcCosine of depth 3 has no random-feature map",
    ):
        validate_config(with_nested(methods={"fbnn": {"kernel": "arccos", "kernel_options": {"depth": 3}}}))
    validate_config(with_nested(methods={"fbnn": {"kernel": "arccos", "kernel_options": {"depth": 1}}}))


def test_a_regression_method_on_a_classification_data_set_fails_before_any_job():
    config = with_nested(
        datasets=["mnist"], experiments={"images": {"datasets": ["mnist"], "methods": {"exact": [10]}}}
    )
    with pytest.raises(
        ConfigError,
        match=r"data set 'mnist', method 'exact': method 'exact' .*cannot train with "
        r"likelihood 'softmax'; it supports gaussian",
    ):
        validate_config(config)
    without_likelihood = copy.deepcopy(config)
    without_likelihood["dataset_options"]["mnist"] = {"likelihood": "gaussian"}
    with pytest.raises(
        ConfigError,
        match=r"likelihood 'gaussian' is for regression, but data set 'mnist' is a "
        "classification task",
    ):
        validate_config(without_likelihood)


def test_a_config_pins_the_sha256_of_files_gpstudy_has_no_trusted_hash_for():
    config = with_nested(dataset_options={"airline": {"sha256": {"2008.csv.bz2": "ab" * 32}}})
    validate_config(config)
    specs = {spec.path: spec.sha256 for spec in dataset_of(config, "airline").files("random")}
    assert specs == {"2008.csv.bz2": "ab" * 32, "plane-data.csv": None}
    assert dataset_of(config, "airline").unpinned_files() == ["plane-data.csv"]
    assert {spec.sha256 for spec in dataset_of(BASE, "airline").files("random")} == {None}


@pytest.mark.parametrize(
    "pins, message",
    [
        (
            {"airline": {"sha256": {"2009.csv.bz2": "ab" * 32}}},
            r"airline\.sha256: data set 'airline' has no file '2009\.csv\.bz2'",
        ),
        (
            {"airline": {"sha256": {"2008.csv.bz2": "AB" * 32}}},
            r"airline\.sha256\['2008\.csv\.bz2'\]: 'ABAB.*' does not match",
        ),
        ({"boston": {"sha256": {"data.txt": "ab" * 32}}}, r"boston\.sha256: boston/data\.txt is pinned by gpstudy"),
        (
            {
                "mine": {
                    "source": {"file": "mine.csv", "sha256": "0" * 64},
                    "format": "csv",
                    "target": -1,
                    "task": "regression",
                    "sha256": {"mine.csv": "ab" * 32},
                }
            },
            r"mine\.sha256: a user data set pins its file with source\.sha256",
        ),
    ],
)
def test_a_wrong_pin_names_its_key(pins, message):
    with pytest.raises(ConfigError, match=message):
        validate_config(with_nested(dataset_options=pins))


def test_an_airline_experiment_has_appendix_b2s_settings():
    """config.yaml's airline experiment (Table 1), enabled by listing the data set."""
    config = with_changes(datasets=[*BASE["datasets"], "airline"])
    validate_config(config)
    assert [(job.method, job.M, job.splits) for job in study_jobs(config) if job.experiment == "airline"] == [
        (method, m, (0,)) for method in ("svgp", "gpnet", "fbnn") for m in (100, 500)
    ]
    assert data_plan(config, "airline") == DataPlan("random", (0,), 700000, 100000)
    runs = {method: run_settings(config, "airline", method=method, M=100) for method in ("svgp", "gpnet", "fbnn")}
    assert {
        (run.iterations, run.batch_size, run.lr, run.pretrain_iterations, run.pretrain_subset) for run in runs.values()
    } == {(10000, 500, 0.003, 1000, 1000)}
    assert [runs[method].pretrain for method in ("svgp", "gpnet", "fbnn")] == [False, True, True]
    assert [runs[method].options["online_hyperparameters"] for method in ("svgp", "gpnet", "fbnn")] == [
        True,
        True,
        False,
    ]
    for method in ("gpnet", "fbnn"):
        assert (runs[method].options["measurement"], runs[method].options["hidden_units"]) == ("noisy", 1000)
    assert (runs["gpnet"].options["beta0"], runs["gpnet"].options["xi"]) == (0.1, 0.1)
    assert "airline" not in BASE["datasets"]  # not in the default study


def test_a_user_data_set_is_a_known_data_set():
    config = with_nested(
        datasets=["mine"],
        dataset_options={
            "mine": {
                "source": {"url": "https://example.org/mine.csv", "sha256": "0" * 64},
                "format": "csv",
                "target": -1,
                "task": "regression",
            }
        },
        experiments={"uci": {"datasets": ["boston", "mine"]}},
    )
    validate_config(config)
    assert [job.dataset for job in study_jobs(config)] == ["mine"] * 5 and data_plan(config, "mine").splits == tuple(
        range(20)
    )


def classification(**gpnet):
    """MNIST with GPNet's non-conjugate objective, the CNN-GP prior and the NTK network, then ``gpnet``'s changes."""
    options = {"objective": "elbo", "kernel": "cnngp", "kernel_options": {"image_shape": [1, 28, 28]}, "network": "ntk"}
    experiment = {"datasets": ["mnist"], "methods": {"gpnet": [64]}}
    return with_nested(
        datasets=["mnist"],
        experiments={"classification": experiment},
        dataset_options={"mnist": {"methods": {"gpnet": options | gpnet}}},
    )


def test_gpnet_trains_a_softmax_with_the_ntk_network_only():
    validate_config(classification())
    validate_config(classification(network_options={"filters": [8, 8], "strides": [1, 2], "output_tanh": False}))
    with pytest.raises(
        ConfigError,
        match=r"method 'gpnet': options of method 'gpnet': network 'rfe' outputs one "
        r"latent function, but likelihood 'softmax' has one per class; .* ntk",
    ):
        validate_config(classification(network="rfe"))
    with pytest.raises(ConfigError, match=r"network_options of network 'ntk', \$\.strides\[0\]: 3 is not one of"):
        validate_config(classification(network_options={"strides": [3]}))
    with pytest.raises(ConfigError, match=r"network_options of network 'rfe', \$: .*'filters' was unexpected"):
        validate_config(with_nested(methods={"gpnet": {"network_options": {"filters": [8]}}}))
    with pytest.raises(ConfigError, match="cannot train with likelihood 'softmax'; it supports gaussian$"):
        validate_config(classification(objective="conjugate"))


def test_the_classification_experiment_runs_svgp_with_fixed_inducing_images():
    """Table 2's SVGP row: M = 1000 training images as fixed Z, the CNN-GP prior kept, the robust-max
    likelihood (GPNet keeps the data set's softmax), the authors' code's batch, learning rate and iterations;
    on both data sets of the experiment."""
    config = with_changes(datasets=["mnist", "cifar10"], run_experiments=["classification"])
    validate_config(config)
    assert [(job.dataset, job.method, job.M) for job in study_jobs(config)] == [
        (dataset, method, m) for dataset in ("mnist", "cifar10") for method, m in (("gpnet", 64), ("svgp", 1000))
    ]
    for dataset, shape in (("mnist", [1, 28, 28]), ("cifar10", [3, 32, 32])):
        svgp = run_settings(config, dataset, method="svgp", M=1000)
        assert svgp.options == {
            "inducing_init": "training_points",
            "learn_inducing_inputs": False,
            "online_hyperparameters": False,
        }
        assert (svgp.kernel, svgp.kernel_options) == ("cnngp", {"image_shape": shape})
        assert (svgp.likelihood, svgp.likelihood_options) == ("robustmax", {"classes": 10})
        assert run_settings(config, dataset, method="gpnet", M=64).likelihood == "softmax"
        assert (svgp.batch_size, svgp.lr, svgp.iterations) == (64, 0.0003, 10000)
    quick = load_config(REPO / "config.yaml", REPO / "configs/classification-quick.yaml")
    assert quick["experiments"]["classification"]["methods"]["svgp"] == [32]
    quick_svgp = run_settings(quick, "mnist", method="svgp", M=32)
    assert quick_svgp.options == svgp.options and quick_svgp.likelihood == "robustmax"


def test_quoted_names_a_table_of_one_of_the_experiments_metrics():
    assert BASE["experiments"]["classification"]["quoted"] == "table2"
    with pytest.raises(
        ConfigError, match=r"\$\.experiments\.classification\.quoted: 'table3' is not one of \['table2'\]"
    ):
        validate_config(with_nested(experiments={"classification": {"quoted": "table3"}}))
    with pytest.raises(
        ConfigError,
        match=r"\$\.experiments\.uci\.quoted: table 'table2' holds error_rate, not one of "
        r"the experiment's metrics \(rmse, test_ll\)",
    ):
        validate_config(with_nested(experiments={"uci": {"quoted": "table2"}}))


def test_run_experiments_picks_the_experiments_that_train():
    config = with_changes(datasets=["boston", "mnist"], run_experiments=["autogp"])
    assert {job.experiment for job in study_jobs(config)} == {"autogp"}
    assert {job.experiment for job in study_jobs(with_changes(datasets=["boston", "mnist"]))} == {
        "uci",
        "odvgp",
        "autogp",
        "classification",
    }
    with pytest.raises(ConfigError, match=r"\$\.run_experiments\[1\]: unknown experiment 'autgp'"):
        validate_config(with_changes(run_experiments=["uci", "autgp"]))


def test_an_overlay_drops_a_method_by_an_empty_list_of_m_and_experiments_by_run_experiments(tmp_path):
    """Overlays merge key by key, so a method or experiment they leave out stays: `[]` drops a method from
    one experiment, `run_experiments` keeps only the experiments it names."""
    overlay = tmp_path / "no_fbnn.yaml"
    overlay.write_text("experiments:\n  uci:\n    methods: {fbnn: []}\nrun_experiments: [uci, odvgp]\n")
    config = load_config(REPO / "config.yaml", overlay)
    jobs = study_jobs(config)
    assert {job.experiment for job in jobs} == {"uci", "odvgp"}
    assert {job.method for job in jobs if job.experiment == "uci"} == {"svgp", "gpnet"}
    assert {(job.method, job.M) for job in study_jobs(BASE) if job.experiment == "uci"} >= {("fbnn", 500)}


@pytest.mark.parametrize(
    "likelihood, key",
    [
        ({"likelihood_options": {"classes": 2}}, "dataset_options.mnist.likelihood_options"),
        ({"likelihood": "bernoulli", "likelihood_options": {}}, "dataset_options.mnist.likelihood"),
    ],
)
def test_a_registered_data_set_with_other_classes_than_its_labels_is_refused(likelihood, key):
    """MNIST's ten labels under softmax with classes: 2 (or bernoulli) trained 'ok', reading past the class axis."""
    config = with_nested(datasets=["mnist"], run_experiments=["classification"])
    config["dataset_options"]["mnist"].update(likelihood)
    config["experiments"]["classification"]["methods"] = {"gpnet": [64]}  # svgp sets its own likelihood
    with pytest.raises(
        ConfigError,
        match=rf"config key \$.{key}: data set 'mnist' has 10 classes \(labels 0..9\), "
        rf"but {key} declares 2",
    ):
        validate_config(config)


def test_a_user_data_set_named_like_a_built_in_one_is_refused_naming_the_key():
    """A user CSV called boston trained as Boston, the tables printing the paper's Boston N, D and values beside it."""
    own = {"source": {"file": "boston.csv", "sha256": "0" * 64}, "format": "csv", "target": -1, "task": "regression"}
    with pytest.raises(
        ConfigError,
        match=r"config key \$.dataset_options.boston.source: 'boston' is a built-in data "
        r"set, whose tables print the paper's numbers beside it; .* \(e.g. my_boston\)",
    ):
        validate_config(with_nested(datasets=["boston"], dataset_options={"boston": own}))
    validate_config(
        with_nested(
            datasets=["my_boston"], dataset_options={"my_boston": own}, experiments={"uci": {"datasets": ["my_boston"]}}
        )
    )


HOSTILE_NAMES = ["../esc", ".."]  # names that would write outside the study's folders, were they path parts


def config_strings(value):
    """Every string of a config, its keys and values."""
    if isinstance(value, dict):
        return {string for key, item in value.items() for string in {key, *config_strings(item)}}
    if isinstance(value, list):
        return {string for item in value for string in config_strings(item)}
    return {value} if isinstance(value, str) else set()


def with_string(value, old, new):
    """A copy of a config with every key and value ``old`` replaced by ``new``."""
    if isinstance(value, dict):
        return {(new if key == old else key): with_string(item, old, new) for key, item in value.items()}
    if isinstance(value, list):
        return [with_string(item, old, new) for item in value]
    return new if value == old else value


def planned_paths(config):
    """Every file or folder the study's plan writes (gpstudy.paths' patterns filled in as the rules fill them)."""
    from gpstudy import paths
    from gpstudy.study import experiment_targets

    found = list(experiment_targets(config))
    for job in study_jobs(config):
        found += [paths.BATCH.format(**job.wildcards()), paths.CHECKPOINT.format(**job.wildcards())]
        found += [paths.RUN.format(**job.wildcards(), split=split) for split in job.splits]
        found += [
            paths.CURVES_FIGURE.format(experiment=job.experiment),
            paths.REFERENCE.format(experiment=job.experiment),
        ]
    for name in {job.dataset for job in study_jobs(config)}:
        plan = data_plan(config, name)
        fields = {"dataset": name, "protocol": plan.protocol}
        found += [paths.RAW_MANIFEST.format(**fields), paths.TABLE.format(**fields)]
        found += [f"data/raw/{name}/{spec.path}" for spec in dataset_of(config, name).files(plan.protocol)]
        found += [paths.SPLIT.format(**fields, split=split) for split in plan.splits]
        found += [paths.PRETRAINED.format(**fields, split=split) for split in plan.splits]
    return found


def test_no_config_string_writes_outside_the_study_folders():
    """Each string of a config (a data set, experiment, method, variant, a user file's name or URL, every
    value and key), replaced in turn wherever it occurs by a name that climbs out: the config is refused,
    or no planned path has a part that climbs (``..``) or is absolute."""
    source = {"url": "https://example.org/mine.csv", "file": "mine.csv", "sha256": "0" * 64}
    config = with_nested(
        datasets=["boston", "mine"],
        splits=1,
        dataset_options={"mine": {"source": source, "format": "csv", "target": "y", "task": "regression"}},
        variants={"svgp_fast": {"method": "svgp", "label": "SVGP fast"}},
        experiments={
            "mine_exp": {"datasets": ["boston", "mine"], "methods": {"svgp_fast": [5]}, "outputs": ["tables"]}
        },
        run_experiments=["mine_exp", "uci"],
    )
    validate_config(config)
    assert len(planned_paths(config)) > 50
    walked = []
    for string in sorted(config_strings(config)):
        for text in HOSTILE_NAMES:
            changed = with_string(config, string, text)
            try:
                validate_config(changed)
            except ConfigError:
                continue
            walked.append(string)
            climbing = [p for p in planned_paths(changed) if Path(p).is_absolute() or ".." in Path(p).parts]
            assert not climbing, f"{string!r} -> {text!r} plans {climbing[:3]}"
    assert {BASE["gpu_lock_dir"], "SVGP fast"} <= set(walked)  # no path parts: they pass


NESTED_ALIASES = pytest.mark.parametrize(  # config files of aliases of aliases, and the key each is refused at
    "text, key",
    [
        ("\n".join(f"l{n}: &l{n} [{', '.join([f'*l{n - 1}' if n else '1'] * 9)}]" for n in range(10)), r"\$\.l9"),
        (  # Snakemake's merge of --configfile copies these mappings: 9^10 values (docs/configuration.md)
            "\n".join(
                f"l{n}: &l{n} {{{', '.join(f'k{i}: *l{n - 1}' if n else f'k{i}: 1' for i in range(9))}}}"
                for n in range(10)
            ),
            r"\$\.l9\.k0\.k0\.k0\.k0",
        ),
        ("training: {kernel_options: &a {k: [1, *a]}}", r"\$\.training\.kernel_options\.k"),  # one that holds itself
    ],
    ids=["billion-laughs", "of-mappings", "recursive"],
)
REFUSAL_SECONDS = 5  # the project's own reading of such a file refuses it within this (measured: under 0.1 s)


@NESTED_ALIASES
def test_the_cli_refuses_a_config_of_nested_aliases_in_seconds(tmp_path, text, key):
    """``gpstudy settings`` on nested aliases: one line naming the file and key, without expanding them."""
    (tmp_path / "bomb.yaml").write_text(text)
    command = [
        str(Path(sys.executable).with_name("gpstudy")),
        "settings",
        "--dataset",
        "boston",
        "--method",
        "svgp",
        "--M",
        "10",
    ]
    run = subprocess.run(
        [*command, "--configfile", str(tmp_path / "bomb.yaml")], capture_output=True, text=True, timeout=120
    )
    assert run.returncode != 0 and "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert re.search(rf"config file \S+bomb\.yaml: key {key}: more than 100000 values", run.stderr), run.stderr


@NESTED_ALIASES
def test_settings_refuse_nested_aliases_within_a_bounded_time(tmp_path, capsys, text, key):
    """Issue 49: what a user can run before handing such a file to Snakemake, whose own merge of --configfile
    hangs on the mappings' (docs/configuration.md): ``gpstudy settings`` refuses it within REFUSAL_SECONDS."""
    from gpstudy.cli import REFUSED, main

    (tmp_path / "bomb.yaml").write_text(text)
    words = ["settings", "--dataset", "boston", "--method", "svgp", "--M", "10", "--configfile"]
    tic = time.perf_counter()
    with pytest.raises(SystemExit) as exit:
        main([*words, str(tmp_path / "bomb.yaml")])
    assert time.perf_counter() - tic < REFUSAL_SECONDS and exit.value.code == REFUSED
    assert re.search(rf"bomb\.yaml: key {key}: more than 100000 values", capsys.readouterr().err)


@pytest.mark.parametrize("label, refused", [("SVGP $M^$", True), ("SVGP $\\frac{1}{$", True), ("SVGP $M^2$", False)])
def test_a_variant_label_matplotlib_cannot_draw_is_refused_naming_it(tmp_path, monkeypatch, capsys, label, refused):
    """Issue 49, defect 6: a label with broken mathtext passed validation and crashed the learning-curve plot
    (the figure's legend is drawn by matplotlib's mathtext parser); ``gpstudy settings`` refuses it in one line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gpstudy.cli import main

    figure = plt.figure()
    figure.text(0.5, 0.5, label)
    if refused:  # the plot's own failure, which the refusal stands for
        with pytest.raises(ValueError):
            figure.savefig(tmp_path / "label.png")
    else:
        figure.savefig(tmp_path / "label.png")
    plt.close(figure)
    monkeypatch.chdir(tmp_path)
    Path("labels.yaml").write_text(yaml.safe_dump({"variants": {"svgp_m": {"method": "svgp", "label": label}}}))
    words = ["settings", "--dataset", "boston", "--method", "svgp_m", "--M", "5", "--configfile", "labels.yaml"]
    if not refused:
        main(words)
        return
    with pytest.raises(SystemExit) as exit:
        main(words)
    line = capsys.readouterr().err
    assert exit.value.code == 2 and len(line.splitlines()) == 1
    assert f"config key $.variants.svgp_m.label: {label!r} is not mathtext" in line, line


@pytest.mark.parametrize(
    "options, named",
    [({"train_size": 600}, "600 train + -94 test"), ({"train_size": 400, "test_size": 200}, "400 train + 200 test")],
)
def test_sizes_larger_than_the_registered_data_set_are_refused(tmp_path, monkeypatch, capsys, options, named):
    """Issue 49: a train_size past Boston's 506 rows passed planning and failed in the split job."""
    from gpstudy.cli import main

    monkeypatch.chdir(tmp_path)
    Path("sizes.yaml").write_text(yaml.safe_dump({"dataset_options": {"boston": options}}))
    with pytest.raises(SystemExit) as exit:
        main(["settings", "--dataset", "boston", "--method", "svgp", "--M", "5", "--configfile", "sizes.yaml"])
    line = capsys.readouterr().err
    assert exit.value.code == 2 and "config key $.dataset_options.boston.train_size / test_size: " in line
    assert f"random split of 506 rows into {named} is impossible" in line, line
