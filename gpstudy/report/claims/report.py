"""The claims measured on a study's evidence: one row per check with our number, its threshold and a
verdict (✓, ✗ or not run, never ✓ without runs at the paper's settings), and each claim's own verdict,
written as ``results/claims.csv`` (tidy), ``results/claims.md`` (a section per claim) and
``results/claims.html`` (one table, a page of the Snakemake report)."""

from pathlib import Path

import pandas as pd

from gpstudy.io import write_csv, write_text
from gpstudy.report.claims.catalog import Claim
from gpstudy.report.claims.evidence import Evidence, NotRun
from gpstudy.report.pages import write_page

PASS, FAIL, NOT_RUN = "✓", "✗", "not run"  # the verdicts
COLUMNS = [
    "claim",
    "experiment",
    "dataset",
    "subject",
    "measure",
    "value",
    "se",
    "n",
    "threshold",
    "verdict",
    "note",
    "claim_verdict",
    "holds_on",
    "kind",
    "quote",
]  # results/claims.csv, in this order
ABOUT = (
    "Each claim the GPNet paper makes about an experiment (gpstudy/report/claims/paper_claims.yaml, its words quoted), "
    f"measured on this study's runs. {PASS}: our runs support it; {FAIL}: they do not; {NOT_RUN}: its runs "
    "are absent or failed, or are not at the paper's settings (config.yaml's), which a claim needs: our "
    "number is then shown with the differences, and no verdict. A paired difference is ours minus the "
    "other's over the splits both ran, mean ± standard error (ddof 1; one draw has none). A claim holds on "
    "all its checks, or on most (more than half)."
)  # what claims.md and claims.html show above the claims
COLUMN_STYLES = {
    "Quoted": "min-width: 14em;",
    "Measure": "min-width: 10em;",
    "Note": "min-width: 12em;",
    "Verdict": "white-space: nowrap;",
}  # claims.html's columns: text wraps, not below these widths


def evaluate_claims(claims: list[Claim], evidence: Evidence) -> pd.DataFrame:
    """Every check of every claim on ``evidence`` (columns ``COLUMNS``).

    A check whose runs are absent or failed is not run (its note says which); one whose runs are not at
    the paper's settings is measured (our number shown) but not run, its note naming the differences.
    """
    rows = []
    for claim in claims:
        checks = []
        for planned in claim.plan():
            row = {
                "claim": claim.id,
                "experiment": claim.experiment,
                "dataset": planned.dataset,
                "subject": planned.subject,
                "measure": planned.measure,
                "holds_on": claim.holds_on,
                "kind": claim.kind,
                "quote": claim.quote,
            }
            try:
                outcome = planned.measure_on(evidence)
            except NotRun as reason:
                row.update(verdict=NOT_RUN, note=str(reason))
            else:
                gaps = [gap for cell in planned.cells if (gap := evidence.gap(*cell))]
                row.update(
                    value=outcome.value,
                    se=outcome.se,
                    n=outcome.n,
                    threshold=outcome.bound,
                    verdict=(PASS if outcome.passed else FAIL) if not gaps else NOT_RUN,
                    note=_gaps_note(gaps),
                )
            checks.append(row)
        verdict = claim_verdict(claim.holds_on, [row["verdict"] for row in checks])
        rows += [{**row, "claim_verdict": verdict} for row in checks]
    table = pd.DataFrame(rows, columns=COLUMNS)
    return table.astype({"n": "Int64"})


def claim_verdict(holds_on: str, verdicts: list[str]) -> str:
    """A claim's verdict from its checks': ``all``: ✓ if every check passed, ✗ if one failed; ``most``: ✓
    if more than half passed, ✗ if at least half failed; otherwise not run."""
    passed, failed, total = verdicts.count(PASS), verdicts.count(FAIL), len(verdicts)
    if holds_on == "all":
        return FAIL if failed else PASS if passed == total else NOT_RUN
    return PASS if 2 * passed > total else FAIL if 2 * failed >= total else NOT_RUN


def _gaps_note(gaps: list[str]) -> str:
    """The differences from the paper's settings of a check's cells, each said once."""
    if not gaps:
        return ""
    differences = dict.fromkeys(part for gap in gaps for part in gap.split("; "))
    return "not the paper's settings: " + "; ".join(differences)


def write_claims(table: pd.DataFrame, stem: str | Path) -> None:
    """``evaluate_claims``' table as ``stem.csv``, ``stem.md`` and ``stem.html``, each written atomically."""
    stem = Path(stem)
    write_csv(stem.with_name(stem.name + ".csv"), table)
    write_text(stem.with_name(stem.name + ".md"), claims_markdown(table))
    write_page(stem.with_name(stem.name + ".html"), *_claims_page(table))


def _counts(table: pd.DataFrame) -> str:
    """How many claims have each verdict, e.g. "Claims: 6 ✓, 0 ✗, 6 not run."."""
    verdicts = table.drop_duplicates("claim")["claim_verdict"]
    return (
        "Claims: "
        + ", ".join(f"{int((verdicts == verdict).sum())} {verdict}" for verdict in (PASS, FAIL, NOT_RUN))
        + "."
    )


def _claims_page(table: pd.DataFrame) -> tuple[pd.DataFrame, str, pd.DataFrame]:
    """The claims as one table for ``gpstudy.report.pages.write_page``: a row per check, the claim's number, words,
    experiment, rule and verdict on its first check's row (every other claim's rows shaded); its caption;
    the cells' CSS."""
    rows, shaded = [], []
    for number, (_, checks) in enumerate(table.groupby("claim", sort=False), start=1):
        for index, row in enumerate(checks.itertuples()):
            claim = [str(number), row.quote, row.experiment, row.holds_on, row.claim_verdict]
            rows.append(
                [
                    *(claim if index == 0 else [""] * len(claim)),
                    row.dataset,
                    row.subject,
                    row.measure,
                    _number(row),
                    _text(row.threshold),
                    row.verdict,
                    _text(row.note),
                ]
            )
            shaded.append(number % 2 == 0)
    columns = pd.MultiIndex.from_tuples(
        [("Claim", name) for name in ("#", "Quoted", "Experiment", "Holds on", "Verdict")]
        + [("Check", name) for name in ("Data set", "Compared", "Measure", "Ours", "Threshold", "Verdict", "Note")]
    )
    frame = pd.DataFrame(rows, columns=columns)
    column_styles = [COLUMN_STYLES.get(name, "") for _, name in columns]
    styles = pd.DataFrame(
        [[("background: #f3f5f8;" if shade else "") + css for css in column_styles] for shade in shaded],
        columns=columns,
    )
    return frame, f"The paper's claims, checked. {ABOUT} {_counts(table)}", styles


def claims_markdown(table: pd.DataFrame) -> str:
    """The claims as Markdown: what the verdicts mean, a summary line per claim, then each claim's checks."""
    claims = table.drop_duplicates("claim")
    lines = [
        "# The paper's claims, checked",
        "",
        ABOUT,
        "",
        _counts(table),
        "",
        "| # | Claim | Experiment | Verdict |",
        "| --- | --- | --- | --- |",
    ]
    lines += [
        f"| {number} | {_escape(row.quote)} | {row.experiment} | {row.claim_verdict} |"
        for number, row in enumerate(claims.itertuples(), start=1)
    ]
    for number, (claim, checks) in enumerate(table.groupby("claim", sort=False), start=1):
        first = checks.iloc[0]
        lines += [
            "",
            f"## {number}. `{claim}`: {first['claim_verdict']}",
            "",
            f"> {first['quote']}",
            "",
            f"Kind `{first['kind']}`, on {first['experiment']}; holds on {first['holds_on']} of its checks.",
            "",
            "| Data set | Compared | Measure | Ours | Threshold | Verdict | Note |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        lines += [
            f"| {row.dataset} | {row.subject} | {_escape(row.measure)} | {_number(row)} | "
            f"{_escape(_text(row.threshold))} | {row.verdict} | {_escape(_text(row.note))} |"
            for row in checks.itertuples()
        ]
    return "\n".join(lines) + "\n"


def _number(row) -> str:
    """Our number: value, ± its standard error and the splits where there are several; — if not measured."""
    if pd.isna(row.value):
        return "—"
    text = f"{row.value:.4g}"
    return text if pd.isna(row.se) else f"{text} ± {row.se:.2g} (n = {row.n})"


def _text(value) -> str:
    return "" if pd.isna(value) else str(value)


def _escape(text: str) -> str:
    return text.replace("|", r"\|")
