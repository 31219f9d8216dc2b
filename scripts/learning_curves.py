"""Rule learning_curves: test RMSE (error rate) against iteration or seconds per method, for one experiment."""

from pathlib import Path

import pandas as pd

from gpstudy.report.plots import learning_curves
from gpstudy.runtime.job import start_job

start_job(snakemake.log[0])
learning_curves(
    pd.read_csv(snakemake.input[0]),
    Path(snakemake.output[0]),
    snakemake.wildcards.experiment,
    snakemake.params.axis,
    snakemake.params.labels,
    snakemake.params.bases,
)
