"""Rule posteriors: Figure 4, each method's posterior beside the exact GP's on a 1-D data set (Snelson's)."""

from pathlib import Path

import pandas as pd

from gpstudy.data import load_split
from gpstudy.report.plots import posteriors
from gpstudy.report.results import collect_predictions
from gpstudy.runtime.job import start_job

start_job(snakemake.log[0])
split = load_split(snakemake.input.split)
posteriors(
    collect_predictions(snakemake.params.runs),
    pd.read_csv(snakemake.input.reference),
    split.original_x(split.x_train)[:, 0],
    split.original_y(split.y_train),
    Path(snakemake.output.png),
    Path(snakemake.output.pdf),
    snakemake.params.labels,
    snakemake.params.bases,
)
