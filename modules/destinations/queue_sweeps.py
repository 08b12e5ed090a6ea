"""What leaves a queue's memory undelivered: expired messages, an idle live buffer.

The cleanup processes (``Destinations.sweep_volatile``,
``sweep_live_buffers``) call each queue: the VolQueueStore's cleanup removes
its expired non-persistent messages, the queue live buffer's cleanup its
expired persistent ones and, once the queue has delivered nothing for
qlbcleanuptimetolive, gives the rest back to the store (read again when a
consumer comes: ``queue_reads.py``). Expired messages, swept or met while
dispatching, are handled per the destination (``expired``); an operator's
taking of waiting messages goes through ``take_out`` too. It keeps nothing of
its own: a queue makes one for each use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wiremq.modules.destinations.backlog import StoreBacklog
from wiremq.modules.destinations.levels import Levels
from wiremq.modules.destinations.queue_counts import QueueCounts
from wiremq.modules.destinations.queue_reads import BacklogReads
from wiremq.modules.destinations.queue_selective import SelectiveDispatch
from wiremq.modules.message import Message

if TYPE_CHECKING:
    from wiremq.modules.destinations.expiry import Expiry


class QueueSweeps:
    """One queue's messages in memory leaving it undelivered (see the module docstring)."""

    __slots__ = ("name", "main", "selective", "counts", "backlog", "reads", "expiry")

    def __init__(
        self,
        name: str,
        main: Levels,
        selective: SelectiveDispatch | None,
        counts: QueueCounts,
        backlog: StoreBacklog,
        reads: BacklogReads,
        expiry: Expiry,
    ) -> None:
        self.name = name
        self.main = main
        self.selective = selective  # the queue's selective way, if made (its groups)
        self.counts = counts
        self.backlog = backlog
        self.reads = reads  # to give the live buffer back
        self.expiry = expiry

    def in_memory(self) -> list[Message]:
        """Every message waiting in memory (in the queue's list, or kept for a group's
        owner), in no particular order."""
        selective = self.selective
        return [*self.main, *(() if selective is None else selective.groups.waiting())]

    def take_out(self, messages: list[Message]) -> None:
        """Messages leave memory without being delivered (expired, given back, taken)."""
        for message in messages:
            message.home = None
            self.counts.left_memory(message)
        self.main.discard(messages)
        if self.selective is not None:
            self.selective.groups.compact()
        self.counts.report_volatile()

    def expired(self, messages: list[Message]) -> None:
        """Expired messages met in memory: never delivered; handled per the destination.

        Unless expiryonread, stored ones stay until the store's cleanup removes them.
        """
        volatile = [m for m in messages if not m.store_seq]
        if volatile:
            self.expiry.expired(self.name, volatile)
        if self.backlog.settings.expiryonread:
            stored = [((self.name, m.store_seq), m.to_stored(0)) for m in messages if m.store_seq]
            if stored:
                self.expiry.expired_stored(stored)

    def sweep_volatile(self, now_ms: int) -> int:
        """The VolQueueStore's cleanup: remove expired non-persistent messages; returns how
        many it looked at (the journal's cleanup run counts them)."""
        volatile = [m for m in self.in_memory() if not m.store_seq]
        expired = [m for m in volatile if m.expired(now_ms)]
        if expired:
            self.take_out(expired)
            self.expired(expired)
        return len(volatile)

    def sweep_live_buffer(self, now_ms: int, idle: bool) -> None:
        """The queue live buffer's cleanup: drop expired persistent messages, and give back
        every one if the queue is ``idle`` (it has not delivered anything for a while)."""
        stored = [m for m in self.in_memory() if m.store_seq]
        if not stored:
            return
        expired = [m for m in stored if m.expired(now_ms)]
        if expired:
            self.take_out(expired)
            self.expired(expired)
        if idle and not self.backlog.read_under_way:
            kept = [m for m in stored if not m.expired(now_ms)]
            if kept:
                self.take_out(kept)
                self.reads.give_back(kept, self.selective)
