"""gpstudy: regenerate the GPNet paper's study. See README.md."""

import os

from snakemake.utils import min_version

min_version("9.0")


configfile: os.path.join(workflow.basedir, "config.yaml")  # every default; a --configfile is merged over it


report: "report/workflow.rst"


# The image of the locked CPU environment (Dockerfile), used only under --sdm apptainer: never built or run here
container: "gpstudy-cpu.sif"


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/pretrain.smk"
include: "rules/train.smk"
include: "rules/aggregate.smk"


show_study_console(workflow)  # a line a job, with the study's jobs done of N and time left (gpstudy.study.console)


rule all:
    input:
        final_targets(),
    default_target: True
