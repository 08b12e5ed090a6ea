"""The recent past of the server's figures, for the console's charts.

A timer takes a sample of the query API's state (``flow_state``) every
``Admin.sampleinterval`` seconds (the first few sooner: ``next_interval``):
nothing is counted on the message path for it. Rates are differences of the
counters the path keeps anyway (messages each destination received,
deliveries), divided by the time between samples.
What is charted are the statistics with a chart name (``modules/statistics.py``,
the table ``/metrics`` exports too). The sample's state lists the busiest
destinations alone (``Admin.chartdestinations``: ``destinations/survey.py``
finds them a slice at a time).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable
from typing import Any

from wiremq.modules.rates import Rates
from wiremq.modules.statistics import DESTINATION, SERVER, State, Statistic, charted

SERVER_SERIES = charted(SERVER)
DESTINATION_SERIES = charted(DESTINATION)
# The first samples come sooner: at once, then after an eighth, a quarter and a half of
# the interval, so that a chart shows rates within seconds of a start, not two intervals.
RAMP = 3


class Track:
    """The samples of one subject (the server, or one destination): a time column and
    a column per charted statistic (by its chart name), each at most ``length`` long."""

    def __init__(self, series: tuple[Statistic, ...], length: int) -> None:
        self.series = {s.chart or s.metric: s for s in series}
        self.times: deque[float] = deque(maxlen=length)
        self.columns: dict[str, deque[float | None]] = {
            name: deque(maxlen=length) for name in self.series
        }
        self._last: tuple[float, dict[str, float | None]] | None = None  # for rates

    def add(self, now: float, state: State) -> None:
        raw = {name: _number(s.read(state)) for name, s in self.series.items()}
        last = self._last
        self._last = (now, raw)
        self.times.append(now)
        for name, s in self.series.items():
            value = raw[name]
            if s.rate:
                before = last[1][name] if last is not None else None
                elapsed = now - last[0] if last is not None else 0.0
                if value is None or before is None or elapsed <= 0 or value < before:
                    value = None  # no earlier sample, or the counter started again
                else:
                    value = (value - before) / elapsed
            self.columns[name].append(value)

    def json(self, since: float) -> dict[str, Any]:
        keep = [i for i, t in enumerate(self.times) if t > since]
        return {
            "times": [self.times[i] for i in keep],
            "series": {
                name: {
                    "label": s.label,
                    "unit": s.unit,
                    "values": [_round(self.columns[name][i]) for i in keep],
                }
                for name, s in self.series.items()
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
        self.rates = Rates()  # every connection's latest

    def next_interval(self, interval: float) -> float:
        """How long to wait for the next sample, taken every ``interval`` seconds once the
        first few are (see ``RAMP``)."""
        taken = len(self.server.times)
        if not taken:
            return 0.0
        return interval / 2 ** max(0, RAMP + 1 - taken)

    def sample(self, now: float, state: State) -> None:
        """Record one sample; destinations beyond the ``kept`` busiest are left out, and
        those left out for a whole span are forgotten."""
        self.server.add(now, state)
        self.rates.sample(now, state)
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
