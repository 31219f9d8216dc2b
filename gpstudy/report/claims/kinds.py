"""The kinds of claim, each implemented once: a kind turns a claim's parameters into checks (one per data
set, method and M it names), each a measurement on the :class:`~gpstudy.report.claims.evidence.Evidence` with
its threshold. The claims themselves are data (``gpstudy/report/claims/paper_claims.yaml``).

- ``improves_with_M``: a method's measure better at each larger M than at the M before (``paired``,
  ``better``, between consecutive M).
- ``close_to_exact``: on a posterior's grid, ``mean_error`` and ``sd_error`` at or below their thresholds.
- ``sd_ratio``: the median of sd / exact sd near the training data above (``above``) or below (``below``)
  a threshold.
- ``paired``: a method against another at equal M, by the paired difference over the splits both ran
  (a posterior measure: one draw, no standard error): ``better`` (more than two standard errors better
  than 0), ``no_worse`` (at most two standard errors worse), ``comparable`` (|difference| plus two
  standard errors within ``tolerance``, a fraction of the other's mean when ``relative``).
"""

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from gpstudy.report.claims.evidence import (
    HIGHER_IS_BETTER,
    POSTERIOR_MEASURES,
    RUN_MEASURES,
    SD_OF,
    Evidence,
    NotRun,
    measure_name,
    run_label,
)

SE_MULTIPLE = 2.0  # a paired difference is told from 0 by this many standard errors (the tables' agreement rule)

Cell = tuple[str, str, str, int]  # experiment, data set, method, M


@dataclass(frozen=True)
class Outcome:
    """A measured check: our number (a paired difference's mean, with its standard error over n splits;
    se NaN for one split) against its threshold, written out in ``bound``."""

    value: float
    se: float
    n: int
    bound: str
    passed: bool


@dataclass(frozen=True)
class Planned:
    """A check a claim asks for: its data set, what is compared (``subject``), how (``measure``), the cells
    whose runs it needs, and the measurement, which raises ``NotRun`` when they are absent."""

    dataset: str
    subject: str
    measure: str
    cells: tuple[Cell, ...]
    measure_on: Callable[[Evidence], Outcome]


def paired_outcome(
    evidence: Evidence,
    experiment: str,
    dataset: str,
    ours: tuple[str, int],
    theirs: tuple[str, int],
    measure: str,
    sd_of: str | None,
    relation: str,
    tolerance: float | None = None,
    relative: bool | None = None,
) -> Outcome:
    """``ours`` against ``theirs`` (method, M): the mean and standard error (ddof 1) of the per-split
    difference ours - theirs over the splits both ran, judged by ``relation`` (see the module)."""
    a, b = (evidence.values(experiment, dataset, method, M, measure, sd_of) for method, M in (ours, theirs))
    splits = a.index.intersection(b.index)
    if splits.empty:
        raise NotRun(f"no split where both {run_label(*ours)} and {run_label(*theirs)} ran on {dataset}")
    difference = (a[splits] - b[splits]).to_numpy()
    n = len(difference)
    mean = float(difference.mean())
    se = float(difference.std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan")
    margin = 0.0 if n == 1 else SE_MULTIPLE * se  # the differences' allowance for noise
    sign = -1.0 if measure in HIGHER_IS_BETTER else 1.0  # sign * difference < 0: ours better
    allowance = f"{SE_MULTIPLE:g} SE" if n > 1 else "0"  # the threshold in words, its value after a comma
    value = f", {SE_MULTIPLE:g} SE = {margin:.4g}" if n > 1 else ""
    if relation == "comparable":
        limit = tolerance * abs(float(b[splits].mean())) if relative else tolerance
        passed = abs(mean) + margin <= limit
        return Outcome(mean, se, n, f"|difference| + {allowance} ≤ {limit:.4g}{value}", bool(passed))
    if relation == "better":  # beyond the allowance, on the better side of 0
        passed = sign * mean < -margin
        bound = f"< -{allowance}" if sign > 0 else f"> {allowance}"
    else:  # no_worse: within the allowance, on the worse side of 0
        passed = sign * mean <= margin
        bound = f"≤ {allowance}" if sign > 0 else f"≥ -{allowance}"
    bound = bound.replace("-0", "0") + value
    return Outcome(mean, se, n, bound, bool(passed))


def _threshold_outcome(
    value: float, above: float | None = None, below: float | None = None, at_most: float | None = None
) -> Outcome:
    """One number (one draw) against one threshold: ``> above``, ``< below`` or ``≤ at_most``."""
    if above is not None:
        return Outcome(value, float("nan"), 1, f"> {above:g}", value > above)
    if below is not None:
        return Outcome(value, float("nan"), 1, f"< {below:g}", value < below)
    return Outcome(value, float("nan"), 1, f"≤ {at_most:g}", value <= at_most)


def _measure_text(params: dict) -> str:
    return measure_name(params["measure"], params.get("sd_of"))


def _difference_text(params: dict) -> str:
    return f"paired difference of {_measure_text(params)}"


def improves_with_M(experiment: str, dataset: str, params: dict) -> list[Planned]:
    """A check per pair of consecutive M: the larger M ``better`` than the smaller."""
    method = params["method"]
    return [
        Planned(
            dataset,
            f"{run_label(method, large)} vs {run_label(method, small)}",
            _difference_text(params),
            ((experiment, dataset, method, large), (experiment, dataset, method, small)),
            partial(
                _paired,
                experiment=experiment,
                dataset=dataset,
                ours=(method, large),
                theirs=(method, small),
                params={**params, "relation": "better"},
            ),
        )
        for small, large in itertools.pairwise(params["M"])
    ]


def paired(experiment: str, dataset: str, params: dict) -> list[Planned]:
    """A check per M: ``method`` against ``versus`` at that M."""
    return [
        Planned(
            dataset,
            f"{run_label(params['method'], M)} vs {run_label(params['versus'], M)}",
            _difference_text(params),
            ((experiment, dataset, params["method"], M), (experiment, dataset, params["versus"], M)),
            partial(
                _paired,
                experiment=experiment,
                dataset=dataset,
                ours=(params["method"], M),
                theirs=(params["versus"], M),
                params=params,
            ),
        )
        for M in params["M"]
    ]


def _paired(
    evidence: Evidence, experiment: str, dataset: str, ours: tuple[str, int], theirs: tuple[str, int], params: dict
) -> Outcome:
    return paired_outcome(
        evidence,
        experiment,
        dataset,
        ours,
        theirs,
        params["measure"],
        params.get("sd_of"),
        params["relation"],
        params.get("tolerance"),
        params.get("relative"),
    )


def close_to_exact(experiment: str, dataset: str, params: dict) -> list[Planned]:
    """Two checks per method and M: its ``mean_error`` and its ``sd_error``, each at most its threshold."""

    def measured(evidence: Evidence, method: str, M: int, measure: str) -> Outcome:
        value = evidence.values(experiment, dataset, method, M, measure, params["sd_of"]).iloc[0]
        return _threshold_outcome(float(value), at_most=params[measure])

    return [
        Planned(
            dataset,
            run_label(method, M),
            measure_name(measure, params["sd_of"]),
            ((experiment, dataset, method, M),),
            partial(measured, method=method, M=M, measure=measure),
        )
        for method in params["methods"]
        for M in params["M"]
        for measure in POSTERIOR_MEASURES
    ]


def sd_ratio(experiment: str, dataset: str, params: dict) -> list[Planned]:
    """A check per method and M: the median sd / exact sd within ``near`` of a training input."""

    def measured(evidence: Evidence, method: str, M: int) -> Outcome:
        value = evidence.near_data_ratio(experiment, dataset, method, M, params["sd_of"], params["near"])
        return _threshold_outcome(value, above=params.get("above"), below=params.get("below"))

    text = f"median sd / exact sd of {params['sd_of']} within {params['near']:g} of a training input"
    return [
        Planned(
            dataset,
            run_label(method, M),
            text,
            ((experiment, dataset, method, M),),
            partial(measured, method=method, M=M),
        )
        for method in params["methods"]
        for M in params["M"]
    ]


_M_LIST = {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1, "uniqueItems": True}
_METHODS = {"type": "array", "items": {"type": "string"}, "minItems": 1, "uniqueItems": True}
_MEASURE = {"enum": [*RUN_MEASURES, *POSTERIOR_MEASURES]}
_SD_OF = {"enum": sorted(SD_OF)}
_POSITIVE = {"type": "number", "exclusiveMinimum": 0}


@dataclass(frozen=True)
class Kind:
    """A kind of claim: its checks from (experiment, data set, parameters), and its parameters' schema."""

    plan: Callable[[str, str, dict], list[Planned]]
    properties: dict  # the JSON schema of each parameter
    required: tuple[str, ...]
    one_of: tuple[tuple[str, ...], ...] = ()  # exactly one of each group of parameters is given


KINDS: dict[str, Kind] = {
    "improves_with_M": Kind(
        improves_with_M,
        {"method": {"type": "string"}, "M": {**_M_LIST, "minItems": 2}, "measure": _MEASURE, "sd_of": _SD_OF},
        ("method", "M", "measure"),
    ),
    "close_to_exact": Kind(
        close_to_exact,
        {"methods": _METHODS, "M": _M_LIST, "sd_of": _SD_OF, "mean_error": _POSITIVE, "sd_error": _POSITIVE},
        ("methods", "M", "sd_of", "mean_error", "sd_error"),
    ),
    "sd_ratio": Kind(
        sd_ratio,
        {"methods": _METHODS, "M": _M_LIST, "sd_of": _SD_OF, "near": _POSITIVE, "above": _POSITIVE, "below": _POSITIVE},
        ("methods", "M", "sd_of", "near"),
        (("above", "below"),),
    ),
    "paired": Kind(
        paired,
        {
            "relation": {"enum": ["better", "no_worse", "comparable"]},
            "method": {"type": "string"},
            "versus": {"type": "string"},
            "M": _M_LIST,
            "measure": _MEASURE,
            "sd_of": _SD_OF,
            "tolerance": _POSITIVE,
            "relative": {"type": "boolean"},
        },
        ("relation", "method", "versus", "M", "measure"),
    ),
}
