"""The paper's claims, read from ``gpstudy/report/claims/paper_claims.yaml`` (or another file of the same layout) and
checked: every claim names a known kind and exactly the parameters that kind takes."""

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import jsonschema
import yaml

from gpstudy.report.claims.evidence import POSTERIOR_MEASURES
from gpstudy.report.claims.kinds import KINDS, Planned

CLAIMS_FILE = "paper_claims.yaml"  # the package's claims
HOLDS_ON = ("all", "most")  # a claim holds when every check passes | when more than half of them do
COMMON = {
    "id": {"type": "string", "pattern": "^[A-Za-z0-9_]+$"},
    "quote": {"type": "string", "minLength": 1},
    "experiment": {"type": "string"},
    "datasets": {"type": "array", "items": {"type": "string"}, "minItems": 1, "uniqueItems": True},
    "holds_on": {"enum": list(HOLDS_ON)},
    "kind": {"enum": sorted(KINDS)},
}  # every claim's keys


@dataclass(frozen=True)
class Claim:
    """One claim of the paper: its words, where it is measured, and how (a kind and its parameters)."""

    id: str
    quote: str  # the paper's sentence(s), verbatim
    experiment: str  # the config experiment whose runs it is measured on
    datasets: tuple[str, ...]
    holds_on: str  # all | most of its checks
    kind: str  # a key of gpstudy.report.claims.kinds.KINDS
    params: dict  # the kind's parameters

    def plan(self) -> list[Planned]:
        """The claim's checks, data set by data set."""
        return [
            planned
            for dataset in self.datasets
            for planned in KINDS[self.kind].plan(self.experiment, dataset, self.params)
        ]


def claims_path() -> Path:
    """The package's claims file."""
    return Path(str(resources.files(__package__).joinpath(CLAIMS_FILE)))


def load_claims(path: str | Path | None = None) -> list[Claim]:
    """The claims of ``path`` (default: the package's), each checked against its kind's parameters.

    Raises:
        ValueError: naming the file, the claim and the key that is wrong.
    """
    path = Path(path) if path is not None else claims_path()
    document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(document, dict) or not isinstance(document.get("claims"), list):
        raise ValueError(f"{path}: a mapping with a list under `claims` expected")
    claims, seen = [], set()
    for index, entry in enumerate(document["claims"]):
        where = f"{path}: claims[{index}]" + (f" ({entry['id']})" if isinstance(entry, dict) and "id" in entry else "")
        problem = _problem(entry)
        if problem:
            raise ValueError(f"{where}: {problem}")
        if entry["id"] in seen:
            raise ValueError(f"{where}: id {entry['id']!r} is used twice")
        seen.add(entry["id"])
        params = {key: value for key, value in entry.items() if key not in COMMON}
        claims.append(
            Claim(
                entry["id"],
                entry["quote"],
                entry["experiment"],
                tuple(entry["datasets"]),
                entry["holds_on"],
                entry["kind"],
                params,
            )
        )
    return claims


def _problem(entry: object) -> str | None:
    """What is wrong with one claim's entry, or None."""
    if not isinstance(entry, dict):
        return "a mapping of a claim's keys expected"
    if entry.get("kind") not in KINDS:
        return f"kind {entry.get('kind')!r} is not one of {', '.join(sorted(KINDS))}"
    kind = KINDS[entry["kind"]]
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {**COMMON, **kind.properties},
        "required": [*COMMON, *kind.required],
    }
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(entry), key=lambda e: list(e.absolute_path))
    if errors:
        return f"key {errors[0].json_path}: {errors[0].message}"
    for group in kind.one_of:
        if sum(key in entry for key in group) != 1:
            return f"exactly one of {', '.join(group)} is needed"
    if "measure" in entry and (entry["measure"] in POSTERIOR_MEASURES) != ("sd_of" in entry):
        return "sd_of is needed with a posterior measure (mean_error, sd_error), and only there"
    comparable = entry.get("relation") == "comparable"
    if any((key in entry) != comparable for key in ("tolerance", "relative")):
        return "tolerance and relative are needed with relation comparable, and only there"
    return None
