"""write_page: a table as a standalone HTML page of the report, its text escaped, the same bytes each time."""

import pandas as pd

from gpstudy.report.pages import write_page


def test_a_page_shows_its_text_as_text_and_declares_utf8(tmp_path, html_table):
    frame = pd.DataFrame([["<b>Boston</b>", "2.0 ± 0.1 & more ✓"]], columns=["Data <set>", "SVGP 100"])
    write_page(tmp_path / "t.html", frame, "RMSE <i>not markup</i> & ✗")
    caption, rows = html_table(tmp_path / "t.html")
    assert caption == "RMSE <i>not markup</i> & ✗"
    assert rows == [["Data <set>", "SVGP 100"], ["<b>Boston</b>", "2.0 ± 0.1 & more ✓"]]  # no index column
    page = (tmp_path / "t.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and '<meta charset="utf-8">' in page
    assert "<b>" not in page and "&lt;b&gt;Boston" in page


def test_a_page_is_the_same_bytes_for_the_same_table_and_takes_cell_styles(tmp_path):
    frame = pd.DataFrame([["a", "b"], ["c", "d"]], columns=["x", "y"])
    styles = pd.DataFrame([["color: red;", ""], ["", ""]], columns=["x", "y"])
    for folder in ("one", "two"):
        write_page(tmp_path / folder / "t.html", frame, "caption", styles)
    page = (tmp_path / "one" / "t.html").read_bytes()
    assert page == (tmp_path / "two" / "t.html").read_bytes()
    assert b"#T_t_row0_col0 {\n  color: red;\n}" in page and page.count(b"color: red") == 1
    assert not list((tmp_path / "one").glob(".*.part*"))
