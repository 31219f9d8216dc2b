"""Training: run settings, the one fit loop, and a whole run from split to metrics."""

from gpstudy.training.fit import BatchSampler, fit
from gpstudy.training.run import predict, train_run, train_split
from gpstudy.training.settings import RunSettings, run_settings

__all__ = ["BatchSampler", "RunSettings", "fit", "predict", "run_settings", "train_run", "train_split"]
