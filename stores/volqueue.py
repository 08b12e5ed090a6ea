"""VolQueueStore: the non-persistent queue messages held in memory until delivered.

The messages themselves wait in their queue (``modules/destinations/queue.py``, in priority
order with its persistent ones); the VolQueueStore counts them per queue and in
total, so that counts are read without going through the queues. A queue
tells its count what came in and went out once per dispatch.
"""

from __future__ import annotations


class VolatileCount:
    """One queue's non-persistent messages in memory: how many, and their bytes."""

    __slots__ = ("messages", "bytes")

    def __init__(self) -> None:
        self.messages = 0
        self.bytes = 0


class VolQueueStore:
    """The counts of every queue's non-persistent messages."""

    def __init__(self) -> None:
        self._counts: dict[str, VolatileCount] = {}

    def counter(self, queue: str) -> VolatileCount:
        """The count of ``queue``, created on first use."""
        count = self._counts.get(queue)
        if count is None:
            count = self._counts[queue] = VolatileCount()
        return count

    def drop(self, queue: str) -> None:
        """A queue is removed."""
        self._counts.pop(queue, None)

    def count(self, queue: str) -> int:
        count = self._counts.get(queue)
        return count.messages if count is not None else 0

    def byte_count(self, queue: str) -> int:
        count = self._counts.get(queue)
        return count.bytes if count is not None else 0

    @property
    def total_messages(self) -> int:
        return sum(c.messages for c in self._counts.values())

    @property
    def total_bytes(self) -> int:
        return sum(c.bytes for c in self._counts.values())
