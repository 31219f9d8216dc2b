"""Rule posteriors: Figure 4, each method's posterior beside the exact GP's on a 1-D data set (Snelson's)."""

from pathlib import Path

from gpstudy.data import load_split
from gpstudy.job import start_job
from gpstudy.plots import posteriors
from gpstudy.pretrain import read_hyperparameters
from gpstudy.results import collect_predictions
from gpstudy.study import RunSettings, variant_labels
from gpstudy.training import exact_reference

start_job(snakemake.log[0])
split = load_split(snakemake.input.split)
reference = exact_reference(split, read_hyperparameters(snakemake.input.hyperparameters),
                            RunSettings(**snakemake.params.settings))
posteriors(collect_predictions(snakemake.params.runs), reference,
               split.original_x(split.x_train)[:, 0], split.original_y(split.y_train),
               Path(snakemake.output.png), Path(snakemake.output.pdf), variant_labels(snakemake.config))
