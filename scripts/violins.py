"""Rule violins: Figure 3, RMSE and test log-likelihood over splits per method, PBP beside, of one experiment."""

from pathlib import Path

import pandas as pd

from gpstudy.job import start_job
from gpstudy.plots import violins

start_job(snakemake.log[0])
runs = pd.read_csv(snakemake.input[0])
violins(runs, snakemake.wildcards.experiment, Path(snakemake.output.png), Path(snakemake.output.pdf))
