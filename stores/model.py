"""The persistent objects of a store: message records and per-destination logs.

Each message is its own ZODB record so that a BTree bucket holds only small
references and an append or removal rewrites little more than the message.
Counts live beside the data they count, so that watermarks and a reopen never
need a scan.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import fields
from itertools import islice
from typing import Any

from BTrees.LOBTree import LOBTree
from BTrees.OOBTree import OOBTree, OOTreeSet
from persistent import Persistent

from .records import StoredMessage

_FIELDS = tuple(f.name for f in fields(StoredMessage))


class MessageRecord(Persistent):
    """One stored message, kept as named attributes so old records survive new fields."""

    def __init__(self, message: StoredMessage) -> None:
        for name in _FIELDS:
            setattr(self, name, getattr(message, name))

    def message(self) -> StoredMessage:
        self._p_activate()
        state: Mapping[str, Any] = vars(self)
        return StoredMessage(**{k: v for k, v in state.items() if k in _FIELDS})


class MessageLog(Persistent):
    """The messages of one destination in arrival order, keyed by a sequence number.

    Sequence numbers only grow, even across removals and clears, so that a
    position (a read cursor, a subscriber's acknowledged position, an expiry
    index entry) never comes to name a different message.
    """

    def __init__(self) -> None:
        self.messages: LOBTree = LOBTree()
        self.last_seq = 0
        self.count = 0
        self.bytes = 0

    def append(self, message: StoredMessage) -> int:
        self.last_seq += 1
        self.messages[self.last_seq] = MessageRecord(message)
        self.count += 1
        self.bytes += message.size
        return self.last_seq

    def pop(self, seq: int) -> StoredMessage | None:
        """Remove one message; None if it is not (or no longer) there."""
        record = self.messages.pop(seq, None)
        if record is None:
            return None
        message: StoredMessage = record.message()
        self.count -= 1
        self.bytes -= message.size
        return message

    def after(self, seq: int) -> Iterator[tuple[int, StoredMessage]]:
        """Messages with a sequence number above ``seq``, in order."""
        for key, record in self.messages.items(min=seq, excludemin=True):
            yield key, record.message()

    def clear(self) -> None:
        """Drop every message in one small write (a fresh tree; the old one is garbage)."""
        self.messages = LOBTree()
        self.count = 0
        self.bytes = 0


class LogSet(Persistent):
    """The root object of one store: its logs, the expiry index and the totals."""

    def __init__(self) -> None:
        self.logs: OOBTree = OOBTree()
        self.expiry: OOTreeSet = OOTreeSet()  # (expires ms, destination, seq)
        self.count = 0
        self.bytes = 0

    def log(self, destination: str) -> MessageLog:
        """The destination's log, created on first use."""
        log: MessageLog | None = self.logs.get(destination)
        if log is None:
            log = self.logs[destination] = MessageLog()
        return log

    def append(self, message: StoredMessage) -> int:
        """Add a message to its destination's log; returns its position there."""
        seq = self.log(message.destination).append(message)
        if message.expires:
            self.expiry.add((message.expires, message.destination, seq))
        self.count += 1
        self.bytes += message.size
        return seq

    def pop(self, destination: str, seq: int) -> StoredMessage | None:
        log = self.logs.get(destination)
        message = None if log is None else log.pop(seq)
        if message is not None:
            if message.expires:
                self.expiry.remove((message.expires, destination, seq))
            self.count -= 1
            self.bytes -= message.size
        return message

    def clear(self, log: MessageLog) -> None:
        """Empty a log; its expiry entries go stale and the sweep drops them."""
        self.count -= log.count
        self.bytes -= log.bytes
        log.clear()

    def expire_due(self, now_ms: int, limit: int) -> tuple[list[StoredMessage], bool]:
        """Remove up to ``limit`` messages due at ``now_ms``, soonest first.

        Returns them and whether no more are due. Stale index entries (left by
        ``clear``) are dropped and count towards the limit, so that one call's
        transaction stays small either way.
        """
        due = list(islice(self.expiry.keys(max=(now_ms + 1,), excludemax=True), limit))
        removed = []
        for key in due:
            _, destination, seq = key
            message = self.pop(destination, seq)
            if message is None:
                self.expiry.remove(key)
            else:
                removed.append(message)
        return removed, len(due) < limit
