"""Training: the one fit loop, and a batch of runs from splits to metrics (settings: ``gpstudy.study``)."""

from gpstudy.training.fit import BatchSampler, fit
from gpstudy.training.run import exact_reference, predict, pretrain_splits, run_job, run_splits, train_splits

__all__ = [
    "BatchSampler",
    "exact_reference",
    "fit",
    "predict",
    "pretrain_splits",
    "run_job",
    "run_splits",
    "train_splits",
]
