"""The two audits' report pages, from what they collected (plain Python, no Spark)."""

from __future__ import annotations

from typing import Any

from . import charts
from .report import Page, Section

FATE_CHART_ROWS = 30  # destinations in the fates chart (all are in the table)
Rows = list[dict[str, Any]]


def conservation_page(
    facts: dict[str, Any],
    summary: dict[str, Any],
    fates: tuple[str, ...],
    destinations: Rows,
    unexplained: Rows,
) -> Page:
    """The conservation audit's page: its verdict, fates per destination, the unexplained."""
    shown = [f.replace("_", " ") for f in fates]
    return Page(
        "wiremq conservation audit",
        summary["unexplained"] == 0 and facts["unreadable lines"] == 0,
        {
            **facts,
            "messages": summary["messages"],
            "received": summary["received"],
            **{name.replace("_", " "): summary[name] for name in fates},
        },
        [
            Section(
                "Fates per destination",
                "Each message counted once, by its fate.",
                charts.stacked(
                    "Fates per destination",
                    shown,
                    [
                        (row["destination"], [row[f] for f in fates])
                        for row in destinations[:FATE_CHART_ROWS]
                    ],
                ),
                ("destination", "messages", *shown),
                [(r["destination"], r["messages"], *(r[f] for f in fates)) for r in destinations],
            ),
            Section(
                "Unexplained messages",
                "Messages with no fate, fates that cannot go together, deliveries never settled "
                "or settled without a delivery.",
                columns=("message_id", "destination", "problems"),
                rows=[(r["message_id"], r["destination"], r["problems"]) for r in unexplained],
                more=summary["unexplained"] - len(unexplained),
            ),
        ],
    )


def _bin(start: int) -> str:
    """A lag histogram bin's label: its range in ms."""
    return f"{start}-{2 * start - 1}" if start > 1 else str(start)


def cleanup_page(
    facts: dict[str, Any],
    counts: dict[str, int],
    listed: dict[str, Rows],
    histogram: Rows,
    ok: bool,
) -> Page:
    """The cleanup audit's page: lag charts, removals per run, every fault found."""

    def section(title: str, text: str, key: str, columns: tuple[str, ...]) -> Section:
        rows = [tuple(row.get(c) for c in columns) for row in listed[key]]
        return Section(title, text, columns=columns, rows=rows, more=counts[key] - len(rows))

    lag_charts = "".join(
        charts.columns(
            f"Cleanup lag, {store}",
            [(_bin(r["from_ms"]), r["removals"]) for r in histogram if r["store"] == store],
            "lag after expiring (ms, bins doubling in width)",
            "removals",
        )
        for store in sorted({row["store"] for row in histogram})
    )
    recent = list(reversed(listed["per_run"]))
    percentile_columns = ("store", "destination", "removals", "p50_ms", "p90_ms", "p99_ms")
    return Page(
        "wiremq cleanup audit",
        ok,
        {
            **facts,
            "cleanup runs": counts["runs"],
            "removals": counts["removals"],
            "removed before expiring": counts["premature"],
            "expired and left too long": counts["outlived"],
            "runs over cleanuptransactiontime": counts["overran"],
            "runs whose count disagrees": counts["disagreeing"],
        },
        [
            Section(
                "Cleanup lag",
                "How long after expiring the cleanup runs removed messages, per store and "
                "destination.",
                lag_charts,
                (*percentile_columns, "max_ms"),
                [
                    tuple(r[c] for c in (*percentile_columns, "max_ms"))
                    for r in listed["percentiles"]
                ],
            ),
            Section(
                "Removals per run",
                f"The last {len(recent)} runs, oldest first.",
                charts.columns(
                    "Removals per run",
                    [(str(r["run"]).rsplit("-", 1)[-1], r["removals_recorded"]) for r in recent],
                    "cleanup run",
                    "removals",
                ),
            ),
            section(
                "Removed before expiring",
                "Cleanup runs may remove only expired messages: every row here is a fault.",
                "premature",
                ("message_id", "destination", "store", "run", "removed_ts", "expires"),
            ),
            section(
                "Expired and left too long",
                "Expired messages that stayed longer than the store's cleanupinterval and the "
                "runs around their removal allow.",
                "outlived",
                ("message_id", "destination", "store", "run", "expires", "lag_ms", "bound_ms"),
            ),
            section(
                "Runs over cleanuptransactiontime",
                "",
                "overran",
                ("run", "store", "started_ts", "duration_ms", "transaction_time", "scanned"),
            ),
            section(
                "Runs whose count disagrees with the journal",
                "",
                "disagreeing",
                ("run", "store", "removed_reported", "removals_recorded"),
            ),
        ],
    )
