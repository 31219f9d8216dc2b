"""Rule split: write one standardized train/test split of a data set."""

from pathlib import Path

from gpstudy.data import prepare_split
from gpstudy.runtime.job import start_job
from gpstudy.study import dataset_of

start_job(snakemake.log[0])
# the data set from the config, as in scripts/tabulate.py: params hold its plain form, which Snakemake compares
prepare_split(
    dataset_of(snakemake.config, snakemake.wildcards.dataset),
    snakemake.wildcards.protocol,
    int(snakemake.wildcards.split),
    Path(snakemake.input.table),
    Path(snakemake.input.manifest),
    Path(snakemake.output[0]),
    seed=snakemake.params.spec["seed"],
    **snakemake.params.spec["options"],
)
