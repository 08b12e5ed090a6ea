"""VolQueueStore: non-persistent queue messages held in memory until delivered.

Counts messages and bytes per queue and in total, so that flow control and the
admin console read them without a scan.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Generic, Protocol, TypeVar


class Sized(Protocol):
    size: int


M = TypeVar("M", bound=Sized)


class VolQueueStore(Generic[M]):
    """Per-queue FIFOs of messages, with message and byte counts."""

    def __init__(self) -> None:
        self._queues: dict[str, deque[M]] = {}
        self._bytes: dict[str, int] = {}
        self.total_messages = 0
        self.total_bytes = 0

    def _fifo(self, queue: str, message: M) -> deque[M]:
        """The queue's FIFO, with ``message`` counted in."""
        fifo = self._queues.get(queue)
        if fifo is None:
            fifo = self._queues[queue] = deque()
            self._bytes[queue] = 0
        self._bytes[queue] += message.size
        self.total_messages += 1
        self.total_bytes += message.size
        return fifo

    def append(self, queue: str, message: M) -> None:
        """Add a message at the back of ``queue``."""
        self._fifo(queue, message).append(message)

    def push_front(self, queue: str, messages: Iterable[M]) -> None:
        """Put messages back at the front of ``queue``, keeping their order (redelivery)."""
        for message in reversed(list(messages)):
            self._fifo(queue, message).appendleft(message)

    def pop(self, queue: str) -> M | None:
        """Remove and return the oldest message of ``queue``, or None if it is empty."""
        fifo = self._queues.get(queue)
        if not fifo:
            return None
        message = fifo.popleft()
        self._bytes[queue] -= message.size
        self.total_messages -= 1
        self.total_bytes -= message.size
        return message

    def peek(self, queue: str) -> M | None:
        """The oldest message of ``queue`` without removing it."""
        fifo = self._queues.get(queue)
        return fifo[0] if fifo else None

    def remove_if(self, queue: str, condition: Callable[[M], bool]) -> list[M]:
        """Remove and return the messages of ``queue`` that meet ``condition`` (a cleanup pass)."""
        fifo = self._queues.get(queue)
        if not fifo:
            return []
        removed: list[M] = []
        kept: list[M] = []
        for message in fifo:
            (removed if condition(message) else kept).append(message)
        if removed:
            fifo.clear()
            fifo.extend(kept)
            size = sum(m.size for m in removed)
            self._bytes[queue] -= size
            self.total_messages -= len(removed)
            self.total_bytes -= size
        return removed

    def count(self, queue: str) -> int:
        fifo = self._queues.get(queue)
        return len(fifo) if fifo else 0

    def byte_count(self, queue: str) -> int:
        return self._bytes.get(queue, 0)

    def drop(self, queue: str) -> list[M]:
        """Remove a queue and return what it held."""
        fifo = self._queues.pop(queue, None)
        self._bytes.pop(queue, None)
        messages = list(fifo or ())
        self.total_messages -= len(messages)
        self.total_bytes -= sum(m.size for m in messages)
        return messages
