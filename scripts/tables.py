"""Rule tables: one metric's table (mean +- s.e. over splits, the paper's value beside each cell, quoted rows
where the experiment asks) of one experiment."""

from pathlib import Path

from gpstudy.report.results import read_runs
from gpstudy.report.tables import experiment_table, write_table
from gpstudy.runtime.job import start_job

start_job(snakemake.log[0])
runs = read_runs(snakemake.input[0])
write_table(
    experiment_table(
        runs,
        snakemake.wildcards.experiment,
        snakemake.wildcards.metric,
        snakemake.params.quoted,
        snakemake.params.own_data,
    ),
    Path(snakemake.output[0]).with_suffix(""),
    snakemake.params.labels,
)
