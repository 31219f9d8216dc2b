"""Rule train: one method on one split; metrics.json, learning curve (and a checkpoint while running)."""

from pathlib import Path

import torch

from gpstudy.data import load_split
from gpstudy.io import log_to
from gpstudy.pretrain import read_hyperparameters
from gpstudy.training import RunSettings, train_run

log_to(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
train_run(load_split(snakemake.input.split), RunSettings(**snakemake.params.settings),
          Path(snakemake.output[0]).parent, snakemake.params.labels,
          hyperparameters=read_hyperparameters(snakemake.input.hyperparameters))
