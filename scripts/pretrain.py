"""Rule pretrain: exact-GP hyperparameters of one split."""

from dataclasses import replace
from pathlib import Path

import torch

from gpstudy.data import load_split
from gpstudy.io import write_json
from gpstudy.runtime.job import start_job
from gpstudy.runtime.flags import keep_freed_memory
from gpstudy.study import exact_gp_settings
from gpstudy.training import pretrain_splits

start_job(snakemake.log[0])
keep_freed_memory()
torch.set_num_threads(snakemake.threads)
split = int(snakemake.wildcards.split)
read = snakemake.params.settings  # what pretraining reads, its device as Snakemake's process resolved it
settings = replace(exact_gp_settings(snakemake.config, snakemake.wildcards.dataset, device=read["device"]), **read)
splits = {split: load_split(snakemake.input[0])}
write_json(snakemake.output[0], pretrain_splits(splits, settings, Path(snakemake.params.checkpoint))[split])
