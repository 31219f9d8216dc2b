"""Rule pretrain: exact-GP hyperparameters of one split."""

from pathlib import Path

import torch

from gpstudy.data import load_split
from gpstudy.io import write_json
from gpstudy.runtime.flags import keep_freed_memory
from gpstudy.runtime.job import start_job
from gpstudy.training import pretrain_splits
from gpstudy.training.run import pretraining_settings

start_job(snakemake.log[0])
keep_freed_memory()
torch.set_num_threads(snakemake.threads)
split = int(snakemake.wildcards.split)
read = snakemake.params.settings  # what pretraining reads (PRETRAINING_READS), its device resolved by Snakemake
settings = pretraining_settings(read)
splits = {split: load_split(snakemake.input[0])}
write_json(snakemake.output[0], pretrain_splits(splits, settings, Path(snakemake.params.checkpoint))[split])
