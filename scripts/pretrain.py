"""Rule pretrain: exact-GP hyperparameters of one split."""

import torch

from gpstudy.data import load_split
from gpstudy.io import write_json
from gpstudy.job import start_job
from gpstudy.memory import keep_freed_memory
from gpstudy.study import RunSettings
from gpstudy.training import pretrain_splits

start_job(snakemake.log[0])
keep_freed_memory()
torch.set_num_threads(snakemake.threads)
split = int(snakemake.wildcards.split)
settings = RunSettings(**snakemake.params.settings)
write_json(snakemake.output[0], pretrain_splits({split: load_split(snakemake.input[0])}, settings)[split])
