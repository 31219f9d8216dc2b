"""A regeneration against a reference (``gpstudy compare RESULTS REFERENCE``): two results folders (a
``results/``, or ``docs/reference/paper-cpu``), each holding ``runs.csv`` and, where the claims ran,
``claims.csv``.

Cells are (experiment, dataset, method, M, metric) over the runs both folders hold, ok on both: mean and
standard error as the tables compute them (``gpstudy.report.tables.mean_and_se``). A cell is within the
``Tolerance`` when its difference is at most ``se`` of the reference's standard error (where it has one:
two runs or more) and at most ``relative`` of the reference's mean. Beside the cells: each claim's verdict on
both sides, the runs one side lacks or failed, and the environments the runs recorded
(``gpstudy.runtime.environment.RECORDED``), named beside each cell whose difference coincides with a different one.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from gpstudy.report.claims import NOT_RUN
from gpstudy.report.results import LABELS, METRICS, read_runs
from gpstudy.report.tables import mean_and_se
from gpstudy.runtime.environment import RECORDED

RUNS_FILE, CLAIMS_FILE = "runs.csv", "claims.csv"  # what a results folder holds (paths.RUNS, paths.CLAIMS)
CELL = ["experiment", "dataset", "method", "M"]  # a cell of the tables, with a metric
ENVIRONMENT = ["device", "dtype", *RECORDED]  # what a run records of its machine and code
SETTINGS = ["iterations"]  # a run's settings that runs.csv records, named like the environment where they differ
CHECK = ["claim", "dataset", "subject", "measure"]  # one check of a claim in claims.csv
NOT_RECORDED = "not recorded"  # an environment field an older runs.csv lacks
ABSENT = "absent"  # a claim's verdict where its side has no such claim


@dataclass(frozen=True)
class Tolerance:
    """How far a cell may move and still count as reproduced: at most ``se`` of the reference's standard
    error (skipped where it has none) and at most ``relative`` of the reference's mean. The defaults keep
    what a CPU of another vector width changed in stable runs (2.2e-6 relative, issue 37) and flag what it
    changed in a rounding-sensitive one (Snelson GPNet M = 2: 4.9% in RMSE)."""

    se: float = 0.1
    relative: float = 1e-3

    def __post_init__(self):
        if not (self.se >= 0 and self.relative >= 0):
            raise ValueError(f"tolerances must be non-negative numbers, not se={self.se}, relative={self.relative}")


@dataclass(frozen=True)
class Folder:
    """One side of a comparison: its runs (``read_runs``) and claims (None: no claims.csv)."""

    path: Path
    runs: pd.DataFrame
    claims: pd.DataFrame | None


def read_folder(path: Path) -> Folder:
    """A results folder's runs.csv and claims.csv (if any).

    Raises:
        ValueError: no such folder, no runs.csv in it, or either file not such a table (naming it).
    """
    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"{path}: no such folder (a results folder holds {RUNS_FILE}, tables/, {CLAIMS_FILE})")
    if not (path / RUNS_FILE).is_file():
        raise ValueError(f"{path}: no {RUNS_FILE} in it (a results folder holds {RUNS_FILE}, tables/, {CLAIMS_FILE})")
    claims_file = path / CLAIMS_FILE
    return Folder(path, read_runs(path / RUNS_FILE), read_claims(claims_file) if claims_file.is_file() else None)


def read_claims(path: Path) -> pd.DataFrame:
    """``claims.csv`` (``gpstudy.report.claims.write_claims``), checked for the columns compared."""
    try:
        claims = pd.read_csv(path)
    except (pd.errors.EmptyDataError, pd.errors.ParserError) as error:
        raise ValueError(f"{path}: not a table of claims ({error})") from None
    missing = [column for column in [*CHECK, "value", "claim_verdict"] if column not in claims]
    if missing:
        raise ValueError(f"{path}: no column {', '.join(missing)} (not a claims.csv of gpstudy?)")
    return claims


def compare_cells(results: pd.DataFrame, reference: pd.DataFrame, tolerance: Tolerance) -> pd.DataFrame:
    """Each cell over the runs both tables hold, ok on both: CELL, metric, n, mean and se of each side
    (``results_``/``reference_``), difference (results - reference), se_units (difference / the reference's
    se), relative (difference / |reference's mean|), within (the tolerance), and differs: what else differs
    between the cell's runs on the two sides (``run_differences``)."""
    labels = ok_on_both(results, reference)
    sides = {name: runs.merge(labels, on=LABELS) for name, runs in (("results", results), ("reference", reference))}
    frames = []
    for metric in METRICS:
        stats = [
            mean_and_se(runs, metric, CELL).rename(
                columns=lambda column, name=name: column if column in CELL else f"{name}_{column}"
            )
            for name, runs in sides.items()
        ]
        frames.append(stats[0].merge(stats[1], on=CELL, how="outer").assign(metric=metric))
    cells = pd.concat(frames, ignore_index=True)
    cells["n"] = cells[["results_n", "reference_n"]].max(axis=1).astype(int)
    difference = cells["results_mean"] - cells["reference_mean"]
    same = difference == 0  # 0 / 0 is no difference
    cells["difference"] = difference
    cells["se_units"] = (difference / cells["reference_se"]).mask(same, 0.0)
    cells["relative"] = (difference / cells["reference_mean"].abs()).mask(same, 0.0)
    within_se = cells["se_units"].abs().le(tolerance.se) | cells["reference_se"].isna()
    cells["within"] = within_se & cells["relative"].abs().le(tolerance.relative)  # NaN (one side only): beyond
    differs = run_differences(sides["results"], sides["reference"])
    cells = cells.merge(differs, on=CELL, how="left").fillna({"differs": ""})
    cells["metric"] = pd.Categorical(cells["metric"], METRICS)  # sorted in runs.csv's order of metrics
    cells = cells.sort_values([*CELL, "metric"], ignore_index=True).astype({"metric": str})
    return cells[
        [
            *CELL,
            "metric",
            "n",
            "results_mean",
            "results_se",
            "reference_mean",
            "reference_se",
            "difference",
            "se_units",
            "relative",
            "within",
            "differs",
        ]
    ]


def ok_on_both(results: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """The LABELS of the runs both tables hold with status ok."""
    both = results[LABELS + ["status"]].merge(reference[LABELS + ["status"]], on=LABELS, suffixes=("", "_reference"))
    return both.loc[(both["status"] == "ok") & (both["status_reference"] == "ok"), LABELS]


def run_differences(results: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """Per cell (CELL), the environment and settings fields whose values differ between its runs on the two
    sides, as "field: results' values against the reference's" joined by "; " (column differs)."""
    rows = []
    for cell, ours in results.groupby(CELL, sort=False):
        theirs = reference.merge(ours[LABELS], on=LABELS)
        parts = [
            f"{field} {_values(ours, field)} against {_values(theirs, field)}"
            for field in [*SETTINGS, *ENVIRONMENT]
            if _values(ours, field) != _values(theirs, field)
        ]
        rows.append((*cell, "; ".join(parts)))
    return pd.DataFrame(rows, columns=[*CELL, "differs"])


def _values(runs: pd.DataFrame, field: str) -> str:
    """The distinct values of ``field`` over ``runs``, "not recorded" for an empty one, joined by " or "."""
    return " or ".join(sorted({NOT_RECORDED if pd.isna(value) else str(value) for value in runs[field]}))


def environments(results: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """Each environment field (ENVIRONMENT) over all runs of each side: field, results, reference, differ."""
    rows = [(field, _values(results, field), _values(reference, field)) for field in ENVIRONMENT]
    table = pd.DataFrame(rows, columns=["field", "results", "reference"])
    return table.assign(differ=table["results"] != table["reference"])


def unmatched_runs(results: pd.DataFrame, reference: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The runs one side lacks ("only_results", "only_reference") and those ok on one side and failed on the
    other ("status"; columns LABELS, status, status_reference)."""
    both = results[LABELS + ["status"]].merge(
        reference[LABELS + ["status"]], on=LABELS, how="outer", suffixes=("", "_reference"), indicator=True
    )
    ok = both["status"].eq("ok"), both["status_reference"].eq("ok")
    return {
        "only_results": both.loc[both["_merge"] == "left_only", LABELS],
        "only_reference": both.loc[both["_merge"] == "right_only", LABELS],
        "status": both.loc[(both["_merge"] == "both") & (ok[0] != ok[1]), [*LABELS, "status", "status_reference"]],
    }


def compare_claims(results: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """Each claim's verdict on both sides (ABSENT where a side lacks it), whether they are the same, and
    the largest relative change of its checks' values (NaN where none is measured on both)."""
    verdicts = (
        results.drop_duplicates("claim")[["claim", "claim_verdict"]]
        .merge(
            reference.drop_duplicates("claim")[["claim", "claim_verdict"]],
            on="claim",
            how="outer",
            suffixes=("_results", "_reference"),
            sort=False,
        )
        .fillna({"claim_verdict_results": ABSENT, "claim_verdict_reference": ABSENT})
    )
    order = list(dict.fromkeys([*reference["claim"], *results["claim"]]))
    verdicts = verdicts.set_index("claim").loc[order].reset_index()
    checks = results[[*CHECK, "value"]].merge(reference[[*CHECK, "value"]], on=CHECK, suffixes=("", "_reference"))
    change = ((checks["value"] - checks["value_reference"]) / checks["value_reference"].abs()).abs()
    change = change.mask(checks["value"] == checks["value_reference"], 0.0)
    largest = change.groupby(checks["claim"]).max().rename("largest_change")
    verdicts = verdicts.rename(columns={"claim_verdict_results": "results", "claim_verdict_reference": "reference"})
    verdicts["same"] = verdicts["results"] == verdicts["reference"]
    return verdicts.merge(largest, left_on="claim", right_index=True, how="left")


@dataclass(frozen=True)
class Comparison:
    """What ``compare`` found; ``reproduced`` and ``report()`` say it."""

    results: Folder
    reference: Folder
    tolerance: Tolerance
    partial: bool  # runs (and claims) of the reference that the results lack are not differences
    cells: pd.DataFrame  # compare_cells
    claims: pd.DataFrame | None  # compare_claims; None: claims.csv on neither side, or on one (claims_note)
    runs: dict[str, pd.DataFrame]  # unmatched_runs
    environment: pd.DataFrame  # environments
    identical_runs: tuple[int, int]  # runs ok on both sides whose metrics are equal bit for bit, of how many

    @property
    def claims_note(self) -> str:
        """Why the claims are not compared ("" where they are)."""
        present = [folder.path for folder in (self.results, self.reference) if folder.claims is not None]
        if len(present) == 2:
            return ""
        if not present:
            return f"no {CLAIMS_FILE} on either side"
        lacking = self.reference.path if present[0] == self.results.path else self.results.path
        return f"{CLAIMS_FILE} only in {present[0]}, not in {lacking}"

    def _claims_counted(self) -> pd.DataFrame:
        """The claims that count: those with a verdict on either side, less (partial) the reference's that
        the results did not run."""
        if self.claims is None:
            return pd.DataFrame(columns=["claim", "results", "reference", "same"])
        run = (self.claims["results"] != NOT_RUN) | (self.claims["reference"] != NOT_RUN)
        if self.partial:
            run &= self.claims["results"] != NOT_RUN
        return self.claims[run]

    @property
    def reproduced(self) -> bool:
        """Every cell within the tolerance, every counted claim's verdict the same, no run on one side only
        (the reference's alone allowed when partial) or failed on one side only, claims.csv on both or neither
        (the results' lacking it allowed when partial); and at least one cell compared."""
        one_sided = (self.results.claims is None) != (self.reference.claims is None)
        claims_file_differs = one_sided and not (self.partial and self.results.claims is None)
        return bool(
            len(self.cells)
            and self.cells["within"].all()
            and self._claims_counted()["same"].all()
            and self.runs["only_results"].empty
            and self.runs["status"].empty
            and (self.partial or self.runs["only_reference"].empty)
            and not claims_file_differs
        )

    def verdict(self) -> str:
        """One line: reproduced or differs, with the counts."""
        within, cells = int(self.cells["within"].sum()), len(self.cells)
        counted = self._claims_counted()
        parts = [
            f"{within} of {cells} cells within tolerance",
            f"{int(counted['same'].sum())} of {len(counted)} claims the same"
            if self.claims is not None
            else self.claims_note,
        ]
        only_results, only_reference = len(self.runs["only_results"]), len(self.runs["only_reference"])
        if only_results:
            parts.append(f"{only_results} runs only in the results")
        if only_reference:
            parts.append(
                f"{only_reference} runs of the reference not in the results" + (" (--partial)" if self.partial else "")
            )
        if len(self.runs["status"]):
            parts.append(f"{len(self.runs['status'])} runs ok on one side only")
        return ("reproduced: " if self.reproduced else "differs: ") + ", ".join(parts)

    def report(self) -> str:
        """The comparison as text: tolerance, environments, cells, runs, claims, then the verdict line."""
        t = self.tolerance
        lines = [
            f"gpstudy compare: {self.results.path} (results) against {self.reference.path} (reference)",
            f"Tolerance: a cell is within it when |results - reference| <= {t.se:g} of the reference's "
            f"standard error (where it has one: 2 runs or more) and <= {t.relative:g} of |the reference's "
            "mean| (--se, --relative).",
            "",
            "Environments (runs.csv; 'not recorded': an older runs.csv lacks the column):",
            _text_table(self.environment.assign(differ=self.environment["differ"].map({True: "differs", False: ""}))),
            "",
        ]
        lines += [
            "Cells: over the runs both hold, ok on both; mean ± standard error (std ddof 0 / sqrt(n), the "
            "tables'); difference in the reference's standard errors and relative to its mean:",
            _text_table(_cells_shown(self.cells)),
            "",
        ]
        beyond = self.cells[~self.cells["within"]]
        if not beyond.empty:
            lines.append("Beyond tolerance:")
            lines += [
                f"  {_cell_name(row)}: {_number(row.results_mean)} against {_number(row.reference_mean)} "
                f"({_percent(row.relative)}{_se_text(row.se_units)})"
                + (
                    f"; its runs differ in {row.differs}"
                    if row.differs
                    else "; its runs' recorded environments and iterations are the same"
                )
                for row in beyond.itertuples()
            ]
            lines.append("")
        for key, title in (
            ("only_results", "Runs only in the results"),
            ("only_reference", "Runs of the reference not in the results"),
            ("status", "Runs ok on one side, failed on the other"),
        ):
            if not self.runs[key].empty:
                lines += [f"{title}:", *_run_lines(self.runs[key], key == "status"), ""]
        if self.claims is not None:
            shown = self.claims.assign(
                same=self.claims["same"].map({True: "yes", False: "NO"}),
                largest_change=self.claims["largest_change"].map(_change),
            )
            lines += [
                "Claims (claims.csv): each claim's verdict, and the largest relative change of its checks' values:",
                _text_table(shown),
                "",
            ]
        else:
            lines += [f"Claims: not compared, {self.claims_note}.", ""]
        equal, shared = self.identical_runs
        lines.append(f"Runs ok on both sides whose metrics are equal bit for bit: {equal} of {shared}.")
        lines.append(self.verdict())
        return "\n".join(lines)


def compare(results: Path, reference: Path, tolerance: Tolerance = Tolerance(), partial: bool = False) -> Comparison:
    """Compare the results folder ``results`` with the reference folder ``reference`` (``read_folder``)."""
    ours, theirs = read_folder(results), read_folder(reference)
    claims = (
        compare_claims(ours.claims, theirs.claims) if ours.claims is not None and theirs.claims is not None else None
    )
    return Comparison(
        ours,
        theirs,
        tolerance,
        partial,
        compare_cells(ours.runs, theirs.runs, tolerance),
        claims,
        unmatched_runs(ours.runs, theirs.runs),
        environments(ours.runs, theirs.runs),
        _identical_runs(ours.runs, theirs.runs),
    )


def _identical_runs(results: pd.DataFrame, reference: pd.DataFrame) -> tuple[int, int]:
    """How many runs ok on both sides have every metric equal bit for bit (empty on both counts as equal), of
    how many runs ok on both sides."""
    both = results.merge(reference, on=LABELS, suffixes=("", "_reference")).merge(ok_on_both(results, reference))
    equal = [(both[m] == both[f"{m}_reference"]) | (both[m].isna() & both[f"{m}_reference"].isna()) for m in METRICS]
    return int(np.logical_and.reduce(equal).sum()) if len(both) else 0, len(both)


def _cells_shown(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells as printed: numbers at 6 significant digits, within as ok / BEYOND."""
    shown = cells[[*CELL, "metric", "n"]].copy()
    for side in ("results", "reference"):
        shown[side] = [
            _number(mean) + ("" if pd.isna(se) else f" ± {se:.3g}")
            for mean, se in zip(cells[f"{side}_mean"], cells[f"{side}_se"])
        ]
    shown["difference / se"] = cells["se_units"].map(
        lambda units: "n/a" if pd.isna(units) else f"{units:+.3g}" if units else "0"
    )
    shown["relative"] = cells["relative"].map(_change)
    shown["within"] = cells["within"].map({True: "ok", False: "BEYOND"})
    return shown


def _cell_name(row) -> str:
    return f"{row.experiment} {row.dataset} {row.method} M={row.M} {row.metric}"


def _number(value: float) -> str:
    return "none" if pd.isna(value) else f"{value:.6g}"


def _change(value: float) -> str:
    return "n/a" if pd.isna(value) else f"{value:+.2e}" if value else "0"


def _percent(relative: float) -> str:
    return "no value on one side" if pd.isna(relative) else f"{100 * relative:+.3g}%"


def _se_text(se_units: float) -> str:
    return "" if pd.isna(se_units) else f", {se_units:+.3g} standard errors"


def _run_lines(runs: pd.DataFrame, with_status: bool) -> list[str]:
    """One line per cell of ``runs``: its splits as ranges (and each run's status on both sides)."""
    lines = []
    for cell, group in runs.groupby(CELL, sort=True):
        name = "{} {} {} M={}".format(*cell)
        if with_status:
            lines += [
                f"  {name} split {row.split}: {row.status} in the results, {row.status_reference} in the reference"
                for row in group.itertuples()
            ]
        else:
            lines.append(f"  {name}: split{'s' if len(group) > 1 else ''} {_ranges(sorted(group['split']))}")
    return lines


def _ranges(numbers: list[int]) -> str:
    """1, 2, 3, 5 -> "1-3, 5"."""
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return ", ".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


def _text_table(frame: pd.DataFrame) -> str:
    """``frame`` as aligned text, left-justified, indented by two spaces."""
    if frame.empty:
        return "  (none)"
    rows = [list(frame.columns), *frame.astype(str).itertuples(index=False, name=None)]
    widths = [max(len(str(row[column])) for row in rows) for column in range(len(frame.columns))]
    return "\n".join(
        "  " + "  ".join(str(text).ljust(width) for text, width in zip(row, widths)).rstrip() for row in rows
    )
