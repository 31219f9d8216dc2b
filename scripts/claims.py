"""Rule claims: the paper's claims (gpstudy/report/claims/paper_claims.yaml) measured on the study's runs, with
verdicts."""

from pathlib import Path

from gpstudy.report.claims import evaluate_claims, load_claims, read_evidence, write_claims
from gpstudy.runtime.job import start_job

start_job(snakemake.log[0])
evidence = read_evidence(snakemake.input.runs, snakemake.params.posteriors, snakemake.params.gaps)
write_claims(evaluate_claims(load_claims(snakemake.input.claims), evidence), Path(snakemake.output.md).with_suffix(""))
