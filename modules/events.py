"""The server's one event stream.

Every structlog event passes through ``EventStream`` (it is a structlog
processor), which keeps the most recent ones and hands each to its listeners:
the admin console's event list reads this stream. The audit journal does not:
it records every message life event, hundreds of thousands a second, and a
structlog event costs more than the message path itself; its hooks append a
tuple and a writer thread encodes them (``modules/journal``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, MutableMapping
from typing import Any

from wiremq.config.groups import ServerSettings
from wiremq.config.parameters import REGISTRY
from wiremq.config.settings import Settings

Event = MutableMapping[str, Any]


class EventStream:
    """A structlog processor that records events and fans them out to listeners."""

    def __init__(self, keep: int) -> None:
        self.recent: deque[dict[str, Any]] = deque(maxlen=keep)
        self.total = 0  # events seen: the n-th has number n
        self._listeners: list[Callable[[dict[str, Any]], None]] = []

    def keep(self, count: int) -> None:
        """Keep the ``count`` most recent events (Server.recentevents)."""
        self.recent = deque(self.recent, maxlen=count)

    def __call__(self, logger: object, method_name: str, event: Event) -> Event:
        record = dict(event)
        self.recent.append(record)
        self.total += 1
        for listener in self._listeners:
            listener(record)
        return event

    def since(self, after: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
        """The recent events numbered after ``after`` (the oldest first, at most ``limit``),
        each with its number; those no longer kept are skipped."""
        first = self.total - len(self.recent) + 1  # the number of recent[0]
        start = max(0, after + 1 - first)
        return [
            (first + i, self.recent[i]) for i in range(start, min(len(self.recent), start + limit))
        ]

    def subscribe(self, listener: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
        """Call ``listener`` with every later event; returns a function that stops it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)


EVENTS = EventStream(ServerSettings.read(Settings(REGISTRY), "Server").recentevents)
