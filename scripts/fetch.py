"""Rule fetch: download (or copy from the mirror) and checksum one data set's files."""

from pathlib import Path

from gpstudy.data import fetch_dataset
from gpstudy.runtime.job import start_job
from gpstudy.study import dataset_of

start_job(snakemake.log[0])
manifest = Path(snakemake.output[0])
fetch_dataset(dataset_of(snakemake.config, snakemake.wildcards.dataset), snakemake.wildcards.protocol, manifest.parent, manifest,
              mirror=snakemake.config["mirror"])  # not in params: where the checksummed files are found
