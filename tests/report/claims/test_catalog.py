"""The claims file: every claim parses, names a known kind with exactly its parameters, plans checks, and
quotes the paper word for word; a malformed claim is an error naming the file, the claim and the key."""

import re
from pathlib import Path

import pytest
import yaml

from gpstudy.report.claims import KINDS, claims_path, load_claims
from gpstudy.study import load_config

REPO = Path(__file__).resolve().parents[3]
PAPER = REPO.parent / "shared" / "papers" / "gpnet-full-with-appendix.txt"
MATH_ALPHANUMERIC = "[\U0001d400-\U0001d7ff]"  # the math italics of the text's MathML content markup


def readable(paper: str) -> str:
    """The paper's text with each formula written once, whitespace collapsed: the text repeats a formula
    as presentation, content (math italics) and TeX, e.g. ``M=20𝑀20M=20``, where a reader sees ``M=20``."""
    once = re.sub(rf"(\S+?){MATH_ALPHANUMERIC}\S*?\1", r"\1", paper)
    return re.sub(r"\s+", " ", once)


def test_every_claim_parses_and_plans_checks():
    claims = load_claims()
    assert len(claims) >= 8 and len({claim.id for claim in claims}) == len(claims)
    for claim in claims:
        assert claim.kind in KINDS
        assert claim.plan(), claim.id


def test_every_claim_is_measured_on_an_experiment_and_data_sets_of_the_study():
    config = load_config(REPO / "config.yaml")
    for claim in load_claims():
        assert set(claim.datasets) <= set(config["experiments"][claim.experiment]["datasets"]), claim.id
        methods = config["experiments"][claim.experiment]["methods"]
        for planned in claim.plan():
            for _, _, method, M in planned.cells:
                assert M in methods[method], (claim.id, method, M)


@pytest.mark.skipif(not PAPER.exists(), reason=f"the paper's text is not at {PAPER}")
def test_every_quote_is_the_papers_words():
    text = readable(PAPER.read_text(encoding="utf-8"))
    for claim in load_claims():
        assert claim.quote in text, claim.id


def test_the_readable_text_writes_a_formula_once():
    assert readable("When M=20𝑀20M=20, both\n and M=2,5𝑀25M=2,5.") == "When M=20, both and M=2,5."


def write_claims(tmp_path, entry: dict) -> Path:
    base = {
        "id": "a_claim",
        "quote": "A sentence.",
        "experiment": "uci",
        "datasets": ["boston"],
        "holds_on": "all",
        "kind": "paired",
        "relation": "better",
        "method": "gpnet",
        "versus": "svgp",
        "M": [100],
        "measure": "rmse",
    }
    path = tmp_path / "claims.yaml"
    path.write_text(
        yaml.safe_dump({"claims": [{key: value for key, value in {**base, **entry}.items() if value is not None}]})
    )
    return path


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"kind": "ordering"}, "kind 'ordering' is not one of"),
        ({"measure": None}, "'measure' is a required property"),
        ({"threshold": 1.0}, "('threshold' was unexpected)"),
        ({"relation": "worse"}, "key $.relation: 'worse' is not one of"),
        ({"measure": "mean_error"}, "sd_of is needed with a posterior measure"),
        ({"sd_of": "y"}, "sd_of is needed with a posterior measure"),
        ({"relation": "comparable"}, "tolerance and relative are needed with relation comparable"),
        ({"tolerance": 0.1, "relative": True}, "tolerance and relative are needed with relation comparable"),
        ({"holds_on": "some"}, "key $.holds_on"),
    ],
)
def test_a_malformed_claim_is_an_error_naming_file_claim_and_key(tmp_path, entry, message):
    path = write_claims(tmp_path, entry)
    with pytest.raises(ValueError) as error:
        load_claims(path)
    assert str(path) in str(error.value) and "claims[0] (a_claim)" in str(error.value)
    assert message in str(error.value)


def test_a_claim_file_of_the_kinds_parameters_loads(tmp_path):
    (claim,) = load_claims(write_claims(tmp_path, {}))
    assert claim.params == {"relation": "better", "method": "gpnet", "versus": "svgp", "M": [100], "measure": "rmse"}


def test_sd_ratio_takes_exactly_one_threshold(tmp_path):
    entry = {
        "kind": "sd_ratio",
        "relation": None,
        "method": None,
        "versus": None,
        "measure": None,
        "methods": ["fbnn"],
        "M": [20],
        "sd_of": "f",
        "near": 0.1,
    }
    for thresholds in ({}, {"above": 1.5, "below": 1.5}):
        with pytest.raises(ValueError, match="exactly one of above, below"):
            load_claims(write_claims(tmp_path, {**entry, **thresholds}))
    assert load_claims(write_claims(tmp_path, {**entry, "above": 1.5}))[0].kind == "sd_ratio"


def test_the_package_file_is_the_default():
    assert claims_path().name == "paper_claims.yaml" and claims_path().is_file()
