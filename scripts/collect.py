"""Rule collect: every run's metrics and learning curve into two tidy tables."""

from gpstudy.io import write_csv
from gpstudy.report.results import collect_curves, collect_runs
from gpstudy.runtime.job import start_job

start_job(snakemake.log[0])
write_csv(snakemake.output.runs, collect_runs(snakemake.params.metrics))
write_csv(snakemake.output.curves, collect_curves(snakemake.params.metrics))
