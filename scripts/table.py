"""Rule table: read one data set's raw files into a compact table."""

from pathlib import Path

from gpstudy.config import dataset_of
from gpstudy.data import prepare_table
from gpstudy.io import log_to

log_to(snakemake.log[0])
prepare_table(dataset_of(snakemake.config, snakemake.wildcards.dataset), snakemake.wildcards.protocol, Path(snakemake.input[0]).parent,
              Path(snakemake.output[0]))
