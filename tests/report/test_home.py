"""The Snakemake report's home page (report/workflow.rst) opens on the headline: the claims' verdicts and Table
3's cells, read from the pages the study wrote (issue 48, item 7). The page is rendered as Snakemake renders it
(snakemake/report/__init__.py: Jinja2 with trim_blocks and lstrip_blocks, given the report's file records,
then docutils' HTML body); tests/test_workflow.py renders the whole report of the quick study."""

import html
import re
from pathlib import Path
from types import SimpleNamespace

import jinja2
import pandas as pd
from docutils.core import publish_parts

from gpstudy import paths
from gpstudy.report.claims import PASS, evaluate_claims, load_claims, read_evidence, write_claims
from gpstudy.report.tables import experiment_table, write_table

REPO = Path(__file__).resolve().parents[2]
STUDY = "gpstudy regenerates the study of the GPNet paper"  # the page's first words before the headline


def home_page(records: list[Path]) -> str:
    """The home page's HTML body for a report whose entries are ``records`` (result files)."""
    files = [SimpleNamespace(target=path.name, path=path) for path in records]
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    text = env.from_string((REPO / "report/workflow.rst").read_text()).render(
        snakemake=SimpleNamespace(config={}), categories={}, files=files
    )
    return publish_parts(text, writer_name="html")["html_body"]


def cells(page: str, table_id: str) -> list[str]:
    """The text of every th and td of the table ``table_id`` in ``page``."""
    table = page[page.index(f'<table id="{table_id}"') : page.index("</table>", page.index(f'<table id="{table_id}"'))]
    return [
        html.unescape(re.sub("<[^>]+>", "", cell))
        for cell in re.findall(r"<(?:th|td)\b[^>]*>(.*?)</t[hd]>", table, re.S)
    ]


def test_the_home_page_opens_on_the_claims_verdicts_and_table_3(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs = pd.DataFrame(
        [("uci", "boston", "svgp", 100, split, 2.5 + split, -2.4, "ok", 10000) for split in range(2)],
        columns=["experiment", "dataset", "method", "M", "split", "rmse", "test_ll", "status", "iterations"],
    ).assign(error_rate=float("nan"), seconds=1.0, device="cpu")
    Path(paths.RUNS).parent.mkdir(parents=True)
    runs.to_csv(paths.RUNS, index=False)
    table3 = Path(paths.TABLES.format(experiment="uci", metric="rmse"))
    write_table(experiment_table(runs, "uci", "rmse"), table3)
    claims = evaluate_claims(load_claims(), read_evidence(paths.RUNS, {}, {}))
    claims.loc[claims["claim"] == "uci_gpnet_no_worse_than_svgp", "claim_verdict"] = PASS  # one of each kind
    write_claims(claims, paths.CLAIMS)
    page = home_page([Path(f"{paths.CLAIMS}.html"), table3.with_name(table3.name + ".html")])

    assert page.index("The paper's claims, checked") < page.index("Table 3") < page.index(STUDY)
    summary = next(line for line in Path(f"{paths.CLAIMS}.md").read_text().splitlines() if line.startswith("Claims:"))
    assert summary == "Claims: 1 ✓, 0 ✗, 11 not run."
    verdicts = re.findall(r"<p><b>(\d+) ([^<]+)</b>:? ?([^<]*)</p>", page)
    first = claims.drop_duplicates("claim")  # a row per check: each claim's first
    assert [(count, verdict) for count, verdict, _ in verdicts] == [("1", "✓"), ("0", "✗"), ("11", "not run")]
    assert verdicts[0][2] == "uci_gpnet_no_worse_than_svgp" and verdicts[1][2] == ""
    assert verdicts[2][2].split(", ") == list(first.loc[first["claim_verdict"] == "not run", "claim"])
    page3 = (table3.with_name(table3.name + ".html")).read_text()
    assert cells(page, "T_uci_rmse") == cells(page3, "T_uci_rmse")  # Table 3's cells as its own page shows them
    assert "3.000 ± 0.354\n(2.897 ± 0.132) (✓)" in cells(page, "T_uci_rmse")
    assert "<caption" in page3 and "<caption" not in page  # one screen: the caption stays on the table's page


def test_without_claims_or_table_3_the_home_page_is_the_study_alone():
    page = home_page([Path("results/figures/learning_curves_uci.png")])
    assert "<table" not in page and "Table 3" not in page and page.index(STUDY) < 60
