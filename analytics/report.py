"""An audit's HTML report: one self-contained file, ``report.html``.

Written by the driver from the small aggregates it shows (the tables are in
``tables.py``): a verdict, the facts, and sections each with a text, a chart
(inline SVG, ``charts.py``) and a table. Nothing is loaded from anywhere.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any


@dataclass
class Section:
    """One part of the HTML report: a heading, text, a chart, a table."""

    title: str
    text: str = ""
    chart: str = ""
    columns: Sequence[str] = ()
    rows: Sequence[Sequence[Any]] = ()
    more: int = 0  # rows not shown


@dataclass
class Page:
    title: str
    verdict: bool
    facts: dict[str, Any]
    sections: list[Section] = field(default_factory=list)


_STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; max-width: 1100px; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 2em; }
.ok { color: #1d7a35; } .failed { color: #b3261e; }
table { border-collapse: collapse; font-size: 0.9em; margin: 0.5em 0; }
td, th { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f2f2f2; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
.facts td:first-child { font-weight: bold; }
"""


def _cell(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return f"<td>{escape(json.dumps(value))}</td>"
    if isinstance(value, int | float):
        return f'<td class="n">{value:,}</td>'
    if isinstance(value, list | tuple):
        return f"<td>{escape('; '.join(str(v) for v in value))}</td>"
    return f"<td>{escape(str(value))}</td>"


def _table(columns: Sequence[str], rows: Sequence[Sequence[Any]], css: str = "") -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in rows)
    header = f"<tr>{head}</tr>" if columns else ""
    kind = f' class="{css}"' if css else ""
    return f"<table{kind}>{header}{body}</table>"


def render(page: Page) -> str:
    """The report as one HTML document."""
    verdict = (
        '<p class="ok"><strong>Audit passed.</strong></p>'
        if page.verdict
        else '<p class="failed"><strong>Audit failed.</strong></p>'
    )
    facts = _table((), list(page.facts.items()), "facts")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(page.title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{escape(page.title)}</h1>",
        verdict,
        facts,
    ]
    for section in page.sections:
        parts.append(f"<h2>{escape(section.title)}</h2>")
        if section.text:
            parts.append(f"<p>{escape(section.text)}</p>")
        if section.chart:
            parts.append(f"<div>{section.chart}</div>")
        if section.columns:
            if section.rows:
                parts.append(_table(section.columns, section.rows))
            else:
                parts.append("<p>None.</p>")
            if section.more:
                parts.append(f"<p>... and {section.more:,} more (see the tables).</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_page(folder: Path, page: Page) -> Path:
    """Write ``report.html`` in a local folder; returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "report.html"
    path.write_text(render(page), encoding="utf-8")
    return path
