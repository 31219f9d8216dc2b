"""The study: its configuration (schema, files, validation), each run's resolved settings and the plan of jobs.

Config flows one way: ``config.yaml`` -> ``gpstudy.study`` -> rules and scripts -> ``gpstudy.training`` -> methods.
"""

from gpstudy.study.datasets import DATA_STAGES, DataPlan, data_plan, data_stage_params, dataset_of, user_datasets
from gpstudy.study.files import load_config, merge
from gpstudy.study.jobs import TrainJob, experiment_metrics, experiment_targets, splits_of, study_jobs
from gpstudy.study.schema import ConfigError, load_schema, object_schema, training_keys
from gpstudy.study.settings import (RunSettings, SettingsError, exact_gp_settings, method_names, run_settings,
                                    variant_labels)
from gpstudy.study.validate import validate_config

__all__ = ["DATA_STAGES", "ConfigError", "DataPlan", "RunSettings", "SettingsError", "TrainJob", "data_plan",
           "data_stage_params", "dataset_of", "exact_gp_settings", "experiment_metrics", "experiment_targets",
           "load_config", "load_schema", "merge", "method_names", "object_schema", "run_settings", "splits_of",
           "study_jobs", "training_keys", "user_datasets", "validate_config", "variant_labels"]
