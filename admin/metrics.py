"""``/metrics``: the query API's figures in Prometheus' text format (version 0.0.4).

Names follow Prometheus' conventions: the ``wiremq_`` prefix, base units in
the name (``_bytes``, ``_seconds``, ``_ratio``), ``_total`` for counters. What
is exported is declared once, in ``SERVER_METRICS``, ``DESTINATION_METRICS``
and ``WATERMARK_METRICS``: a new figure is one entry.

A scrape stays bounded however many destinations there are: the
per-destination series (and the destinations' own watermarks) are those of
the ``Admin.metricsdestinations`` busiest (holding the most messages, as the
charts choose them); ``wiremq_destinations_not_exported`` counts the others,
whose messages still count in the server's totals.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from wiremq.modules.history import at, busiest

State = Mapping[str, Any]
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    kind: str  # counter or gauge
    help: str
    read: Callable[[Any], Any]  # the value, or None when the state lacks it


SERVER_METRICS = (
    Metric(
        "wiremq_messages_received_total",
        "counter",
        "Messages the destinations received",
        at("totals", "received"),
    ),
    Metric(
        "wiremq_messages_delivered_total",
        "counter",
        "Deliveries to consumers (a redelivery counts again)",
        at("totals", "delivered"),
    ),
    Metric("wiremq_connections", "gauge", "Client connections open", at("totals", "connections")),
    Metric("wiremq_queues", "gauge", "Queues", at("totals", "queues")),
    Metric("wiremq_topics", "gauge", "Topics", at("totals", "topics")),
    Metric(
        "wiremq_resident_memory_bytes",
        "gauge",
        "Resident memory of the server process",
        at("memory", "rss_bytes"),
    ),
    Metric(
        "wiremq_uptime_seconds", "gauge", "Time since the server started", at("server", "uptime")
    ),
    Metric("wiremq_transactions_open", "gauge", "Open transactions", at("transactions", "open")),
    Metric(
        "wiremq_transaction_held_messages",
        "gauge",
        "Messages held in open transactions",
        at("transactions", "messages"),
    ),
    Metric(
        "wiremq_transaction_held_bytes",
        "gauge",
        "Bytes of messages held in open transactions",
        at("transactions", "bytes"),
    ),
    Metric(
        "wiremq_delivered_unacked_messages",
        "gauge",
        "Messages delivered to client-acknowledging consumers and not yet acknowledged",
        at("delivered_unacked"),
    ),
    Metric(
        "wiremq_egress_load_ratio",
        "gauge",
        "Queued egress work over all clients' egress capacity",
        lambda s: None if s.get("egress_load_factor") is None else s["egress_load_factor"] / 100,
    ),
    Metric(
        "wiremq_unfinished_frame_bytes",
        "gauge",
        "Bytes of frames being received, all connections",
        at("unfinished_frame_bytes"),
    ),
    Metric(
        "wiremq_slow_subscriber_disconnects_total",
        "counter",
        "Subscribers disconnected for falling behind",
        at("slow_disconnects"),
    ),
    Metric(
        "wiremq_store_commits_total",
        "counter",
        "Commits of the persistent store",
        at("commits", "store", "commits"),
    ),
    Metric(
        "wiremq_spool_used_bytes",
        "gauge",
        "Bytes of persistent messages stored",
        at("spool", "used_bytes"),
    ),
    Metric(
        "wiremq_spool_limit_bytes",
        "gauge",
        "MessageSpool.maxspoolusage (-1: no limit)",
        at("spool", "limit_bytes"),
    ),
)

DESTINATION_METRICS = (
    Metric(
        "wiremq_destination_messages",
        "gauge",
        "Messages a destination holds (waiting, and delivered but not acknowledged)",
        at("messages"),
    ),
    Metric("wiremq_destination_bytes", "gauge", "Bytes a destination holds", at("bytes")),
    Metric(
        "wiremq_destination_stored_messages",
        "gauge",
        "Messages a destination holds in the persistent store",
        at("stored_messages"),
    ),
    Metric(
        "wiremq_destination_stored_bytes",
        "gauge",
        "Bytes a destination holds in the persistent store",
        at("stored_bytes"),
    ),
    Metric(
        "wiremq_destination_received_total",
        "counter",
        "Messages a destination received",
        at("received"),
    ),
    Metric(
        "wiremq_destination_delivered_total",
        "counter",
        "Deliveries of a destination to its consumers",
        at("delivered"),
    ),
    Metric("wiremq_destination_consumers", "gauge", "Consumers of a destination", at("consumers")),
    Metric(
        "wiremq_destination_producers",
        "gauge",
        "Producers sending to a destination",
        at("producers"),
    ),
    Metric(
        "wiremq_destination_shutdown",
        "gauge",
        "1 while a destination is shut down (refuses new messages)",
        at("shutdown"),
    ),
)

WATERMARK_METRICS = (
    Metric(
        "wiremq_watermark_tripped",
        "gauge",
        "1 while a watermark has stopped its producers",
        at("tripped"),
    ),
    Metric("wiremq_watermark_messages", "gauge", "Messages a watermark counts", at("messages")),
    Metric("wiremq_watermark_bytes", "gauge", "Bytes a watermark counts", at("bytes")),
    Metric(
        "wiremq_watermark_stopped_producers",
        "gauge",
        "Producers a watermark holds stopped",
        at("stopped_producers"),
    ),
    Metric("wiremq_watermark_trips_total", "counter", "Times a watermark tripped", at("trips")),
)


NOT_EXPORTED = Metric(
    "wiremq_destinations_not_exported",
    "gauge",
    "Destinations left out of the per-destination series (Admin.metricsdestinations)",
    at(),
)


def exposition(state: State, most_destinations: int) -> str:
    """The text of ``/metrics`` for one state of the server, with the per-destination
    series of the ``most_destinations`` busiest destinations."""
    lines: list[str] = []
    for metric in SERVER_METRICS:
        _family(lines, metric, [({}, metric.read(state))])
    everyone = (*state["queues"], *state["topics"])
    shown = {id(d) for d in busiest(everyone, most_destinations)}
    exported = [d for d in everyone if id(d) in shown]  # in the state's order
    _family(lines, NOT_EXPORTED, [({}, len(everyone) - len(exported))])
    destinations = [({"destination": d["name"], "kind": d["kind"]}, d) for d in exported]
    for metric in DESTINATION_METRICS:
        _family(lines, metric, [(labels, metric.read(d)) for labels, d in destinations])
    watermarks = [({"watermark": w["name"]}, w) for w in _watermarks(state, exported)]
    for metric in WATERMARK_METRICS:
        _family(lines, metric, [(labels, metric.read(w)) for labels, w in watermarks])
    refused = state.get("spool", {}).get("refused", {})
    _family(
        lines,
        Metric(
            "wiremq_spool_refused_messages_total",
            "counter",
            "Persistent messages refused by a spool check, by reason",
            at(),
        ),
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
    lines: list[str], metric: Metric, samples: Iterable[tuple[dict[str, str], Any]]
) -> None:
    present = [(labels, value) for labels, value in samples if value is not None]
    if not present:
        return
    lines.append(f"# HELP {metric.name} {_escape_help(metric.help)}")
    lines.append(f"# TYPE {metric.name} {metric.kind}")
    for labels, value in present:
        label_text = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels.items())
        braces = f"{{{label_text}}}" if label_text else ""
        lines.append(f"{metric.name}{braces} {_number(value)}")


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
