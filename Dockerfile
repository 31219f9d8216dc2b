# The locked CPU environment (locks/requirements-cpu.lock, docs/installation.md) as an image, for Snakemake's
# `--sdm apptainer` (the Snakefile's container:). gpstudy itself is not in it: a job imports the checkout that
# planned it, which Apptainer binds as the working directory. Never built here (no Docker or Apptainer on the
# machines that wrote it); tests/test_lock.py checks it statically. Build, from the repository root:
#   docker build -t gpstudy-cpu . && apptainer build gpstudy-cpu.sif docker-daemon://gpstudy-cpu:latest
FROM python:3.11-slim-bookworm
COPY locks/requirements-cpu.lock requirements-cpu.lock
RUN pip install --no-cache-dir --require-hashes -r requirements-cpu.lock \
        --extra-index-url https://download.pytorch.org/whl/cpu \
    && rm requirements-cpu.lock
