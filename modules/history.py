"""The recent past of the server's figures, for the console's charts.

A timer takes a sample of the query API's state (``flow_state``) every
``Admin.sampleinterval`` seconds: nothing is counted on the message path for
it. Rates are differences of the counters the path keeps anyway (messages
each destination received, deliveries), divided by the time between samples.
What is charted is declared once, in ``SERVER_SERIES`` and
``DESTINATION_SERIES``: a new figure is one entry there.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

State = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Series:
    """One charted figure: a gauge read from a state, or the rate of a counter."""

    name: str
    label: str
    unit: str
    read: Callable[[State], Any]  # a number, or None when the state lacks it
    rate: bool = False  # charted as the counter's change per second


def _depth(state: State) -> float:
    return float(sum(d["messages"] for d in (*state["queues"], *state["topics"])))


def at(*path: str) -> Callable[[State], Any]:
    """A reader of the value at ``path`` in a state (nested mappings), None where the state
    has none: what the console's charts and ``/metrics`` read."""

    def read(state: State) -> Any:
        value: Any = state
        for key in path:
            if not isinstance(value, Mapping) or key not in value:
                return None
            value = value[key]
        return value

    return read


SERVER_SERIES = (
    Series("received", "messages received", "msg/s", at("totals", "received"), rate=True),
    Series("delivered", "messages delivered", "msg/s", at("totals", "delivered"), rate=True),
    Series("messages", "messages held", "messages", _depth),
    Series("connections", "connections", "connections", at("totals", "connections")),
    Series("rss", "server memory (resident)", "bytes", at("memory", "rss_bytes")),
    Series(
        "transaction_bytes",
        "bytes held in open transactions",
        "bytes",
        at("transactions", "bytes"),
    ),
)

DESTINATION_SERIES = (
    Series("messages", "messages", "messages", at("messages")),
    Series("bytes", "bytes", "bytes", at("bytes")),
    Series("received", "received", "msg/s", at("received"), rate=True),
    Series("delivered", "delivered", "msg/s", at("delivered"), rate=True),
)


class Track:
    """The samples of one subject (the server, or one destination): a time column and
    a column per series, each at most ``length`` long."""

    def __init__(self, series: tuple[Series, ...], length: int) -> None:
        self.series = series
        self.times: deque[float] = deque(maxlen=length)
        self.columns: dict[str, deque[float | None]] = {
            s.name: deque(maxlen=length) for s in series
        }
        self._last: tuple[float, dict[str, float | None]] | None = None  # for rates

    def add(self, now: float, state: State) -> None:
        raw = {s.name: _number(s.read(state)) for s in self.series}
        last = self._last
        self._last = (now, raw)
        self.times.append(now)
        for s in self.series:
            value = raw[s.name]
            if s.rate:
                before = last[1][s.name] if last is not None else None
                elapsed = now - last[0] if last is not None else 0.0
                if value is None or before is None or elapsed <= 0 or value < before:
                    value = None  # no earlier sample, or the counter started again
                else:
                    value = (value - before) / elapsed
            self.columns[s.name].append(value)

    def json(self, since: float) -> dict[str, Any]:
        keep = [i for i, t in enumerate(self.times) if t > since]
        return {
            "times": [self.times[i] for i in keep],
            "series": {
                s.name: {
                    "label": s.label,
                    "unit": s.unit,
                    "values": [_round(self.columns[s.name][i]) for i in keep],
                }
                for s in self.series
            },
        }


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def busiest(destinations: Iterable[State], count: int) -> list[State]:
    """The ``count`` destinations holding the most messages (then: that received the most),
    busiest first: the ones the charts and ``/metrics`` show when there are too many."""
    return heapq.nlargest(count, destinations, key=lambda d: (d["messages"], d["received"]))


class History:
    """The server's and the busiest destinations' figures over the last ``span`` seconds,
    sampled every ``interval`` seconds."""

    def __init__(self, span: float, interval: float, destinations: int) -> None:
        self.length = max(2, int(span / interval) + 1)
        self.kept = destinations
        self.server = Track(SERVER_SERIES, self.length)
        self.destinations: dict[str, Track] = {}

    def sample(self, now: float, state: State) -> None:
        """Record one sample; destinations beyond the ``kept`` busiest are left out, and
        those left out for a whole span are forgotten."""
        self.server.add(now, state)
        for destination in busiest((*state["queues"], *state["topics"]), self.kept):
            track = self.destinations.get(destination["name"])
            if track is None:
                track = self.destinations[destination["name"]] = Track(
                    DESTINATION_SERIES, self.length
                )
            track.add(now, destination)
        oldest = self.server.times[0]
        for name, track in list(self.destinations.items()):
            if not track.times or track.times[-1] < oldest:
                del self.destinations[name]

    def json(self, since: float = 0.0, destination: str | None = None) -> dict[str, Any]:
        """The samples after ``since`` (epoch seconds): the server's, or a destination's."""
        if destination is None:
            return self.server.json(since)
        track = self.destinations.get(destination)
        if track is None:
            return {"times": [], "series": {}}
        return track.json(since)
