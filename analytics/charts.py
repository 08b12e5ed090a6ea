"""Charts as inline SVG: the report opens in any browser, offline, with nothing to load.

Each function takes the few rows a chart shows (already aggregated by Spark)
and returns one ``<svg>`` element. Text is escaped; sizes are fixed so that
reports look the same wherever they are opened.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

WIDTH = 760
BAR = 18  # px per bar of a horizontal bar chart
LEFT = 220  # px for the labels of a horizontal bar chart
PALETTE = ("#2f6fb5", "#4aa564", "#d08b2c", "#8e5bb5", "#c8483f", "#7a7a7a", "#33a3a3")


CAPTION = 22  # px above every chart for its title


def _frame(height: int, body: list[str], title: str) -> str:
    """The chart's ``<svg>``, its title shown above what ``body`` draws from y = 0."""
    total = height + CAPTION
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{WIDTH}" '
        f'height="{total}" viewBox="0 0 {WIDTH} {total}" font-family="sans-serif" '
        f'font-size="12"><title>{escape(title)}</title>'
        f'<text x="4" y="15" font-weight="bold">{escape(title)}</text>'
        f'<g transform="translate(0,{CAPTION})">' + "".join(body) + "</g></svg>"
    )


def _label(x: float, y: float, text: str, anchor: str = "start") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}">{escape(text)}</text>'


def stacked(title: str, parts: Sequence[str], rows: Sequence[tuple[str, Sequence[float]]]) -> str:
    """A horizontal bar per row split into ``parts`` (a legend on top)."""
    if not rows:
        return _frame(30, [_label(4, 20, f"{title}: nothing to show")], title)
    top = max(sum(values) for _, values in rows) or 1
    span = WIDTH - LEFT - 90
    body = []
    x, y = 4.0, 0.0
    for k, part in enumerate(parts):
        width = 14 + 7 * len(part) + 14  # the swatch, the text (about 7 px a letter), a gap
        if x + width > WIDTH:
            x, y = 4.0, y + 16
        colour = PALETTE[k % len(PALETTE)]
        body.append(f'<rect x="{x:.1f}" y="{y + 4}" width="10" height="10" fill="{colour}"/>')
        body.append(_label(x + 14, y + 13, part))
        x += width
    legend = y + 22
    for i, (label, values) in enumerate(rows):
        y = legend + i * BAR
        body.append(_label(LEFT - 6, y + BAR * 0.7, label[:40], "end"))
        x = float(LEFT)
        for k, value in enumerate(values):
            if value <= 0:
                continue
            length = span * value / top
            body.append(
                f'<rect x="{x:.1f}" y="{y}" width="{length:.1f}" height="{BAR - 4}" '
                f'fill="{PALETTE[k % len(PALETTE)]}"><title>{escape(label)}, '
                f"{escape(parts[k])}: {value:,.0f}</title></rect>"
            )
            x += length
        body.append(_label(x + 4, y + BAR * 0.7, f"{sum(values):,.0f}"))
    return _frame(int(legend) + 10 + len(rows) * BAR, body, title)


def columns(title: str, rows: Sequence[tuple[str, float]], x_label: str, y_label: str) -> str:
    """Vertical columns in order (a histogram, or a series over time)."""
    height, bottom, left = 240, 40, 60
    if not rows:
        return _frame(30, [_label(4, 20, f"{title}: nothing to show")], title)
    top = max(value for _, value in rows) or 1
    span = WIDTH - left - 10
    step = span / len(rows)
    body = [
        f'<line x1="{left}" y1="{height - bottom}" x2="{WIDTH - 10}" y2="{height - bottom}" '
        'stroke="#444"/>',
        _label(left - 6, 14, f"{top:,.0f}", "end"),
        _label(left - 6, height - bottom, "0", "end"),
        _label(WIDTH / 2, height - 4, x_label, "middle"),
        _label(4, 28, y_label),
    ]
    every = max(1, len(rows) // 12)  # at most a dozen axis labels
    for i, (label, value) in enumerate(rows):
        tall = (height - bottom - 20) * value / top
        x = left + i * step
        body.append(
            f'<rect x="{x + 1:.1f}" y="{height - bottom - tall:.1f}" '
            f'width="{max(step - 2, 1):.1f}" height="{tall:.1f}" fill="{PALETTE[0]}">'
            f"<title>{escape(label)}: {value:,.0f}</title></rect>"
        )
        if i % every == 0:
            body.append(_label(x + step / 2, height - bottom + 14, label[:12], "middle"))
    return _frame(height, body, title)
