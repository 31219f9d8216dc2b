"""Helpers shared by the rules: the path grammar and the config lookups rules need."""

from gpstudy import paths
from gpstudy.config import data_plan, validate_config

validate_config(config)

PROTOCOLS = ["random", "index_files", "given"]


wildcard_constraints:
    dataset="[a-z0-9_]+",
    protocol="|".join(PROTOCOLS),
    split=r"\d+",


def split_files():
    """Every split file of the configured data sets."""
    files = []
    for name in config["datasets"]:
        plan = data_plan(config, name)
        files += expand(paths.SPLIT, dataset=name, protocol=plan.protocol, split=plan.splits)
    return files


def split_sizes(wildcards):
    """Training and test sizes of the random protocol for one data set (None: the defaults)."""
    plan = data_plan(config, wildcards.dataset)
    return {"train_size": plan.train_size, "test_size": plan.test_size}
