"""The paper-ready LaTeX table (write_paper_table) on a small synthetic runs table: its cells, the best of each
row in bold, its label and column order; both .tex files compiled with the packages their first line names;
the checking table's caption about the paper's values only where the table has them (issue 48, item 5)."""

import re
import shutil
import subprocess

import pandas as pd
import pytest

from gpstudy.report.tables import experiment_table, write_paper_table, write_table

COLUMNS = ["experiment", "dataset", "method", "M", "split", "rmse", "test_ll", "status"]


@pytest.fixture
def runs() -> pd.DataFrame:
    """Boston: SVGP 50 and 100 tie at 2.000 RMSE, GPNet 100 the best test log-likelihood; Concrete: SVGP 100 of
    one split, no SVGP 50; wine_white (the paper has none): SVGP 50 alone; a failed run; another experiment."""
    rows = [
        *(("uci", "boston", "svgp", 50, split, 2.0, -2.2, "ok") for split in range(3)),
        *(("uci", "boston", "svgp", 100, split, 1.0 + split, -2.1, "ok") for split in range(3)),
        *(("uci", "boston", "gpnet", 100, split, 3.0 + split, -1.5 - split / 10, "ok") for split in range(3)),
        ("uci", "concrete", "svgp", 100, 0, 5.768, -3.0, "ok"),
        *(("uci", "concrete", "gpnet", 100, split, 5.0 + split, -3.1, "ok") for split in range(2)),
        ("uci", "concrete", "gpnet", 100, 2, float("nan"), float("nan"), "failed: diverged"),
        *(("uci", "wine_white", "svgp", 50, split, 0.55 + split / 10, -1.0, "ok") for split in range(2)),
        ("snelson", "snelson", "svgp", 20, 0, 0.3, -0.5, "ok"),
    ]
    return pd.DataFrame(rows, columns=COLUMNS).assign(iterations=10000)


def paper_tex(runs: pd.DataFrame, metric: str, tmp_path, own_data=()) -> str:
    write_paper_table(
        experiment_table(runs, "uci", metric, own_data=own_data), tmp_path / "t.paper.tex", f"tab:uci_{metric}"
    )
    return (tmp_path / "t.paper.tex").read_text(encoding="utf-8")


def body_rows(tex: str) -> dict[str, str]:
    """Data set -> its row's cells after the name, N and D (the lines between midrule and bottomrule)."""
    body = tex.split("\\midrule\n")[1].split("\n\\bottomrule")[0].splitlines()
    return {line.split(" & ")[0]: line.removesuffix(r" \\").split(" & ", 3)[3] for line in body}


def test_our_numbers_aligned_the_best_in_bold_and_the_label(runs, tmp_path):
    tex = paper_tex(runs, "rmse", tmp_path)
    assert tex.splitlines()[0].startswith(r"% Needs \usepackage{booktabs} in the preamble")
    assert r"\label{tab:uci_rmse}" in tex and tex.index(r"\caption{") < tex.index(r"\label{") < tex.index(
        r"\begin{tabular"
    )
    assert r"\begin{tabular}{lrr" + r"r@{.}l@{${}\pm{}$}l" * 3 + "}" in tex  # a mean's point aligned, then its s.e.
    rows = body_rows(tex)
    assert list(rows) == ["Boston", "Concrete", r"wine\_white"]
    bold = r"\textbf{2} & \textbf{000}"
    assert rows["Boston"] == rf"{bold} & \textbf{{0.000}} & {bold} & \textbf{{0.471}} & 4 & 000 & 0.471"  # a tie
    assert rows["Concrete"] == (
        r"\multicolumn{3}{c}{--} & 5 & \multicolumn{1}{l@{}}{768} &  & \textbf{5} & \textbf{500} & \textbf{0.354}"
    )  # SVGP 50 not run; SVGP 100 one split, no ±; GPNet 100 over its two ok splits
    assert rows[r"wine\_white"] == r"0 & 600 & 0.035 & \multicolumn{3}{c}{--} & \multicolumn{3}{c}{--}"  # alone
    assert "(2.897" not in tex and r"\checkmark" not in tex  # ours only: no paper value, no mark


def test_columns_go_method_by_method_with_a_users_m_beside_its_method(runs, tmp_path):
    tex = paper_tex(runs, "rmse", tmp_path)
    header = [line for line in tex.splitlines() if line.startswith(" &  &  & ")][0]
    assert header == r" &  &  & \multicolumn{6}{c}{SVGP} & \multicolumn{3}{c}{GPNet} \\"
    assert r"\cmidrule(lr){4-9} \cmidrule(lr){10-12}" in tex
    assert re.findall(r"\$M = (\d+)\$", tex) == ["50", "100", "100"]  # SVGP 50, SVGP 100, GPNet 100
    others = runs[(runs["dataset"] == "boston") & (runs["M"] == 50)].assign(method="fbnn", M=500)
    tex = paper_tex(pd.concat([runs.replace({"M": {100: 10}}), others]), "rmse", tmp_path)
    assert re.findall(r"\{c\}\{(\w+)\}", tex) == ["SVGP", "GPNet", "FBNN"]  # not the table's FBNN 500 first
    assert re.findall(r"\$M = (\d+)\$", tex) == ["10", "50", "10", "500"]  # SVGP 10, 50; GPNet 10; FBNN 500


def test_higher_test_log_likelihood_is_best_and_minus_signs_are_maths(runs, tmp_path):
    rows = body_rows(paper_tex(runs, "test_ll", tmp_path))
    assert rows["Boston"] == r"$-$2 & 200 & 0.000 & $-$2 & 100 & 0.000 & \textbf{$-$1} & \textbf{600} & \textbf{0.047}"
    assert rows["Concrete"].startswith(r"\multicolumn{3}{c}{--} & \textbf{$-$3} & \multicolumn{1}{l@{}}{\textbf{000}}")
    assert "textbf" not in rows[r"wine\_white"]


def test_the_caption_mentions_published_values_only_when_the_table_has_them(runs, tmp_path):
    caption = re.search(r"\\caption\{(.*)\}", paper_tex(runs, "rmse", tmp_path)).group(1)
    assert caption.startswith(r"Test RMSE: mean $\pm$ standard error over 1-3 splits")
    assert "the best of each row in bold (lower is better)" in caption
    assert r"A number without $\pm$: a single split" in caption
    assert "Published values exist for 4 of these 9 cells." in caption  # Boston and Concrete's SVGP 100, GPNet 100
    own = paper_tex(runs, "rmse", tmp_path, own_data=["boston", "concrete"])
    assert "Published" not in own and "paper" not in own.split(r"\caption")[1]


def test_a_checking_table_of_ones_own_data_says_nothing_of_paper_values(runs, tmp_path):
    """A user's data sets only: the caption spoke of the paper's numbers in parentheses and ✓ / ✗ marks."""
    write_table(experiment_table(runs, "uci", "rmse", own_data=["boston", "concrete", "wine_white"]), tmp_path / "t")
    caption = (tmp_path / "t.md").read_text(encoding="utf-8").split("\n\n")[0]
    assert "the paper" not in caption and "✓" not in caption, caption
    write_table(experiment_table(runs, "uci", "rmse"), tmp_path / "t")
    caption = (tmp_path / "t.md").read_text(encoding="utf-8").split("\n\n")[0]
    assert "the paper's in parentheses; ✓ / ✗: within / beyond 2 combined" in caption
    assert "the paper's in parentheses where it prints others" in caption


PDFLATEX = shutil.which("pdflatex")


@pytest.mark.skipif(PDFLATEX is None, reason="pdflatex is not installed (Debian: texlive-latex-recommended)")
@pytest.mark.parametrize("kind", ["paper", "checking"])
def test_each_tex_compiles_with_the_packages_its_first_line_names(runs, tmp_path, kind):
    table = experiment_table(runs, "uci", "rmse")
    if kind == "paper":
        write_paper_table(table, tmp_path / "table.tex", "tab:uci_rmse")
    else:
        write_table(table, tmp_path / "table")
    text = (tmp_path / "table.tex").read_text(encoding="utf-8")
    packages = re.match(r"% Needs \\usepackage\{([a-z,]+)\} in the preamble", text).group(1)
    (tmp_path / "doc.tex").write_text(
        "\\documentclass{article}\n\\usepackage[landscape,margin=1cm]{geometry}\n"
        f"\\usepackage{{{packages}}}\n\\begin{{document}}\n\\input{{table.tex}}\n\\end{{document}}\n"
    )
    run = subprocess.run(
        [PDFLATEX, "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    errors = [line for line in run.stdout.splitlines() if line.startswith("!")]
    assert run.returncode == 0 and not errors, errors or run.stdout[-2000:]
    assert (tmp_path / "doc.pdf").stat().st_size > 1000
