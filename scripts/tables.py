"""Rule tables: Tables 3 and 4 (mean +- s.e. over splits, the paper's value beside each cell) of one experiment."""

from pathlib import Path

import pandas as pd

from gpstudy.config import TABLE_METRICS
from gpstudy.job import start_job
from gpstudy.tables import experiment_table, write_table

start_job(snakemake.log[0])
runs = pd.read_csv(snakemake.input[0])
for metric in TABLE_METRICS:
    stem = Path(snakemake.output[metric][0]).with_suffix("")
    write_table(experiment_table(runs, snakemake.wildcards.experiment, metric), stem)
