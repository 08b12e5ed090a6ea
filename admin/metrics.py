"""``/metrics``: the query API's figures in Prometheus' text format (version 0.0.4).

Names follow Prometheus' conventions: the ``wiremq_`` prefix, base units in
the name (``_bytes``, ``_seconds``, ``_ratio``), ``_total`` for counters. What
is exported is the table of statistics the console's charts read too
(``modules/statistics.py``): a new figure is one entry there.

A scrape stays bounded however many destinations there are: the
per-destination series (and the destinations' own watermarks) are those of
the ``Admin.metricsdestinations`` busiest (holding the most messages, as the
charts choose them: ``modules/destinations/survey.py``), the only ones whose
states are read; ``wiremq_destinations_not_exported`` counts the others,
whose messages still count in the server's totals.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from wiremq.modules.history import busiest
from wiremq.modules.statistics import (
    DESTINATION,
    DISK,
    GAUGE,
    NOT_EXPORTED,
    SERVER,
    SPOOL_REFUSED,
    WATERMARK,
    State,
    Statistic,
    at,
)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

HA = (  # a node of an HA pair (docs/ha.md)
    Statistic(
        "wiremq_ha_active",
        GAUGE,
        "1 while this node is the active of its HA pair, 0 otherwise",
        lambda s: None if "ha" not in s else int(s["ha"]["role"] == "active"),
    ),
    Statistic(
        "wiremq_ha_lease_epoch",
        GAUGE,
        "The HA lease's epoch as this node last read it (one more at every takeover)",
        at("ha", "lease_epoch"),
    ),
    Statistic(
        "wiremq_ha_lease_expires_in_seconds",
        GAUGE,
        "Time left on the HA lease by the database's clock, as this node last read it",
        at("ha", "lease_expires_in"),
    ),
)
HA_ROLE = Statistic(
    "wiremq_ha_role",
    GAUGE,
    "This node's role in its HA pair (starting, standby, taking-over, active, stopping), "
    "as a label",
    at(),
)


def exposition(state: State, most_destinations: int) -> str:
    """The text of ``/metrics`` for one state of the server (on an HA standby, which serves
    nothing, its HA part alone), with the per-destination series of the
    ``most_destinations`` busiest destinations."""
    lines: list[str] = []
    if "ha" in state:
        for metric in HA:
            _family(lines, metric, [({}, metric.read(state))])
        role = {"node": state["ha"]["node"], "role": state["ha"]["role"]}
        _family(lines, HA_ROLE, [(role, 1)])
    if "queues" not in state:
        return "\n".join(lines) + "\n"
    for metric in SERVER:
        _family(lines, metric, [({}, metric.read(state))])
    everyone = (*state["queues"], *state["topics"])
    shown = {id(d) for d in busiest(everyone, most_destinations)}
    exported = [d for d in everyone if id(d) in shown]  # in the state's order
    totals = state["totals"]
    _family(lines, NOT_EXPORTED, [({}, totals["queues"] + totals["topics"] - len(exported))])
    destinations = [({"destination": d["name"], "kind": d["kind"]}, d) for d in exported]
    for metric in DESTINATION:
        _family(lines, metric, [(labels, metric.read(d)) for labels, d in destinations])
    watermarks = [({"watermark": w["name"]}, w) for w in _watermarks(state, exported)]
    for metric in WATERMARK:
        _family(lines, metric, [(labels, metric.read(w)) for labels, w in watermarks])
    stores = [({"store": name}, d) for d in state.get("disk", ()) for name in d["stores"]]
    for metric in DISK:
        _family(lines, metric, [(labels, metric.read(d)) for labels, d in stores])
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
