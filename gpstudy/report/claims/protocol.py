"""Whether a study's runs are at the paper's settings: config.yaml holds them, so a run supports a claim
only when its settings and its data set's splits are config.yaml's. A short study (configs/quick.yaml)
differs, and :func:`settings_gaps` says where and how, e.g. ``iterations 200, not 10000; 2 splits, not 20``."""

from dataclasses import asdict
from typing import Any

from gpstudy.report.claims.evidence import cell_key
from gpstudy.study import data_plan, method_names, run_settings, study_jobs, user_datasets

NOT_RESULTS = ("device", "seed", "checkpoint_minutes", "checkpoint_every", "eval_every", "torch_compile")  # settings
# that change where, when or how a run computes, or which random draws it takes, not what the paper's protocol is
PRETRAINING = ("pretrain_iterations", "pretrain_subset", "pretrain_lr")  # settings of a run that pretrains only


def settings_gaps(config: dict[str, Any], paper_config: dict[str, Any]) -> dict[str, str]:
    """For every cell of the study ``config`` trains (experiment, data set, method, M), how its settings
    differ from ``paper_config``'s (config.yaml: the paper's) for the same cell; cells at the paper's
    settings are left out, and so are a user's own data sets and variants (the paper has none). Keys:
    :func:`gpstudy.report.claims.evidence.cell_key`."""
    gaps = {}
    papers_methods = method_names(paper_config)
    for job in study_jobs(config):
        if job.dataset in user_datasets(config) or job.method not in papers_methods:
            continue
        ours, papers = (_described(each, job.dataset, job.method, job.M) for each in (config, paper_config))
        differences = [
            f"{key} {ours.get(key)}, not {papers.get(key)}"
            for key in sorted({*ours, *papers})
            if ours.get(key) != papers.get(key) and key != "splits"
        ]
        if ours["splits"] != papers["splits"]:
            differences.append(f"{ours['splits']} splits, not {papers['splits']}")
        if differences:
            gaps[cell_key(job.experiment, job.dataset, job.method, job.M)] = "; ".join(differences)
    return gaps


def _described(config: dict[str, Any], dataset: str, method: str, M: int) -> dict[str, Any]:
    """A cell's settings that decide its numbers: the run's (its method's options among them; pretraining's
    only where it pretrains), the split protocol and sizes, and the number of splits."""
    settings = asdict(run_settings(config, dataset, method=method, M=M))
    unused = NOT_RESULTS + (() if settings["pretrain"] else PRETRAINING)
    described = {key: value for key, value in settings.items() if key not in unused and key != "options"}
    described.update(settings["options"])
    plan = data_plan(config, dataset)
    described.update(
        protocol=plan.protocol,
        train_size=plan.train_size,
        test_size=plan.test_size,
        drop_features=list(plan.drop_features),
        splits=len(plan.splits),
    )
    return described
