"""Rule train: one method on a batch of splits; each split's metrics.json and learning curve."""

from pathlib import Path

import torch

from gpstudy import paths
from gpstudy.runtime.flags import keep_freed_memory
from gpstudy.runtime.job import start_job
from gpstudy.study import RunSettings
from gpstudy.training import run_job

start_job(snakemake.log[0])
keep_freed_memory()
torch.set_num_threads(snakemake.threads)
splits = snakemake.params.splits
out = Path(snakemake.output[0])
run_job(
    dict(zip(splits, snakemake.input.splits)),
    RunSettings(**snakemake.params.settings),
    {s: out / paths.SPLIT_FOLDER.format(split=s) for s in splits},
    Path(snakemake.params.checkpoint),
    snakemake.params.labels,
    dict(zip(splits, snakemake.input.hyperparameters)),
    jobs_per_gpu=snakemake.params.jobs_per_gpu,
    gpu_lock_dir=snakemake.params.gpu_lock_dir,
)
