"""VolQueueStore: non-persistent queue messages held in memory until delivered.

Each queue has one ``VolatileFifo`` (its messages in order, and their bytes),
which the queue uses directly: the VolQueueStore only knows them all, so that
counts per queue and in total are read without a scan of messages.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, Protocol, TypeVar


class Sized(Protocol):
    size: int


M = TypeVar("M", bound=Sized)


class VolatileFifo(Generic[M]):
    """One queue's non-persistent messages, oldest first, and their bytes."""

    __slots__ = ("items", "bytes")

    def __init__(self) -> None:
        self.items: deque[M] = deque()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self.items)

    def append(self, message: M) -> None:
        self.items.append(message)
        self.bytes += message.size

    def push_front(self, messages: Iterable[M]) -> None:
        """Put messages back at the front, keeping their order (redelivery)."""
        for message in reversed(list(messages)):
            self.items.appendleft(message)
            self.bytes += message.size

    def pop(self) -> M | None:
        """Remove and return the oldest message, or None if there is none."""
        if not self.items:
            return None
        message = self.items.popleft()
        self.bytes -= message.size
        return message

    def peek(self) -> M | None:
        return self.items[0] if self.items else None

    def remove_if(self, condition: Callable[[M], bool]) -> list[M]:
        """Remove and return the messages that meet ``condition`` (a cleanup pass)."""
        removed = [m for m in self.items if condition(m)]
        if removed:
            kept = [m for m in self.items if not condition(m)]
            self.items.clear()
            self.items.extend(kept)
            self.bytes -= sum(m.size for m in removed)
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
        return list(fifo.items) if fifo is not None else []

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
