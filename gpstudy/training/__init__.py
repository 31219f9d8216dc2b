"""Training: run settings, the one fit loop, and a whole run from split to metrics."""

from gpstudy.training.fit import BatchSampler, fit
from gpstudy.training.run import exact_reference, predict, pretrain_split, train_run, train_split
from gpstudy.training.settings import RunSettings, run_settings

__all__ = ["BatchSampler", "RunSettings", "exact_reference", "fit", "predict", "pretrain_split", "run_settings",
           "train_run", "train_split"]
