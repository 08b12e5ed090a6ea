"""The server's statistics, declared once: what ``/metrics`` exports and the console charts.

Each ``Statistic`` reads one figure from the query API's state (``flow_state``):
the whole server's (``SERVER``), one destination's (``DESTINATION``), one
watermark's (``WATERMARK``) or one store's disk (``DISK``). ``admin/metrics.py``
exports every one under its Prometheus name; ``modules/history.py`` samples those
with a ``chart`` name for the console's charts, a counter as its rate (its change
per second). A new figure is one entry here, and is both exported and, if it has a
chart name, charted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

State = Mapping[str, Any]
COUNTER = "counter"
GAUGE = "gauge"


def at(*path: str) -> Callable[[State], Any]:
    """A reader of the value at ``path`` in a state (nested mappings), None where the state
    has none."""

    def read(state: State) -> Any:
        value: Any = state
        for key in path:
            if not isinstance(value, Mapping) or key not in value:
                return None
            value = value[key]
        return value

    return read


@dataclass(frozen=True, slots=True)
class Statistic:
    """One figure: its Prometheus name, kind and help, how it is read from a state, and,
    if the console charts it, the series' name there, its legend and its unit (a counter's
    unit per second: it is charted as a rate)."""

    metric: str
    kind: str  # COUNTER or GAUGE
    help: str
    read: Callable[[State], Any]  # the value, or None when the state lacks it
    chart: str | None = None
    label: str = ""
    unit: str = ""

    @property
    def rate(self) -> bool:
        """Charted as its change per second."""
        return self.kind == COUNTER


def _held(state: State) -> float:
    return float(sum(d["messages"] for d in (*state["queues"], *state["topics"])))


SERVER = (
    Statistic(
        "wiremq_messages_received_total",
        COUNTER,
        "Messages the destinations received",
        at("totals", "received"),
        "received",
        "messages received",
        "msg/s",
    ),
    Statistic(
        "wiremq_messages_delivered_total",
        COUNTER,
        "Deliveries to consumers (a redelivery counts again)",
        at("totals", "delivered"),
        "delivered",
        "messages delivered",
        "msg/s",
    ),
    *(
        Statistic(f"wiremq_messages_{fate}_total", COUNTER, text, at("totals", fate))
        for fate, text in (
            ("acknowledged", "Messages (a topic's: deliveries) acknowledged or consumed"),
            ("redelivered", "Deliveries that came back to be delivered again"),
            ("expired", "Messages expired"),
            (
                "dead_lettered",
                "Messages moved to a dead message queue (NACKed, or redelivered too often)",
            ),
            (
                "discarded",
                "Messages discarded (an operator's purge or delete, nobody to take them)",
            ),
            ("moved", "Messages an operator moved to another destination"),
        )
    ),
    Statistic(
        "wiremq_messages",
        GAUGE,
        "Messages all destinations hold",
        _held,
        "messages",
        "messages held",
        "messages",
    ),
    Statistic(
        "wiremq_connections",
        GAUGE,
        "Client connections open",
        at("totals", "connections"),
        "connections",
        "connections",
        "connections",
    ),
    Statistic("wiremq_queues", GAUGE, "Queues", at("totals", "queues")),
    Statistic("wiremq_topics", GAUGE, "Topics", at("totals", "topics")),
    Statistic(
        "wiremq_resident_memory_bytes",
        GAUGE,
        "Resident memory of the server process",
        at("memory", "rss_bytes"),
        "rss",
        "server memory (resident)",
        "bytes",
    ),
    Statistic(
        "wiremq_uptime_seconds", GAUGE, "Time since the server started", at("server", "uptime")
    ),
    Statistic("wiremq_transactions_open", GAUGE, "Open transactions", at("transactions", "open")),
    Statistic(
        "wiremq_transaction_held_messages",
        GAUGE,
        "Messages held in open transactions",
        at("transactions", "messages"),
    ),
    Statistic(
        "wiremq_transaction_held_bytes",
        GAUGE,
        "Bytes of messages held in open transactions",
        at("transactions", "bytes"),
        "transaction_bytes",
        "bytes held in open transactions",
        "bytes",
    ),
    Statistic(
        "wiremq_delivered_unacked_messages",
        GAUGE,
        "Messages delivered to client-acknowledging consumers and not yet acknowledged",
        at("delivered_unacked"),
    ),
    Statistic(
        "wiremq_egress_load_ratio",
        GAUGE,
        "Queued egress work over all clients' egress capacity",
        lambda s: None if s.get("egress_load_factor") is None else s["egress_load_factor"] / 100,
    ),
    Statistic(
        "wiremq_unfinished_frame_bytes",
        GAUGE,
        "Bytes of frames being received, all connections",
        at("unfinished_frame_bytes"),
    ),
    Statistic(
        "wiremq_slow_subscriber_disconnects_total",
        COUNTER,
        "Subscribers disconnected for falling behind",
        at("slow_disconnects"),
    ),
    Statistic(
        "wiremq_store_commits_total",
        COUNTER,
        "Commits of the persistent store",
        at("commits", "store", "commits"),
    ),
    Statistic(
        "wiremq_spool_used_bytes",
        GAUGE,
        "Bytes of persistent messages stored",
        at("spool", "used_bytes"),
    ),
    Statistic(
        "wiremq_spool_limit_bytes",
        GAUGE,
        "MessageSpool.maxspoolusage (-1: no limit)",
        at("spool", "limit_bytes"),
    ),
)

DESTINATION = (
    Statistic(
        "wiremq_destination_messages",
        GAUGE,
        "Messages a destination holds (waiting, and delivered but not acknowledged)",
        at("messages"),
        "messages",
        "messages",
        "messages",
    ),
    Statistic(
        "wiremq_destination_bytes",
        GAUGE,
        "Bytes a destination holds",
        at("bytes"),
        "bytes",
        "bytes",
        "bytes",
    ),
    Statistic(
        "wiremq_destination_stored_messages",
        GAUGE,
        "Messages a destination holds in the persistent store",
        at("stored_messages"),
    ),
    Statistic(
        "wiremq_destination_stored_bytes",
        GAUGE,
        "Bytes a destination holds in the persistent store",
        at("stored_bytes"),
    ),
    Statistic(
        "wiremq_destination_received_total",
        COUNTER,
        "Messages a destination received",
        at("received"),
        "received",
        "received",
        "msg/s",
    ),
    Statistic(
        "wiremq_destination_delivered_total",
        COUNTER,
        "Deliveries of a destination to its consumers",
        at("delivered"),
        "delivered",
        "delivered",
        "msg/s",
    ),
    Statistic("wiremq_destination_consumers", GAUGE, "Consumers of a destination", at("consumers")),
    Statistic(
        "wiremq_destination_producers",
        GAUGE,
        "Producers sending to a destination",
        at("producers"),
    ),
    Statistic(
        "wiremq_destination_shutdown",
        GAUGE,
        "1 while a destination is shut down (refuses new messages)",
        at("shutdown"),
    ),
)

WATERMARK = (
    Statistic(
        "wiremq_watermark_tripped",
        GAUGE,
        "1 while a watermark has stopped its producers",
        at("tripped"),
    ),
    Statistic("wiremq_watermark_messages", GAUGE, "Messages a watermark counts", at("messages")),
    Statistic("wiremq_watermark_bytes", GAUGE, "Bytes a watermark counts", at("bytes")),
    Statistic(
        "wiremq_watermark_stopped_producers",
        GAUGE,
        "Producers a watermark holds stopped",
        at("stopped_producers"),
    ),
    Statistic("wiremq_watermark_trips_total", COUNTER, "Times a watermark tripped", at("trips")),
)

DISK = (  # each store's disk (and the write-ahead log's): the free-disk watermark
    Statistic(
        "wiremq_disk_free_bytes",
        GAUGE,
        "Free space of the filesystem holding a store (or the write-ahead log)",
        at("free_bytes"),
    ),
    Statistic("wiremq_disk_total_bytes", GAUGE, "Size of that filesystem", at("total_bytes")),
    Statistic(
        "wiremq_disk_producers_held",
        GAUGE,
        "1 while persistent producers are stopped for lack of space there",
        at("producers_held"),
    ),
)

SPOOL_REFUSED = Statistic(
    "wiremq_spool_refused_messages_total",
    COUNTER,
    "Persistent messages refused by a spool check, by reason",
    at(),
)


def charted(statistics: tuple[Statistic, ...]) -> tuple[Statistic, ...]:
    """Those of ``statistics`` the console charts."""
    return tuple(s for s in statistics if s.chart is not None)
