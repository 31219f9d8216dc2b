"""Config validation names the offending key; the data plan follows the config."""

import copy
from pathlib import Path

import pytest
import yaml

from gpstudy.config import ConfigError, TrainJob, data_plan, splits_of, study_jobs, validate_config

REPO = Path(__file__).resolve().parents[1]
BASE = yaml.safe_load((REPO / "config.yaml").read_text())


def with_changes(**changes):
    config = copy.deepcopy(BASE)
    config.update(changes)
    return config


@pytest.mark.parametrize("path", ["config.yaml", "configs/quick.yaml"])
def test_shipped_configs_are_valid(path):
    validate_config(yaml.safe_load((REPO / path).read_text()))


@pytest.mark.parametrize("changes, message", [
    ({"datasetz": ["boston"]}, r"\$: Additional properties .*'datasetz' was unexpected"),
    ({"splits": "two"}, r"\$\.splits: 'two' is not of type 'integer'"),
    ({"splits": 0}, r"\$\.splits: 0 is less than the minimum of 1"),
    ({"split_protocol": "kfold"}, r"\$\.split_protocol: 'kfold' is not one of"),
    ({"datasets": ["boston", "bostn"]}, r"\$\.datasets\[1\]: unknown data set 'bostn'; known: airline"),
    ({"dataset_options": {"snelson": {"train_sise": 100}}}, r"\$\.dataset_options\.snelson: .*'train_sise'"),
    ({"dataset_options": {"nope": {}}}, r"\$\.dataset_options\.nope: unknown data set"),
    ({"experiments": {"uci": {"datasets": ["boston"], "methods": {"gpnet": [0]}}}},
     r"\$\.experiments\.uci\.methods\.gpnet\[0\]: 0 is less than the minimum of 1"),
    ({"experiments": {"uci": {"datasets": ["bostn"], "methods": {"gpnet": [5]}}}},
     r"\$\.experiments\.uci\.datasets\[0\]: unknown data set 'bostn'"),
    ({"method_options": {"svgpp": {}}}, r"\$\.method_options\.svgpp: unknown method"),
    ({"training": {"beta0": 2.0}}, r"\$\.training\.beta0: 2\.0 is greater than the maximum of 1"),
    ({"device": "gpu"}, r"\$\.device: 'gpu' does not match"),
    ({"splits_per_job": 0}, r"\$\.splits_per_job: 0 is less than the minimum of 1"),
    ({"jobs_per_gpu": 0}, r"\$\.jobs_per_gpu: 0 is less than the minimum of 1"),
])
def test_bad_config_names_the_key(changes, message):
    with pytest.raises(ConfigError, match=message):
        validate_config(with_changes(**changes))


def test_study_jobs_batch_all_splits_by_default():
    config = with_changes(datasets=["snelson", "boston"], splits=3)
    jobs = study_jobs(config)
    assert len(jobs) == 9 + 5
    assert TrainJob("uci", "boston", "fbnn", 500, (0, 1, 2)) in jobs
    assert TrainJob("snelson", "snelson", "svgp", 2, (0,)) in jobs
    assert jobs[-1].label == "0-2" and splits_of("0-2") == (0, 1, 2) and splits_of("4-4") == (4,)


def test_splits_per_job_cuts_the_batches():
    config = with_changes(datasets=["boston"], splits=5, splits_per_job=2)
    boston = [job.splits for job in study_jobs(config) if (job.method, job.M) == ("svgp", 100)]
    assert boston == [(0, 1), (2, 3), (4,)]
    one_each = with_changes(datasets=["boston"], splits=5, splits_per_job=1)
    assert len(study_jobs(one_each)) == 5 * 5  # today's one job per split


def test_data_plan():
    config = with_changes(splits=3)
    assert data_plan(config, "boston").splits == (0, 1, 2)
    assert data_plan(config, "boston").protocol == "random"
    snelson = data_plan(config, "snelson")
    assert snelson.splits == (0,) and snelson.train_size == 100
    assert data_plan(config, "mnist").protocol == "given" and data_plan(config, "mnist").splits == (0,)
    assert data_plan(with_changes(split_protocol="index_files"), "concrete").protocol == "index_files"
