"""VolQueueStore: the non-persistent queue messages held in memory until delivered.

The messages themselves wait in their queue (``modules/destinations/queue.py``, in priority
order with its persistent ones); the VolQueueStore keeps one count per queue of
them and their bytes, which the queue tells once per dispatch
(``modules/destinations/queue_counts.py``). A queue's own VolQueueStore watermark
switched on while the server runs starts from that count.
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
