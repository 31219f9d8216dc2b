"""Rule violins: Figure 3, the task's metrics (RMSE or error rate, and test log-likelihood) over splits per
method, PBP beside, of one experiment."""

from pathlib import Path

from gpstudy.report.plots import violins
from gpstudy.report.results import read_runs
from gpstudy.runtime.job import start_job

start_job(snakemake.log[0])
runs = read_runs(snakemake.input[0])
violins(
    runs,
    snakemake.wildcards.experiment,
    Path(snakemake.output.png),
    Path(snakemake.output.pdf),
    snakemake.params.labels,
    snakemake.params.bases,
)
