"""Rule pretrain: exact-GP hyperparameters of one split."""

import torch

from gpstudy.runtime.flags import keep_freed_memory
from gpstudy.runtime.job import start_job
from gpstudy.training.run import pretrain_split

start_job(snakemake.log[0])
keep_freed_memory()
torch.set_num_threads(snakemake.threads)
# the settings: what pretraining reads (PRETRAINING_READS), its device resolved by Snakemake
pretrain_split(
    int(snakemake.wildcards.split),
    snakemake.input[0],
    snakemake.params.settings,
    snakemake.output[0],
    snakemake.params.checkpoint,
)
