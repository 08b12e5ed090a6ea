"""The latest rates (msg/s) of every connection: published, delivered and acknowledged,
for the console's tables and pages (a destination's: ``destinations/survey.py``).

Taken with the charts' samples (``history.py``, every ``Admin.sampleinterval``, the
first few sooner), as differences of counters the message path keeps anyway
(a connection's ``published``, ``messages_sent`` and its subscriptions'
``acknowledged``) over the time between the last two samples. A subject seen
once has no rate yet (None); nor has a counter that went down (a connection's
subscription ended).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

State = Mapping[str, Any]
RATES = ("publish_rate", "deliver_rate", "ack_rate")
NO_RATES: dict[str, float | None] = dict.fromkeys(RATES)

Counters = tuple[int, int, int]


def connection_counters(state: State) -> Counters:
    """A connection's (published, MESSAGE frames sent, acknowledged) from its state."""
    acknowledged = sum(s["acknowledged"] for s in state["subscriptions"])
    return (state["published"], state["messages_sent"], acknowledged)


class Track:
    """The last sample of each subject's counters, and the rates it gave."""

    def __init__(self) -> None:
        self.last: dict[str, tuple[float, Counters]] = {}
        self.rates: dict[str, dict[str, float | None]] = {}

    def sample(self, now: float, counters: dict[str, Counters]) -> None:
        """Record every subject's counters at ``now``; those absent are forgotten."""
        rates: dict[str, dict[str, float | None]] = {}
        for name, values in counters.items():
            before = self.last.get(name)
            if before is None or now <= before[0]:
                rates[name] = NO_RATES
                continue
            elapsed = now - before[0]
            rates[name] = {
                rate: None if value < old else round((value - old) / elapsed, 3)
                for rate, value, old in zip(RATES, values, before[1], strict=True)
            }
        self.last = {name: (now, values) for name, values in counters.items()}
        self.rates = rates

    def of(self, name: str) -> dict[str, float | None]:
        return self.rates.get(name, NO_RATES)


class Rates:
    """Every connection's latest rates (see the module docstring)."""

    def __init__(self) -> None:
        self.connections = Track()

    def sample(self, now: float, state: State) -> None:
        """One sample of the query API's state (``flow_state``)."""
        self.connections.sample(
            now, {c["session"]: connection_counters(c) for c in state["clients"]}
        )

    def of_connection(self, session: str) -> dict[str, float | None]:
        return self.connections.of(session)
