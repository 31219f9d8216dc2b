"""Standalone HTML pages of one table each (pandas' Styler), as the Snakemake report shows them: Tables 1-4
(``gpstudy.report.tables``) and the paper's claims (``gpstudy.report.claims``) on the report's page, not as
downloads."""

import html
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from gpstudy.io import write_text

STYLE = [  # the look of every page's table (CSS, selectors within the table)
    {"selector": "", "props": "border-collapse: collapse; font-family: sans-serif; font-size: 14px; margin: 8px;"},
    {"selector": "caption", "props": "caption-side: top; text-align: left; padding: 4px 0 12px; line-height: 1.4;"},
    {"selector": "th", "props": "background: #eef1f5; text-align: left; padding: 4px 8px; border: 1px solid #c8ccd2;"},
    {"selector": "td", "props": "padding: 4px 8px; border: 1px solid #c8ccd2; vertical-align: top;"},
]


def write_page(
    path: str | Path,
    frame: pd.DataFrame,
    caption: str,
    styles: pd.DataFrame | None = None,
    table_styles: Sequence[dict] = (),
) -> None:
    """Write ``frame`` (its index hidden) under ``caption`` as a standalone UTF-8 HTML page, atomically.

    Args:
        path: the page, ``.html``; its name is the table's id (Styler's uuid), so the page is the same
            bytes for the same table.
        frame: the table's text, plain (every cell, header and the caption HTML-escaped here).
        caption: what the table shows, plain text.
        styles: CSS per cell (``frame``'s shape, "" for none), or None.
        table_styles: CSS rules after ``STYLE``'s (Styler's ``set_table_styles``).
    """
    path = Path(path)
    styler = (
        frame.style.hide(axis="index")
        .format(escape="html")
        .format_index(escape="html", axis=1)
        .set_caption(html.escape(caption, quote=False))
        .set_uuid(path.stem)
        .set_table_styles([*STYLE, *table_styles])
    )
    if styles is not None:
        styler = styler.apply(lambda _: styles, axis=None)
    write_text(path, styler.to_html(doctype_html=True, cell_ids=False))
