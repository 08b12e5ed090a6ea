"""A queue's reads of its stored backlog: what stays in memory, and what is read back.

``backlog.py`` keeps the account of what a queue left in the store and says
which read to run next; this runs them for one queue. As a persistent message
arrives it stays in memory if the queue live buffer has room and nothing is
left in the store before it, or (within the global bound) if a selective
consumer that has seen all the store holds selects it; else it is left in the
store (``keep_in_memory``). When consumers need more, the read
``StoreBacklog.next_read`` asks for runs on the store's reader (one at a time)
and what it brings is handed to the queue as messages in memory, each with the
delivery count it had if it was given back redelivered (the store keeps no
delivery state). A live buffer given back to the store (``give_back``) is read
again the same way. The queue's selective way, which most queues never make,
is handed to each call that needs it (``None``: not made).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from wiremq.modules.destinations.backlog import Read, StoreBacklog
from wiremq.modules.destinations.filters import Filter
from wiremq.modules.destinations.queue_counts import QueueCounts
from wiremq.modules.destinations.queue_selective import SelectiveDispatch
from wiremq.modules.message import Message
from wiremq.stores.api import Batch, Match
from wiremq.stores.records import StoredMessage

if TYPE_CHECKING:
    from wiremq.modules.destinations.expiry import Expiry
    from wiremq.modules.persistence.store import Persistence


class BacklogReads:
    """One queue's store backlog and its reads (see the module docstring)."""

    __slots__ = ("name", "backlog", "persistence", "counts", "expiry", "messages_read")

    def __init__(
        self,
        name: str,
        backlog: StoreBacklog,
        persistence: Persistence | None,
        counts: QueueCounts,
        expiry: Expiry,
    ) -> None:
        self.name = name
        self.backlog = backlog
        self.persistence = persistence
        self.counts = counts
        self.expiry = expiry
        self.messages_read = 0  # messages read back (not new arrivals)

    def keep_in_memory(self, message: Message, selective: SelectiveDispatch | None) -> bool:
        """Whether a new persistent message stays in memory (counted in the live buffer),
        else it is left in the store (see the module docstring)."""
        persistence = self.persistence
        assert persistence is not None
        size = message.size
        backlog = self.backlog
        if persistence.live_buffer_bytes + size <= persistence.live_buffer_limit and (
            (
                backlog.after is None
                and self.counts.live_buffer_bytes + size <= persistence.queue_live_buffer_limit
            )
            or (
                backlog.after is not None
                and selective is not None
                and selective.filters
                and self._awaited(message, selective)
            )
        ):
            self.counts.live_buffer_add(size)
            return True
        backlog.leave(message.store_seq, message.priority)
        return False

    def _awaited(self, message: Message, selective: SelectiveDispatch) -> bool:
        """Whether a selective consumer that has seen everything its queue left in the store
        selects ``message``: kept in memory (and remembered as read out of order)."""
        leaves = self.backlog.leaves
        if any(f.store_seen == leaves for f in selective.matcher.matching(message)):
            self.backlog.pulled[message.store_seq] = message.message_id
            return True
        return False

    def higher_in_store(self, best_waiting: int) -> bool:
        """Whether the store holds messages of a higher priority than any waiting in
        memory (the highest there is ``best_waiting``, -1: none): they are read first, and
        nothing is delivered until they are in."""
        memory_empty = self.counts.live_buffer_bytes == 0
        return self.backlog.higher_priority(memory_empty, best_waiting) is not None

    def read_more(
        self,
        best_waiting: int,
        hungry: list[Filter],
        arrived: Callable[[list[Message]], None],
    ) -> None:
        """Read from the store what consumers need next, if they need any: ``best_waiting``
        is the highest priority waiting in memory, ``hungry`` the selective filters with a
        ready consumer and nothing waiting for them; what the read brings goes to
        ``arrived`` (for the queue to place and dispatch)."""
        persistence = self.persistence
        assert persistence is not None
        backlog = self.backlog
        in_memory = self.counts.live_buffer_bytes
        read = backlog.next_read(in_memory == 0, best_waiting, hungry, _selects)
        if read is None:
            return
        backlog.read_under_way = True
        limit = persistence.queue_live_buffer_limit
        room = max(1, limit - in_memory if read.match is None else limit)
        persistence.read_for_consumers(
            self.name,
            read.after,
            backlog.settings.readmsgamount,
            room,
            lambda batch: self._read_done(read, batch, arrived),
            read.match,
            read.examine,
        )

    def _read_done(
        self, read: Read, batch: Batch, arrived: Callable[[list[Message]], None]
    ) -> None:
        found, expired = self.backlog.read_done(read, batch)
        if expired and self.backlog.settings.expiryonread:
            self.expiry.expired_stored([((self.name, seq), m) for seq, m in expired])
        self.messages_read += len(found)
        given_back_redeliveries = self.backlog.given_back_redeliveries
        assert self.persistence is not None
        restored = self.persistence.restored_upto.get(self.name, 0)
        messages = []
        for seq, stored in found:
            message = Message.from_stored(stored, seq)
            redeliveries = given_back_redeliveries.pop(seq, 0)
            if redeliveries:
                message.redelivered_before(redeliveries)
            elif seq <= restored:  # stored before a restart or takeover: maybe delivered
                message.redelivered_before(1)
            self.counts.live_buffer_add(message.size)
            messages.append(message)
        arrived(messages)

    def give_back(self, messages: list[Message], selective: SelectiveDispatch | None) -> None:
        """The live buffer's ``messages`` (out of memory now) are read again from the
        store when a consumer comes; the selective consumers look at them again."""
        self.backlog.give_back(
            [m.store_seq for m in messages],
            {m.store_seq: m.redeliveries for m in messages if m.redelivered},
        )
        after = self.backlog.after or 0
        for filter_ in () if selective is None else selective.filters.values():
            filter_.store_after = min(filter_.store_after, after)


class StoredView:
    """What a selector reads of a stored message, while the store is searched."""

    __slots__ = ("headers", "priority", "timestamp", "message_id", "expires")
    persistent = True
    redelivered = False
    redeliveries = 0

    def __init__(self, stored: StoredMessage) -> None:
        self.headers = dict(stored.headers)
        self.priority = stored.priority
        self.timestamp = stored.timestamp
        self.message_id = stored.message_id
        self.expires = stored.expires


def _selects(filter_: Filter) -> Match:
    """A store read's test for what ``filter_``'s selector selects."""
    assert filter_.match is not None
    match = filter_.match
    return lambda stored: match(StoredView(stored))
