"""What a queue holds in memory, counted where the server's bounds look.

A queue's non-persistent messages are counted in the VolQueueStore and its
watermarks (the global one and the queue's own); its persistent ones in the
queue live buffer (``live_buffer_bytes``, bounded by persqueuebytehighwatermark)
and the global one (``Persistence.live_buffer_bytes``). The live buffer is counted
at once, since whether the next persistent message stays in memory depends on
it; the VolQueueStore and its watermarks are told once per dispatch, not per
message, so that a message passing straight through moves nothing
(``unreported_messages`` and ``unreported_bytes`` hold what came in and went
out meanwhile).
"""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING

from wiremq.modules.destinations.destination import count_into
from wiremq.modules.flow.watermarks import Watermark
from wiremq.modules.message import Message

if TYPE_CHECKING:
    from wiremq.modules.persistence.store import Persistence
    from wiremq.stores.volqueue import VolatileCount

SIZE = attrgetter("size")
STORE_SEQ = attrgetter("store_seq")


class QueueCounts:
    """One queue's counts (see the module docstring)."""

    __slots__ = (
        "volatile_store",
        "volatile",
        "own_volatile",
        "unreported_messages",
        "unreported_bytes",
        "persistence",
        "live_buffer_bytes",
    )

    def __init__(
        self, volatile_store: VolatileCount, volatile: Watermark, persistence: Persistence | None
    ) -> None:
        self.volatile_store = volatile_store  # its count in the VolQueueStore
        self.volatile = volatile  # the VolQueueStore's global watermark
        self.own_volatile: Watermark | None = None  # the queue's own, if switched on
        # Non-persistent messages and bytes in (positive) or out (negative) of memory that
        # the VolQueueStore and its watermarks have not been told of yet.
        self.unreported_messages = 0
        self.unreported_bytes = 0
        self.persistence = persistence
        self.live_buffer_bytes = 0  # its persistent messages in memory

    def report_volatile(self) -> None:
        """Tell the VolQueueStore and its watermarks what came in and went out since they
        last knew (once per dispatch)."""
        messages, nbytes = self.unreported_messages, self.unreported_bytes
        if messages or nbytes:
            count_into((self.volatile, self.own_volatile), messages, nbytes)
            store = self.volatile_store
            store.messages += messages
            store.bytes += nbytes
            self.unreported_messages = self.unreported_bytes = 0

    def live_buffer_add(self, nbytes: int) -> None:
        """Bytes of persistent messages entering (positive) or leaving (negative) the live
        buffer."""
        self.live_buffer_bytes += nbytes
        assert self.persistence is not None
        self.persistence.live_buffer_bytes += nbytes

    def left_memory(self, message: Message) -> None:
        """A message leaves memory (delivered, expired, given back, taken by an operator)."""
        if message.store_seq:
            self.live_buffer_add(-message.size)
        else:
            self.unreported_messages -= 1
            self.unreported_bytes -= message.size

    def run_left_memory(self, messages: list[Message]) -> None:
        """``left_memory`` for a run of messages (delivered together), counted at once."""
        nbytes = sum(map(SIZE, messages))
        count = len(messages)
        if any(map(STORE_SEQ, messages)):
            stored = [m for m in messages if m.store_seq]
            stored_bytes = sum(map(SIZE, stored))
            self.live_buffer_add(-stored_bytes)
            nbytes -= stored_bytes
            count -= len(stored)
        self.unreported_messages -= count
        self.unreported_bytes -= nbytes

    def came_back(self, message: Message) -> None:
        """A message comes back into memory (redelivered)."""
        if message.store_seq:
            self.live_buffer_add(message.size)
        else:
            self.unreported_messages += 1
            self.unreported_bytes += message.size

    def volatile_held(self) -> tuple[int, int]:
        """Non-persistent messages and bytes as the VolQueueStore counted them (what came
        since is in the next report)."""
        return self.volatile_store.messages, self.volatile_store.bytes
