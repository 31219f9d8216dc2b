"""Rule exact_reference: the exact GP's posterior on a 1-D data set's plotted grid (Figure 4's dashes), as
a table the claims are measured against."""

from gpstudy.data import load_split
from gpstudy.io import write_csv
from gpstudy.runtime.job import start_job
from gpstudy.study import RunSettings
from gpstudy.training import exact_reference
from gpstudy.training.pretrain import read_hyperparameters

start_job(snakemake.log[0])
write_csv(
    snakemake.output[0],
    exact_reference(
        load_split(snakemake.input.split),
        read_hyperparameters(snakemake.input.hyperparameters),
        RunSettings(**snakemake.params.settings),
    ),
)
