"""Rule tabulate: read one data set's raw files into a compact table."""

from pathlib import Path

from gpstudy.data import prepare_table
from gpstudy.runtime.job import start_job
from gpstudy.study import dataset_of

start_job(snakemake.log[0])
# the data set from the config: its reader, a function, has no way back from its plain form in params, which
# Snakemake compares (data_stage_params resolves it alike)
prepare_table(
    dataset_of(snakemake.config, snakemake.wildcards.dataset),
    snakemake.wildcards.protocol,
    Path(snakemake.input[0]),
    Path(snakemake.output[0]),
    classes=[tuple(pair) for pair in snakemake.params.spec.get("classes", ())],
)
