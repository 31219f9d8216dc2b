"""Tables 3 and 4: our mean ± standard error over splits beside the paper's, as CSV, Markdown, LaTeX and
HTML (the Snakemake report's page).

``experiment_table`` builds one tidy table, with a paper's rows of other papers' methods quoted where the
experiment asks (Table 2's); ``write_table`` lays it out like the paper (a row per data set, a column per
method and M, then the quoted columns) with one cell formatter that Markdown, LaTeX and HTML share, each with
its own ``_Notation`` of symbols and escaping.
"""

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from gpstudy.io import write_text
from gpstudy.metrics import METRIC_NAMES
from gpstudy.paper import paper_columns, paper_protocol, paper_table, quoted_rows, quoted_tables, table_datasets
from gpstudy.report.claims.evidence import HIGHER_IS_BETTER
from gpstudy.report.labels import dataset_label, display_names, method_label
from gpstudy.report.pages import write_page

AGREEMENT_SE = 2.0  # a cell agrees when |ours - paper| <= this many combined standard errors (STUDY.md)
PAPER_ROUNDING = 0.0005  # the paper prints 3 decimals: its standard errors are known to +-0.0005
KEYS = ["dataset", "method", "M"]  # one cell of Tables 3 and 4
DECIMALS = {"error_rate": 4}  # printed decimals where the default 3 would cut the paper's numbers (Table 2: 1.55%)
CHECKING_PACKAGES = ("booktabs", "amssymb")  # what the checking .tex needs: \toprule..., \checkmark
PAPER_PACKAGES = ("booktabs",)  # what the paper-ready .tex needs: \toprule, \midrule, \cmidrule, \bottomrule
PAPER_CELL = r"r@{.}l@{${}\pm{}$}l"  # a paper-ready cell's columns: the mean's integer part, its fraction, the s.e.


def in_order(items: Iterable, preferred: Iterable) -> list:
    """The distinct ``items``: those in ``preferred`` in its order, then the others sorted."""
    present = set(items)
    first = [item for item in preferred if item in present]
    return first + sorted(present.difference(first))


def mean_and_se(frame: pd.DataFrame, value: str, by: list[str]) -> pd.DataFrame:
    """Mean, standard error std / sqrt(n) and count n of ``value`` per group, NaN values skipped; std is the
    population std (ddof 0), as in the authors' evaluation whose numbers the paper prints.

    Args:
        frame: one row per observation.
        value: the column to aggregate.
        by: the grouping columns, kept in the result in order of first appearance.

    Returns:
        Columns ``by`` + mean, se, n; se is NaN where n = 1.
    """
    groups = frame.dropna(subset=[value]).groupby(by, sort=False)[value]
    stats = groups.agg(mean="mean", std=lambda values: values.std(ddof=0), n="count").reset_index()
    stats["se"] = (stats.pop("std") / np.sqrt(stats["n"])).where(stats["n"] > 1)
    return stats[[*by, "mean", "se", "n"]]


def experiment_table(
    runs: pd.DataFrame, experiment: str, metric: str, quoted: str | None = None, own_data: Collection[str] = ()
) -> pd.DataFrame:
    """Our Table 3 (``metric="rmse"``) or 4 (``"test_ll"``) beside the paper's, one row per cell.

    Args:
        runs: ``results/runs.csv``, one row per run; only the ``experiment``'s rows are used,
            statistics over ``status == "ok"`` rows, the others counted as failed.
        experiment: the experiment tabulated (the paper's UCI study: ``"uci"``).
        metric: ``"rmse"``, ``"test_ll"`` or ``"error_rate"``.
        quoted: a table of ``gpstudy.paper.quoted_tables`` whose rows of ``metric`` are quoted (the
            experiment's ``quoted``), or None.
        own_data: the data sets of ``runs`` whose files are not the registry's (``Dataset.has_registry_files``:
            a user's data set): no number, size, protocol or quoted row of a paper beside them.

    Returns:
        Columns metric, dataset, method, M, M_effective (the fewest points a run of the cell used, below M
        where the training set is smaller; NA where no run is ok; runs without the column count as M),
        n (splits aggregated), failed (runs skipped), worse_than_mean (of the n, the runs whose test RMSE is worse
        than predicting y's training mean: runs.csv's column; 0 where it has none), iterations (the fewest of the
        cell's runs), mean, se,
        paper_mean, paper_se, agrees (nullable boolean, NA where either side has no mean or se),
        paper_settings (whether every run of the cell took the paper's iterations and the cell ran the
        paper's number of splits, ``gpstudy.paper.paper_protocol``; NA where the paper records none or
        nothing ran), then the data set's N (training + test rows) and D (inputs) of our runs (NA for
        runs without them) and the paper's paper_N and paper_D (``gpstudy.paper.table_datasets``; NA where it
        prints none). Every data set present times every (method, M) present, in the paper's order
        (``table_datasets``: Table 1's, Table 2's, Tables 3-4's), the others after, alphabetically.
        Where rows are quoted, they follow, each (paper row, data set) with the paper's number as
        paper_mean and nothing of ours (M NA, n 0), and a column quoted_from names their table (empty
        for ours).
    """
    uci = runs[runs["experiment"] == experiment]
    ok = uci["status"] == "ok"
    datasets = in_order(uci["dataset"], table_datasets()["dataset"])
    paper = paper_table(metric).rename(columns={"mean": "paper_mean", "se": "paper_se"})
    papers_order = paper.loc[paper["dataset"].isin(datasets), ["method", "M"]].itertuples(index=False, name=None)
    columns = in_order(zip(uci["method"], uci["M"]), dict.fromkeys([*papers_order, *paper_columns()]))  # Table 1's too
    grid = pd.DataFrame([(dataset, *column) for dataset in datasets for column in columns], columns=KEYS)
    failed = uci[~ok].groupby(KEYS).size().rename("failed").reset_index()
    flagged = uci["worse_than_mean"].eq(True) if "worse_than_mean" in uci else False  # an older runs.csv: none
    worse = uci[ok & flagged].groupby(KEYS).size().rename("worse_than_mean").reset_index()
    used = uci.loc[ok, "M_effective"].fillna(uci["M"]) if "M_effective" in uci else uci.loc[ok, "M"]
    effective = uci[ok].assign(M_effective=used).groupby(KEYS, as_index=False)["M_effective"].min()
    table = (
        grid.merge(effective, how="left")
        .merge(mean_and_se(uci[ok], metric, KEYS), how="left")
        .merge(failed, how="left")
        .merge(worse, how="left")
        .merge(paper, how="left")
    )
    table[["n", "failed", "worse_than_mean"]] = table[["n", "failed", "worse_than_mean"]].fillna(0).astype(int)
    table["M_effective"] = table["M_effective"].astype("Int64")
    table = table.merge(_settings(uci, table), how="left").merge(_sizes(uci), how="left")
    own = table["dataset"].isin(own_data)
    for column in ("paper_mean", "paper_se", "paper_settings", "paper_N", "paper_D"):
        table[column] = table[column].mask(own)
    distance = (table["mean"] - table["paper_mean"]).abs()
    paper_se = table["paper_se"].clip(lower=PAPER_ROUNDING)  # a printed 0.000 means at most 0.0005
    bound = AGREEMENT_SE * np.sqrt(table["se"] ** 2 + paper_se**2)
    table["agrees"] = (distance <= bound).astype("boolean").where(distance.notna() & bound.notna())
    table.insert(0, "metric", metric)
    table = table[
        [
            "metric",
            *KEYS,
            "M_effective",
            "n",
            "failed",
            "worse_than_mean",
            "iterations",
            "mean",
            "se",
            "paper_mean",
            "paper_se",
            "agrees",
            "paper_settings",
            "N",
            "D",
            "paper_N",
            "paper_D",
        ]
    ]
    quotes = quoted_rows(quoted, metric) if quoted is not None else pd.DataFrame()
    papers = [dataset for dataset in datasets if dataset not in own_data]
    return table if quotes.empty else _with_quoted(table, quotes, papers, quoted_tables()[quoted]["source"], metric)


def _settings(runs: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """Per cell of ``table`` (with its n and failed): the fewest iterations of its ``runs`` and whether its
    runs are at the paper's protocol (every run the paper's iterations, n + failed the paper's splits)."""
    iterations = runs.groupby(KEYS)["iterations"].agg(["min", "max"]).reset_index()
    cells = (
        table[[*KEYS, "n", "failed"]]
        .merge(iterations, how="left")
        .merge(
            paper_protocol().rename(columns={"splits": "paper_splits", "iterations": "paper_iterations"}), how="left"
        )
    )
    at_paper = (
        (cells["min"] == cells["paper_iterations"])
        & (cells["max"] == cells["paper_iterations"])
        & (cells["n"] + cells["failed"] == cells["paper_splits"])
    )
    known = cells["paper_iterations"].notna() & cells["min"].notna()
    return cells[KEYS].assign(
        iterations=cells["min"].astype("Int64"), paper_settings=at_paper.astype("boolean").where(known)
    )


def _sizes(runs: pd.DataFrame) -> pd.DataFrame:
    """Per data set of ``runs``: our N (training + test rows) and D (inputs) as the runs record them (NA
    where they do not: an older runs.csv) and the paper's paper_N and paper_D."""
    recorded = runs.reindex(columns=["dataset", "n_train", "n_test", "D"]).astype({"D": float})
    recorded["N"] = recorded.pop("n_train") + recorded.pop("n_test")
    ours = recorded.groupby("dataset", as_index=False)[["N", "D"]].max()
    paper = table_datasets()[["dataset", "N", "D"]].rename(columns={"N": "paper_N", "D": "paper_D"})
    sizes = ours.merge(paper, how="left")
    return sizes.astype({column: "Int64" for column in ("N", "D", "paper_N", "paper_D")})


def _with_quoted(
    table: pd.DataFrame, quotes: pd.DataFrame, datasets: list[str], source: str, metric: str
) -> pd.DataFrame:
    """``table`` and after it the ``quotes`` (``quoted_rows`` of ``metric``) of its ``datasets``, in the
    paper's row order, with a column quoted_from: ``source`` for the quoted rows, empty for ours."""
    values = quotes.set_index(["dataset", "method"])["value"]
    quoted = pd.DataFrame(
        [
            (metric, dataset, method, values.get((dataset, method), np.nan))
            for dataset in datasets
            for method in dict.fromkeys(quotes["method"])
        ],
        columns=["metric", "dataset", "method", "paper_mean"],
    )
    quoted = quoted.assign(n=0, failed=0, worse_than_mean=0, quoted_from=source)
    combined = pd.concat([table.assign(quoted_from=""), quoted], ignore_index=True)[[*table.columns, "quoted_from"]]
    return combined.astype(
        {"M": "Int64", "M_effective": "Int64", "iterations": "Int64", "agrees": "boolean", "paper_settings": "boolean"}
    )


def write_table(table: pd.DataFrame, stem: Path, variant_labels: Mapping[str, str] | None = None) -> None:
    """Write ``experiment_table``'s output as ``stem.csv`` (tidy), ``stem.md``, ``stem.tex`` and ``stem.html``
    (the paper's layout, methods by ``gpstudy.report.labels.display_names(variant_labels)``; the HTML a page of
    the report)."""
    stem, names = Path(stem), display_names(variant_labels)
    for suffix, text in (
        (".csv", table.to_csv(index=False)),
        (".md", _markdown(table, names)),
        (".tex", _latex(table, names)),
    ):
        write_text(stem.with_name(stem.name + suffix), text)
    header, rows = _layout(table, HTML, names)
    write_page(
        stem.with_name(stem.name + ".html"),
        pd.DataFrame(rows, columns=header),
        _caption(table, HTML, names),
        table_styles=[{"selector": "td", "props": "white-space: pre;"}],
    )  # a cell's lines as they are


@dataclass(frozen=True)
class _Notation:
    """How one output format writes the symbols of a cell and escapes free text."""

    pm: str
    agree: str
    disagree: str
    missing: str
    fewer: str  # marks a cell whose runs used fewer points than its M
    worse: str  # marks a cell with runs whose test RMSE is worse than predicting the training mean
    escape: Callable[[str], str]
    beside: str = " "  # between our number and the paper's in a cell


def _escape_markdown(text: str) -> str:
    return text.replace("|", r"\|")


_TEX_SPECIALS = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def _escape_tex(text: str) -> str:
    return "".join(_TEX_SPECIALS.get(char, char) for char in text)


MARKDOWN = _Notation(pm="±", agree="✓", disagree="✗", missing="—", fewer="†", worse="‡", escape=_escape_markdown)
HTML = replace(MARKDOWN, escape=str, beside="\n")  # Markdown's symbols, the paper's number on a line of its own
# below ours (narrow columns: Table 3 on one screen); gpstudy.report.pages escapes the text
LATEX = _Notation(
    pm=r"$\pm$",
    agree=r"\checkmark",
    disagree=r"$\times$",
    missing="--",
    fewer=r"$^\dagger$",
    worse=r"$^\ddagger$",
    escape=_escape_tex,
)


def _number(value: float, decimals: int = 3) -> str:
    return "n/a" if pd.isna(value) else f"{value:.{decimals}f}"


def _fewer_points(row) -> bool:
    """Whether a row of ``experiment_table`` used fewer points than its M."""
    return not pd.isna(row.M_effective) and row.M_effective != row.M


def _is_quoted(row) -> bool:
    """Whether a row of ``experiment_table`` quotes another paper's method."""
    return bool(getattr(row, "quoted_from", ""))


def _ours(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``experiment_table`` that are our cells, not quoted ones."""
    return table[[not _is_quoted(row) for row in table.itertuples()]]


def _cell(row, notation: _Notation) -> str:
    """``ours ± se (paper ± se) mark``; the paper part and the mark only where they exist, ours marked
    ``notation.fewer`` where its runs used fewer points than M and ``notation.worse`` where some did worse than
    predicting the training mean. A quoted row: the paper's number alone."""
    decimals = DECIMALS.get(row.metric, 3)
    number = partial(_number, decimals=decimals)
    if _is_quoted(row):
        return notation.missing if pd.isna(row.paper_mean) else number(row.paper_mean)
    text = notation.missing if pd.isna(row.mean) else f"{number(row.mean)} {notation.pm} {number(row.se)}"
    if _fewer_points(row):
        text += notation.fewer
    if row.worse_than_mean:
        text += notation.worse
    if not pd.isna(row.paper_mean):
        text += f"{notation.beside}({number(row.paper_mean)} {notation.pm} {number(row.paper_se)})"
    if not pd.isna(row.agrees):
        mark = notation.agree if row.agrees else notation.disagree
        text += " " + (f"({mark})" if _off_settings(row) else mark)
    return text


def _off_settings(row) -> bool:
    """Whether a row of ``experiment_table`` ran at other settings than the paper's numbers it is compared with."""
    return not pd.isna(row.paper_settings) and not row.paper_settings


def _size(ours, papers, notation: _Notation) -> str:
    """Our N or D, the paper's in parentheses where it prints another (or where ours is not recorded)."""
    if pd.isna(ours):
        return "" if pd.isna(papers) else f"{notation.missing} ({papers})"
    return str(ours) if pd.isna(papers) or ours == papers else f"{ours} ({papers})"


def _layout(table: pd.DataFrame, notation: _Notation, names: Mapping[str, str]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the paper's layout: data set, N, D, then one cell per (method, M), and per quoted
    paper row (headed by its name and "(quoted)")."""
    columns = dict.fromkeys((row.method, row.M, _is_quoted(row)) for row in table.itertuples())
    header = [
        "Data set",
        "N",
        "D",
        *(
            notation.escape(f"{method} (quoted)" if quoted else method_label(method, m, names))
            for method, m, quoted in columns
        ),
    ]
    rows = []
    for dataset, cells in table.groupby("dataset", sort=False):
        first = cells.iloc[0]  # ours come before the quoted rows, and every row of a data set has its sizes
        rows.append(
            [
                notation.escape(dataset_label(dataset)),
                _size(first["N"], first["paper_N"], notation),
                _size(first["D"], first["paper_D"], notation),
                *(_cell(row, notation) for row in cells.itertuples()),
            ]
        )
    return header, rows


def _caption(table: pd.DataFrame, notation: _Notation, names: Mapping[str, str]) -> str:
    """What the cells mean, the number of splits, and the failed runs left out."""
    caption = (
        f"{METRIC_NAMES[table['metric'].iat[0]]}: ours, mean {notation.pm} standard error over "
        f"{_splits(table.loc[table['n'] > 0, 'n'])} (std with ddof 0 over sqrt(n), as the authors' "
        "evaluation)"
    )
    if _ours(table)["paper_mean"].notna().any():
        caption += (
            f"; the paper's in parentheses; {notation.agree} / {notation.disagree}: within / beyond "
            f"{AGREEMENT_SE:g} combined standard errors of it"
        )
    caption += f".{_no_se_note(table, notation)} N, D: our runs' rows (training + test) and inputs"
    if table["paper_N"].notna().any() or table["paper_D"].notna().any():
        caption += ", the paper's in parentheses where it prints others"
    caption += "."
    caption += _settings_note(table, notation, names)
    sources = sorted({source for source in table.get("quoted_from", ()) if source})
    if sources:
        caption += (
            " Columns marked quoted: numbers of other papers' methods from "
            f"{notation.escape(' and '.join(sources))}, not run here."
        )
    fewer = [row for row in table.itertuples() if _fewer_points(row)]
    if fewer:
        where = ", ".join(
            f"{dataset_label(row.dataset)} {method_label(row.method, row.M, names)}: {row.M_effective}" for row in fewer
        )
        caption += (
            f" {notation.fewer}: fewer points than M, as many as the training set holds ({notation.escape(where)})."
        )
    worse = table[table["worse_than_mean"] > 0]
    if not worse.empty:
        where = ", ".join(
            f"{dataset_label(row.dataset)} {method_label(row.method, row.M, names)}: {row.worse_than_mean} of {row.n}"
            for row in worse.itertuples()
        )
        caption += (
            f" {notation.worse}: runs whose test RMSE is worse than predicting y's training mean at every test point "
            "(runs.csv's worse_than_mean), finished runs of a method that did badly (a learning rate too large?), "
            f"kept in the mean ({notation.escape(where)})."
        )
    failed = table[table["failed"] > 0]
    if not failed.empty:
        where = ", ".join(
            f"{dataset_label(row.dataset)} {method_label(row.method, row.M, names)}: {row.failed}"
            for row in failed.itertuples()
        )
        caption += f" Failed runs left out ({failed['failed'].sum()}): {notation.escape(where)}."
    return caption


def _splits(counts: pd.Series) -> str:
    """How many splits the cells' means are over: "one split", "20 splits", "1-3 splits", "no split"."""
    if counts.empty:
        return "no split"
    low, high = counts.min(), counts.max()
    if low == high:
        return "one split" if low == 1 else f"{low} splits"
    return f"{low}-{high} splits"


def _no_se_note(table: pd.DataFrame, notation: _Notation) -> str:
    """The sentence saying why a cell prints ``± n/a``: ours from a single run (one split), the paper's
    printed without one; "" when no cell does."""
    compared = _ours(table)  # a quoted number has no ± at all
    reasons = []
    if (compared["mean"].notna() & compared["se"].isna()).any():
        reasons.append("ours from a single run (one split)")
    if (compared["paper_mean"].notna() & compared["paper_se"].isna()).any():
        reasons.append("the paper prints none")
    return f" {notation.pm} n/a: no standard error, {' and '.join(reasons)}." if reasons else ""


def _settings_note(table: pd.DataFrame, notation: _Notation, names: Mapping[str, str]) -> str:
    """The sentence saying which cells ran at other settings than the paper's and what their marks mean,
    or "" when every compared cell ran at the paper's."""
    off = table[table["paper_settings"].eq(False).fillna(False)]
    if off.empty:
        return ""
    protocol = paper_protocol().set_index("dataset").loc[list(dict.fromkeys(off["dataset"]))]
    runs = off["n"] + off["failed"]

    def values(numbers) -> str:
        return " or ".join(map(str, sorted(set(numbers))))

    compared = table[table["paper_settings"].notna()]
    where = (
        ""
        if len(off) == len(compared)
        else " ("
        + notation.escape(
            ", ".join(
                f"{dataset_label(row.dataset)} {method_label(row.method, row.M, names)}" for row in off.itertuples()
            )
        )
        + ")"
    )
    return (
        f" Not the paper's settings{where}: {values(off['iterations'])} iterations and {values(runs)} "
        f"splits, not the paper's {values(protocol['iterations'])} and {values(protocol['splits'])}; "
        f"their marks, in parentheses, still compare with the paper's numbers, but a ({notation.disagree}) "
        "there may come from these settings (a short study's), not from a failed reproduction."
    )


def _markdown(table: pd.DataFrame, names: Mapping[str, str]) -> str:
    header, rows = _layout(table, MARKDOWN, names)
    lines = [" | ".join(cells) for cells in (header, ["---"] * len(header), *rows)]
    return _caption(table, MARKDOWN, names) + "\n\n" + "\n".join(f"| {line} |" for line in lines) + "\n"


def _latex(table: pd.DataFrame, names: Mapping[str, str]) -> str:
    header, rows = _layout(table, LATEX, names)
    lines = [
        _packages_comment(CHECKING_PACKAGES),
        r"\begin{table}",
        r"\centering",
        rf"\caption{{{_caption(table, LATEX, names)}}}",
        rf"\begin{{tabular}}{{lrr{'l' * (len(header) - 3)}}}",
        r"\toprule",
        " & ".join(header) + r" \\",
        r"\midrule",
        *(" & ".join(cells) + r" \\" for cells in rows),
        r"\bottomrule",
        r"\end{tabular}",
        r"\end{table}",
    ]
    return "\n".join(lines) + "\n"


def _packages_comment(packages: Collection[str]) -> str:
    """The .tex's first line: the packages its preamble must load."""
    return f"% Needs \\usepackage{{{','.join(packages)}}} in the preamble (written by gpstudy.report.tables)."


def write_paper_table(
    table: pd.DataFrame, path: str | Path, label: str, variant_labels: Mapping[str, str] | None = None
) -> None:
    """Write ``experiment_table``'s output as a paper-ready LaTeX table at ``path`` (``paper_latex``)."""
    write_text(Path(path), paper_latex(table, label, display_names(variant_labels)))


def paper_columns_order(table: pd.DataFrame, names: Mapping[str, str]) -> list[tuple[str, int]]:
    """Our (method, M) columns of ``experiment_table``'s output, method by method in the order of ``names``
    (``display_names``: the registry's, then the config's variants; others after, sorted), each method's M
    ascending: a user's SVGP 50 stands before SVGP 100, FBNN 500 after GPNet 10."""
    ours = _ours(table)
    methods = in_order(ours["method"], names)
    return sorted(dict.fromkeys(zip(ours["method"], ours["M"])), key=lambda cell: (methods.index(cell[0]), cell[1]))


def best_in_row(table: pd.DataFrame) -> pd.Series:
    """Whether each of our rows of ``experiment_table`` holds its data set's best mean, as printed (so equal
    printed means are all best): the lowest error, the highest where ``HIGHER_IS_BETTER``. False for a cell
    without a mean and in a data set with fewer than two means to compare."""
    ours = _ours(table)
    decimals = DECIMALS.get(ours["metric"].iat[0], 3)
    sign = -1.0 if ours["metric"].iat[0] in HIGHER_IS_BETTER else 1.0  # sign * mean: lower is better
    printed = sign * ours["mean"].map(lambda value: float(f"{value:.{decimals}f}"))  # NaN stays NaN
    by_dataset = printed.groupby(ours["dataset"])
    return (printed == by_dataset.transform("min")) & (by_dataset.transform("count") >= 2)


def _paper_number(value: float, decimals: int, bold: bool) -> tuple[str, str]:
    """``value`` with ``decimals`` decimals as its two cells of an ``r@{.}l`` pair (integer part, fraction),
    a minus sign as in maths, each part in bold where ``bold``."""
    whole, fraction = f"{value:.{decimals}f}".split(".")
    whole = whole.replace("-", "$-$")
    return (rf"\textbf{{{whole}}}", rf"\textbf{{{fraction}}}") if bold else (whole, fraction)


def _paper_cell(row, bold: bool) -> list[str]:
    """Our mean ± se of one row of ``experiment_table`` as the three cells of its ``PAPER_CELL`` columns; the ±
    and its cell empty without a standard error, one "--" across the three without a mean."""
    if pd.isna(row.mean):
        return [r"\multicolumn{3}{c}{--}"]
    decimals = DECIMALS.get(row.metric, 3)
    whole, fraction = _paper_number(row.mean, decimals, bold)
    fewer = LATEX.fewer if _fewer_points(row) else ""
    if pd.isna(row.se):
        return [whole, rf"\multicolumn{{1}}{{l@{{}}}}{{{fraction}{fewer}}}", ""]
    se = _number(row.se, decimals)
    return [whole, fraction, (rf"\textbf{{{se}}}" if bold else se) + fewer]


def paper_latex(table: pd.DataFrame, label: str, names: Mapping[str, str]) -> str:
    """A paper-ready LaTeX table of ``experiment_table``'s output: our numbers only (mean ± standard error), a
    row per data set (its N and D of our runs), a column group per (method, M) under a header per method
    (``paper_columns_order``), the decimal points aligned (``PAPER_CELL``'s columns, fixed decimals), the best of each
    row in bold (``best_in_row``), ``label`` as its ``\\label``, the packages it needs in its first line."""
    ours = _ours(table).assign(best=best_in_row(table))
    columns = paper_columns_order(table, names)
    methods = list(dict.fromkeys(method for method, _ in columns))
    widths = {method: 3 * sum(column[0] == method for column in columns) for method in methods}
    group, rules, first = [], [], 4
    for method in methods:
        group.append(rf"\multicolumn{{{widths[method]}}}{{c}}{{{_escape_tex(names.get(method, method))}}}")
        rules.append(rf"\cmidrule(lr){{{first}-{first + widths[method] - 1}}}")
        first += widths[method]
    rows = []
    for dataset, cells in ours.groupby("dataset", sort=False):
        by_column = {(row.method, row.M): row for row in cells.itertuples()}
        first_row = cells.iloc[0]
        sizes = ["" if pd.isna(first_row[size]) else str(first_row[size]) for size in ("N", "D")]
        numbers = [part for column in columns for part in _paper_cell(by_column[column], by_column[column].best)]
        rows.append(" & ".join([_escape_tex(dataset_label(dataset)), *sizes, *numbers]) + r" \\")
    lines = [
        _packages_comment(PAPER_PACKAGES),
        r"\begin{table}",
        r"\centering",
        rf"\caption{{{_paper_caption(ours, names)}}}",
        rf"\label{{{label}}}",
        rf"\begin{{tabular}}{{lrr{PAPER_CELL * len(columns)}}}",
        r"\toprule",
        " & ".join(["", "", "", *group]) + r" \\",
        " ".join(rules),
        " & ".join(["Data set", "N", "D", *(rf"\multicolumn{{3}}{{c}}{{$M = {m}$}}" for _, m in columns)]) + r" \\",
        r"\midrule",
        *rows,
        r"\bottomrule",
        r"\end{tabular}",
        r"\end{table}",
    ]
    return "\n".join(lines) + "\n"


def _paper_caption(ours: pd.DataFrame, names: Mapping[str, str]) -> str:
    """What the paper-ready table's numbers are; the published values only where there are some."""
    metric = ours["metric"].iat[0]
    better = "higher" if metric in HIGHER_IS_BETTER else "lower"
    caption = (
        f"{METRIC_NAMES[metric]}: mean {LATEX.pm} standard error over {_splits(ours.loc[ours['n'] > 0, 'n'])} "
        f"(population std over $\\sqrt{{n}}$); the best of each row in bold ({better} is better)."
    )
    if (ours["mean"].notna() & ours["se"].isna()).any():
        caption += f" A number without {LATEX.pm}: a single split, no standard error."
    fewer = [row for row in ours.itertuples() if _fewer_points(row)]
    if fewer:
        where = ", ".join(
            f"{dataset_label(row.dataset)} {method_label(row.method, row.M, names)}: {row.M_effective}" for row in fewer
        )
        caption += f" {LATEX.fewer}: fewer points than M, as many as the training set holds ({_escape_tex(where)})."
    published = ours["paper_mean"].notna().sum()
    if published:
        caption += f" Published values exist for {published} of these {len(ours)} cells."
    return caption
