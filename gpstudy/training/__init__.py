"""Training: run settings, the one fit loop, and a batch of runs from splits to metrics."""

from gpstudy.training.fit import BatchSampler, fit
from gpstudy.training.run import exact_reference, predict, pretrain_splits, run_job, run_splits, train_splits
from gpstudy.training.settings import RunSettings, run_settings

__all__ = ["BatchSampler", "RunSettings", "exact_reference", "fit", "predict", "pretrain_splits", "run_job", "run_settings",
           "run_splits", "train_splits"]
