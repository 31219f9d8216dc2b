"""Rule tables: one metric's table (mean +- s.e. over splits, the paper's value beside each cell, quoted rows
where the experiment asks) of one experiment, and beside it the paper-ready LaTeX table (labelled tab:<its name>)."""

from pathlib import Path

from gpstudy.report.results import read_runs
from gpstudy.report.tables import experiment_table, write_paper_table, write_table
from gpstudy.runtime.job import start_job

start_job(snakemake.log[0])
runs = read_runs(snakemake.input[0])
table = experiment_table(
    runs,
    snakemake.wildcards.experiment,
    snakemake.wildcards.metric,
    snakemake.params.quoted,
    snakemake.params.own_data,
)
stem = Path(snakemake.output[0]).with_suffix("")
write_table(table, stem, snakemake.params.labels)
write_paper_table(table, snakemake.output.paper, f"tab:{stem.name}", snakemake.params.labels)
