"""Helpers shared by the rules: the config lookups that turn wildcards into inputs and params."""

import functools
import os
import re
from dataclasses import asdict

from gpstudy import paths
from gpstudy.report.claims import claims_path, settings_gaps
from gpstudy.report.palette import variant_methods
from gpstudy.data import PROTOCOLS
from gpstudy.runtime.environment import DEFAULT_THREADS
from gpstudy.runtime.job import check_same_code
from gpstudy.metrics import METRIC_NAMES, TASK_METRICS
from gpstudy.study import (data_plan, data_stage_params, experiment_targets, load_config, merge, own_data,
                           parse_config_entries, show_study_console, splits_of, study_jobs, validate_config,
                           variant_labels)
from gpstudy.study.settings import exact_gp_settings, run_settings
from gpstudy.study.validate import check_mirror, tabulate_params
from gpstudy.training.run import PRETRAIN_THREADS, pretraining_reads

check_same_code(os.path.join(workflow.basedir, "gpstudy"))  # the plan's code is the checkout's, as every job checks
# Snakemake read a --config value nested in a mapping as a string ('training={lr: 0.1}': '0.1'); its entries read as
# the gpstudy commands read them (YAML values, as a config file's) replace what it read
merge(config, parse_config_entries(workflow.config_settings.config_args or []))
validate_config(config)

JOBS = study_jobs(config)
EXPERIMENTS = sorted({job.experiment for job in JOBS})


onstart:  # before any job, in the process that runs the fetch jobs (a local rule); not in a dry run, which fetches nothing
    check_mirror(config, sorted({job.dataset for job in JOBS}))


wildcard_constraints:  # names as alternatives are escaped: each matches itself only
    dataset=paths.DATASET_NAME.pattern,
    protocol="|".join(map(re.escape, PROTOCOLS)),
    split=r"\d+",
    splits=r"\d+-\d+",
    experiment="|".join(map(re.escape, EXPERIMENTS)) or "none",
    method=paths.METHOD_NAME.pattern,
    M=r"\d+",
    metric="|".join(map(re.escape, sorted({m for metrics in TASK_METRICS.values() for m in metrics}))),


def split_path(dataset, split):
    """The split file of a data set under the config's protocol."""
    return paths.SPLIT.format(dataset=dataset, protocol=data_plan(config, dataset).protocol, split=split)


def pretrained_path(dataset, split):
    """The pretrained hyperparameters of a data set's split."""
    return paths.PRETRAINED.format(dataset=dataset, protocol=data_plan(config, dataset).protocol, split=split)


def settings(wildcards):
    """The settings (gpstudy.study.RunSettings) of a training job, for its wildcards (job_settings)."""
    return job_settings(wildcards.dataset, wildcards.method, int(wildcards.M))


@functools.cache
def job_settings(dataset, method, M):
    """The settings of the training jobs of a method at M on a data set, resolved once: their device is
    resolved here, in Snakemake's process, which both derives the job's ``gpu`` resource from it and
    hands it to the job in its params (cpu, cuda or a pinned cuda:K; never "auto"). On a cluster each
    job's own Snakemake rebuilds its params, so a cluster profile gives a concrete device (profiles/slurm)."""
    return run_settings(config, dataset, method=method, M=M)


def job_splits(wildcards):
    """The split indices a training job trains as one batch."""
    return list(splits_of(wildcards.splits))


def job_split_files(wildcards):
    return [split_path(wildcards.dataset, split) for split in job_splits(wildcards)]


def job_hyperparameters(wildcards):
    """The pretrained hyperparameters the job's splits start from, if its settings pretrain."""
    if not settings(wildcards).pretrain:
        return []
    return [pretrained_path(wildcards.dataset, split) for split in job_splits(wildcards)]


def job_settings_params(wildcards):
    return asdict(settings(wildcards))


def job_labels(wildcards):
    return {"experiment": wildcards.experiment, "dataset": wildcards.dataset, "method": wildcards.method,
            "M": int(wildcards.M)}


def gpus(run):
    """The ``gpu`` resource of a job with settings ``run``: 1 on CUDA (device cuda or cuda:K), else 0 (the local
    profile caps the sum at the GPU slots it has)."""
    return int(run.device.startswith("cuda"))


def job_gpus(wildcards):
    return gpus(settings(wildcards))


def job_runtime(wildcards, attempt):
    """Minutes of a training job: train_resources' runtime, times the attempt (a cluster's retry of a job
    stopped at its time limit asks for more; it resumes from its checkpoint)."""
    return config["train_resources"]["runtime"] * attempt


def pretrain_settings(wildcards):
    """Settings of exact-GP pretraining for a data set's split (the exact GP is what is pretrained)."""
    return exact_settings(wildcards.dataset)


@functools.cache
def exact_settings(dataset):
    """The exact GP's settings on a data set (pretraining, Figure 4's reference), resolved once."""
    return exact_gp_settings(config, dataset)


def pretrain_settings_params(wildcards):
    """The settings pretraining reads (gpstudy.training.run.PRETRAINING_READS): a training-only one (lr,
    iterations, eval_every, the checkpoint schedule) changed reruns training, not pretraining."""
    return pretraining_reads(pretrain_settings(wildcards))


def pretrain_gpus(wildcards):
    return gpus(pretrain_settings(wildcards))


def data_params(stage):
    """The params of a data rule: every setting its output depends on (gpstudy.study.data_stage_params)."""

    def params(wildcards):
        return data_stage_params(config, wildcards.dataset, wildcards.protocol)[stage]

    return params


def tabulate_spec(wildcards):
    """The tabulate rule's params: its data stage's and a user classification data set's declared classes."""
    return tabulate_params(config, wildcards.dataset, wildcards.protocol)


def batch_dirs(experiment=None):
    """The folders of every training job (of one experiment): the jobs' outputs."""
    return [paths.BATCH.format(**job.wildcards()) for job in JOBS
            if experiment in (None, job.experiment)]


def run_files(experiment=None):
    """The metrics files of every run (of one experiment), inside their jobs' folders."""
    return [paths.RUN.format(**job.wildcards(), split=split) for job in JOBS
            if experiment in (None, job.experiment) for split in job.splits]


def experiment_runs(wildcards):
    """The metrics files of an experiment's runs (run_files)."""
    return run_files(wildcards.experiment)


def quoted_table(wildcards):
    """The paper table whose rows of other papers' methods an experiment's tables quote, or None."""
    return config["experiments"][wildcards.experiment].get("quoted")


def experiment_own_data(wildcards):
    """An experiment's data sets whose files are not the registry's (own_data): no paper's numbers beside them."""
    return own_data(config, wildcards.experiment)


def variant_names(wildcards):
    """The names the tables and figures print for the config's variants (gpstudy.study.variant_labels)."""
    return variant_labels(config)


def variant_bases(wildcards):
    """Each config variant -> the registered method it runs (gpstudy.report.palette.variant_methods): its hue."""
    return variant_methods(config)


def curve_axis(wildcards):
    """What an experiment's learning curves are drawn against: its ``curve_axis``, iteration by default."""
    return config["experiments"][wildcards.experiment].get("curve_axis", "iteration")


def table_labels(wildcards):
    """The report's label of an experiment's table: its metric."""
    return {"table": METRIC_NAMES[wildcards.metric]}


def posterior_dataset(wildcards):
    """The one data set of an experiment with the ``posteriors`` output."""
    return config["experiments"][wildcards.experiment]["datasets"][0]


def posterior_reference(wildcards):
    """The settings of the exact-GP reference drawn beside the posteriors: the data set's, as pretrained."""
    return exact_settings(posterior_dataset(wildcards))


def posterior_gpus(wildcards):
    return gpus(posterior_reference(wildcards))


def posterior_reference_params(wildcards):
    return asdict(posterior_reference(wildcards))


def reference_inputs(wildcards):
    """What the exact-GP reference of a posteriors experiment needs: split 0 and its hyperparameters."""
    dataset = posterior_dataset(wildcards)
    return {"split": split_path(dataset, 0),
            "hyperparameters": [pretrained_path(dataset, 0)] if posterior_reference(wildcards).pretrain else []}


def posterior_inputs(wildcards):
    """What a posteriors figure draws: the experiment's jobs, split 0's training points, the exact GP."""
    dataset = posterior_dataset(wildcards)
    return {"runs": batch_dirs(wildcards.experiment), "split": split_path(dataset, 0),
            "reference": paths.REFERENCE.format(experiment=wildcards.experiment)}


def claim_posteriors(wildcards=None):
    """The posteriors the claims are measured on, per experiment that draws them (rule claims' params)."""
    drawn = {}
    for experiment in EXPERIMENTS:
        if "posteriors" in config["experiments"][experiment].get("outputs", []):
            dataset = config["experiments"][experiment]["datasets"][0]
            drawn[experiment] = {"dataset": dataset, "reference": paths.REFERENCE.format(experiment=experiment),
                                 "split": split_path(dataset, 0), "runs": run_files(experiment)}
    return drawn


def claims_inputs(wildcards):
    """The claims' files: the claims, the run table and each posteriors experiment's runs and reference."""
    drawn = claim_posteriors()
    return {"claims": str(claims_path()), "runs": paths.RUNS,
            "posteriors": [path for experiment, files in drawn.items()
                           for path in (files["reference"], files["split"], *batch_dirs(experiment))]}


def claims_gaps(wildcards):
    """How each trained cell's settings differ from config.yaml's, the paper's (rule claims' params)."""
    return paper_gaps()


@functools.cache
def paper_gaps():
    return settings_gaps(config, load_config(os.path.join(workflow.basedir, "config.yaml")))


def final_targets():
    """The study's outputs: the run tables, each experiment's learning curves and configured outputs, and the
    paper's claims checked on them."""
    return [paths.RUNS, paths.CURVES, *experiment_targets(config), *multiext(paths.CLAIMS, ".md", ".csv", ".html")]
