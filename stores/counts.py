"""Committed message and byte counts, readable from any thread without a transaction.

The store's in-memory state (``walstate.StoreState``) publishes what a commit
changed here only once its record is durable, so a watermark check on the
event loop sees committed figures and never touches ZODB.
"""

from __future__ import annotations

from typing import NamedTuple


class Counts(NamedTuple):
    """A tuple, so that ``MessageStore.count`` and ``totals`` hand it out as it is."""

    messages: int = 0
    bytes: int = 0


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
        self.total = Counts()  # of every destination (replaced whole: any thread reads it)

    def publish(self, changed: dict[str, Counts]) -> None:
        """The counts of the destinations a commit changed."""
        old = self._destinations
        messages, nbytes = self.total
        for name, (now_messages, now_bytes) in changed.items():
            before_messages, before_bytes = old.get(name, _NONE)
            messages += now_messages - before_messages
            nbytes += now_bytes - before_bytes
        if changed.keys() <= old.keys():
            old.update(changed)
        else:
            self._destinations = {**old, **changed}
        self.total = Counts(messages, nbytes)

    def destinations(self) -> list[str]:
        return sorted(self._destinations)

    def get(self, destination: str) -> Counts:
        return self._destinations.get(destination, _NONE)
