"""Committed message and byte counts, readable from any thread without a transaction.

The persistent counters of each log in a store's ``LogSet`` are the truth and
survive a reopen; this mirror of them is replaced only after a commit returns, so a
watermark check on the reactor thread sees committed figures and never
touches ZODB.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .model import LogSet


@dataclass(frozen=True, slots=True)
class Counts:
    messages: int = 0
    bytes: int = 0


@dataclass(frozen=True, slots=True)
class CountSnapshot:
    destinations: dict[str, Counts]

    @classmethod
    def of(cls, logs: LogSet, destinations: Iterable[str]) -> CountSnapshot:
        """Read counts inside a transaction, to publish once it has committed.

        Names without a log (a topic message nobody stored) are left out.
        """
        found = {name: logs.logs.get(name) for name in destinations}
        return cls(
            {name: Counts(log.count, log.bytes) for name, log in found.items() if log is not None}
        )


_NONE = Counts()


class CountMirror:
    """Per-destination and total counts as of the last commit.

    A commit costs what it touched, not a scan: the total moves by the change
    of each destination published, and known destinations are updated in
    place (a reader on another thread sees each value whole); only a new
    destination makes a new dict, so that no reader iterates one that grows.
    """

    def __init__(self) -> None:
        self._destinations: dict[str, Counts] = {}
        self._total = Counts()

    def publish(self, snapshot: CountSnapshot) -> None:
        old = self._destinations
        messages, nbytes = self._total.messages, self._total.bytes
        for name, counts in snapshot.destinations.items():
            before = old.get(name, _NONE)
            messages += counts.messages - before.messages
            nbytes += counts.bytes - before.bytes
        if snapshot.destinations.keys() <= old.keys():
            old.update(snapshot.destinations)
        else:
            self._destinations = {**old, **snapshot.destinations}
        self._total = Counts(messages, nbytes)

    def destinations(self) -> list[str]:
        return sorted(self._destinations)

    def get(self, destination: str) -> Counts:
        return self._destinations.get(destination, _NONE)

    def total(self) -> Counts:
        return self._total
