"""The paper's claims as rows: each claim of ``paper_claims.yaml`` measured on a study's runs by one of
a few generic kinds, with our number, its threshold and a verdict (results/claims.md and .csv)."""

from gpstudy.report.claims.catalog import Claim, claims_path, load_claims
from gpstudy.report.claims.evidence import Evidence, NotRun, Posterior, read_evidence
from gpstudy.report.claims.kinds import KINDS
from gpstudy.report.claims.protocol import settings_gaps
from gpstudy.report.claims.report import FAIL, NOT_RUN, PASS, evaluate_claims, write_claims

__all__ = [
    "Claim",
    "claims_path",
    "load_claims",
    "Evidence",
    "NotRun",
    "Posterior",
    "read_evidence",
    "KINDS",
    "settings_gaps",
    "FAIL",
    "NOT_RUN",
    "PASS",
    "evaluate_claims",
    "write_claims",
]
