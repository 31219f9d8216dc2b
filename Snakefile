"""gpstudy: regenerate the GPNet paper's study. See README.md."""

from snakemake.utils import min_version

min_version("9.0")


configfile: "config.yaml"


include: "rules/common.smk"
include: "rules/data.smk"


rule all:
    input:
        split_files(),
    default_target: True
