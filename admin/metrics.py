"""``/metrics``: the query API's figures in Prometheus' text format (version 0.0.4).

Names follow Prometheus' conventions: the ``wiremq_`` prefix, base units in
the name (``_bytes``, ``_seconds``, ``_ratio``), ``_total`` for counters. What
is exported is the table of statistics the console's charts read too
(``modules/statistics.py``): a new figure is one entry there.

A scrape stays bounded however many destinations there are: the
per-destination series (and the destinations' own watermarks) are those of
the ``Admin.metricsdestinations`` busiest (holding the most messages, as the
charts choose them); ``wiremq_destinations_not_exported`` counts the others,
whose messages still count in the server's totals.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from wiremq.modules.history import busiest
from wiremq.modules.statistics import (
    DESTINATION,
    NOT_EXPORTED,
    SERVER,
    SPOOL_REFUSED,
    WATERMARK,
    State,
    Statistic,
)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def exposition(state: State, most_destinations: int) -> str:
    """The text of ``/metrics`` for one state of the server, with the per-destination
    series of the ``most_destinations`` busiest destinations."""
    lines: list[str] = []
    for metric in SERVER:
        _family(lines, metric, [({}, metric.read(state))])
    everyone = (*state["queues"], *state["topics"])
    shown = {id(d) for d in busiest(everyone, most_destinations)}
    exported = [d for d in everyone if id(d) in shown]  # in the state's order
    _family(lines, NOT_EXPORTED, [({}, len(everyone) - len(exported))])
    destinations = [({"destination": d["name"], "kind": d["kind"]}, d) for d in exported]
    for metric in DESTINATION:
        _family(lines, metric, [(labels, metric.read(d)) for labels, d in destinations])
    watermarks = [({"watermark": w["name"]}, w) for w in _watermarks(state, exported)]
    for metric in WATERMARK:
        _family(lines, metric, [(labels, metric.read(w)) for labels, w in watermarks])
    refused = state.get("spool", {}).get("refused", {})
    _family(
        lines,
        SPOOL_REFUSED,
        [({"reason": reason}, count) for reason, count in sorted(refused.items())],
    )
    return "\n".join(lines) + "\n"


def _watermarks(state: State, destinations: Iterable[State]) -> list[Mapping[str, Any]]:
    """Every watermark once: the global ones, then each of ``destinations``' own."""
    seen: dict[str, Mapping[str, Any]] = {w["name"]: w for w in state["watermarks"]}
    for destination in destinations:
        for watermark in destination["watermarks"]:
            seen.setdefault(watermark["name"], watermark)
    return list(seen.values())


def _family(
    lines: list[str], metric: Statistic, samples: Iterable[tuple[dict[str, str], Any]]
) -> None:
    present = [(labels, value) for labels, value in samples if value is not None]
    if not present:
        return
    lines.append(f"# HELP {metric.metric} {_escape_help(metric.help)}")
    lines.append(f"# TYPE {metric.metric} {metric.kind}")
    for labels, value in present:
        label_text = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels.items())
        braces = f"{{{label_text}}}" if label_text else ""
        lines.append(f"{metric.metric}{braces} {_number(value)}")


def _number(value: Any) -> str:
    number = float(value)
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "+Inf" if number > 0 else "-Inf"
    return str(int(number)) if number.is_integer() and abs(number) < 2**53 else repr(number)


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
