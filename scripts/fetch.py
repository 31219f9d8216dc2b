"""Rule fetch: download (or copy from the mirror) and checksum one data set's files."""

from pathlib import Path

from gpstudy.data import fetch_dataset
from gpstudy.runtime.job import start_job
from gpstudy.study import dataset_of

start_job(snakemake.log[0])
manifest = Path(snakemake.output[0])
# the data set and the mirror from the config, not params: where the checksummed files are found (the mirror, a
# file's URLs) reruns nothing; what they are (path, sha256) is in params (data_stage_params), resolved alike
fetch_dataset(
    dataset_of(snakemake.config, snakemake.wildcards.dataset),
    snakemake.wildcards.protocol,
    manifest.parent,
    manifest,
    mirror=snakemake.config["mirror"],
)
