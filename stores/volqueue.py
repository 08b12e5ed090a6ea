"""VolQueueStore: non-persistent queue messages held in memory until delivered.

Each queue has one ``VolatileFifo`` (its messages in order), which the queue
uses directly: the VolQueueStore only knows them all, so that counts per queue
and in total are read without going through the queues.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, Protocol, TypeVar


class Sized(Protocol):
    size: int


M = TypeVar("M", bound=Sized)


class VolatileFifo(deque[M], Generic[M]):
    """One queue's non-persistent messages, oldest first: a deque, so that the queue appends
    and takes them at C speed (one of each per message); their bytes are summed when
    asked (the admin view), not kept per message."""

    @property
    def bytes(self) -> int:
        return sum(m.size for m in self)

    def push_front(self, messages: Iterable[M]) -> None:
        """Put messages back at the front, keeping their order (redelivery)."""
        self.extendleft(reversed(list(messages)))

    def remove_if(self, condition: Callable[[M], bool]) -> list[M]:
        """Remove and return the messages that meet ``condition`` (a cleanup pass)."""
        removed = [m for m in self if condition(m)]
        if removed:
            kept = [m for m in self if not condition(m)]
            self.clear()
            self.extend(kept)
        return removed


class VolQueueStore(Generic[M]):
    """The FIFOs of every queue, with message and byte counts."""

    def __init__(self) -> None:
        self._fifos: dict[str, VolatileFifo[M]] = {}

    def fifo(self, queue: str) -> VolatileFifo[M]:
        """The FIFO of ``queue``, created on first use."""
        fifo = self._fifos.get(queue)
        if fifo is None:
            fifo = self._fifos[queue] = VolatileFifo()
        return fifo

    def drop(self, queue: str) -> list[M]:
        """Remove a queue and return what it held."""
        fifo = self._fifos.pop(queue, None)
        return list(fifo) if fifo is not None else []

    def __iter__(self) -> Iterator[tuple[str, VolatileFifo[M]]]:
        return iter(list(self._fifos.items()))

    def count(self, queue: str) -> int:
        fifo = self._fifos.get(queue)
        return len(fifo) if fifo is not None else 0

    def byte_count(self, queue: str) -> int:
        fifo = self._fifos.get(queue)
        return fifo.bytes if fifo is not None else 0

    @property
    def total_messages(self) -> int:
        return sum(len(f) for f in self._fifos.values())

    @property
    def total_bytes(self) -> int:
        return sum(f.bytes for f in self._fifos.values())
