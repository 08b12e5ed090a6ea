"""The persistent objects of a store: message blocks, per-destination logs, the root.

The messages a commit appends to one log are kept together as one record (a
``MessageBlock``), not one record per message: ZODB's cost is per record
(pickling, and a persistent reference in an index bucket rewritten on every
append), so a group commit of eight messages costs about what one costs.
The index of blocks is a B-tree with small buckets, so that the bucket an
append rewrites stays small. Counts live beside the data they count, so that
watermarks and a reopen never need a scan.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import TypeVar

from BTrees.LOBTree import LOBTree
from BTrees.OOBTree import OOBTree, OOTreeSet
from persistent import Persistent

from .errors import StoreError
from .records import StoredMessage

# A block holds at most this many messages, or this many bytes past its first
# message, so that removing part of one (which rewrites it) stays cheap.
BLOCK_MESSAGES = 64
BLOCK_BYTES = 32_768


K = TypeVar("K")
V = TypeVar("V")


def grouped(pairs: Iterable[tuple[K, V]]) -> dict[K, list[V]]:
    """The values of ``pairs`` by key, each list in the order met."""
    groups: dict[K, list[V]] = {}
    for key, value in pairs:
        groups.setdefault(key, []).append(value)
    return groups


def blocks_of(messages: Sequence[StoredMessage]) -> Iterator[Sequence[StoredMessage]]:
    """Consecutive runs of ``messages`` within the block limits."""
    start, size = 0, 0
    for i, message in enumerate(messages):
        if i > start and (i - start >= BLOCK_MESSAGES or size + message.size > BLOCK_BYTES):
            yield messages[start:i]
            start, size = i, 0
        size += message.size
    if start < len(messages):
        yield messages[start:]


class MessageBlock(Persistent):
    """Messages appended to one log in one commit, at consecutive sequence numbers.

    ``data`` is the messages' ``StoredMessage.fields()`` (fields added later
    must come last, with defaults) as one pickle; ``gone`` holds the
    offsets of the ones removed since. A read decodes the block and keeps
    nothing; removals keep the decoded messages in a volatile attribute
    (ZODB drops it with the object's state) until the block is empty, so
    memory holds a second copy only of blocks being consumed.
    """

    def __init__(self, messages: Sequence[StoredMessage]) -> None:
        try:
            self.data = pickle.dumps(tuple(m.fields() for m in messages), protocol=5)
        except Exception as exc:
            raise StoreError(f"messages cannot be stored: {exc}") from exc
        self.count = len(messages)
        self.gone: frozenset[int] = frozenset()

    def messages(self) -> tuple[StoredMessage, ...]:
        """Every message of the block, removed ones included (see ``gone``)."""
        cached: tuple[StoredMessage, ...] | None = getattr(self, "_v_messages", None)
        if cached is None:
            return tuple(StoredMessage(*fields) for fields in pickle.loads(self.data))
        return cached

    def live_offsets(self) -> Iterator[int]:
        """Offsets of the messages not removed, in order, without decoding the block."""
        gone = self.gone
        return (i for i in range(self.count) if i not in gone)

    def live(self) -> Iterator[tuple[int, StoredMessage]]:
        """(offset, message) of the messages not removed, in order."""
        messages = self.messages()
        return ((i, messages[i]) for i in self.live_offsets())

    def remove(self, offsets: Iterable[int]) -> tuple[dict[int, StoredMessage], bool]:
        """Take messages out; returns those that were there, by offset, and whether
        none is left.

        A block left empty is not changed: the caller drops it, and rewriting
        it would only write garbage. Offsets not (or no longer) there are skipped.
        """
        taken = {i for i in offsets if 0 <= i < self.count and i not in self.gone}
        if not taken:
            return {}, False
        messages = self.messages()
        emptied = len(self.gone) + len(taken) == self.count
        if emptied:
            self._v_messages = None
        else:
            self._v_messages = messages
            self.gone = self.gone | taken
        return {i: messages[i] for i in taken}, emptied


class BlockIndex(LOBTree):
    """First sequence number -> ``MessageBlock``, with small buckets (see the module doc)."""

    max_leaf_size = 16
    max_internal_size = 64


class MessageLog(Persistent):
    """The messages of one destination in arrival order, keyed by a sequence number.

    Sequence numbers only grow, even across removals and clears, so that a
    position (a read cursor, a subscriber's acknowledged position, an expiry
    index entry) never comes to name a different message.
    """

    def __init__(self) -> None:
        self.blocks: BlockIndex = BlockIndex()
        self.last_seq = 0
        self.count = 0
        self.bytes = 0

    def append(self, messages: Sequence[StoredMessage]) -> int:
        """Add messages at the end, in as few blocks as the block limits allow;
        returns the first one's sequence number."""
        first = self.last_seq + 1
        for run in blocks_of(messages):
            self.blocks[self.last_seq + 1] = MessageBlock(run)
            self.last_seq += len(run)
        self.count += len(messages)
        self.bytes += sum(m.size for m in messages)
        return first

    def pop(self, seqs: Iterable[int]) -> list[tuple[int, StoredMessage]]:
        """Remove messages by position, block by block; returns (seq, message) of those
        that were there, in the order asked. Positions not (or no longer) there are
        skipped."""
        wanted = list(dict.fromkeys(seqs))
        starts = ((self._block_start(seq), seq) for seq in wanted)
        by_block = grouped((first, seq - first) for first, seq in starts if first is not None)
        found: dict[int, StoredMessage] = {}
        for first, offsets in by_block.items():
            taken, emptied = self.blocks[first].remove(offsets)
            if emptied:
                del self.blocks[first]
            found.update((first + i, message) for i, message in taken.items())
        self.count -= len(found)
        self.bytes -= sum(m.size for m in found.values())
        return [(seq, found[seq]) for seq in wanted if seq in found]

    def after(self, seq: int) -> Iterator[tuple[int, StoredMessage]]:
        """Messages with a sequence number above ``seq``, in order."""
        start = self._block_start(seq + 1) or 0
        for first, block in self.blocks.items(min=start):
            for offset, message in block.live():
                if first + offset > seq:
                    yield first + offset, message

    def upto(self, seq: int) -> Iterator[int]:
        """Sequence numbers of the messages at or below ``seq``, in order."""
        for first, block in self.blocks.items(max=seq):
            for offset in block.live_offsets():
                if first + offset > seq:
                    return
                yield first + offset

    def clear(self) -> None:
        """Drop every message in one small write (a fresh index; the old one is garbage).

        Their expiry index entries go stale; the sweep drops them.
        """
        self.blocks = BlockIndex()
        self.count = 0
        self.bytes = 0

    def _block_start(self, seq: int) -> int | None:
        """The first sequence number of the block that holds (or held) ``seq``."""
        try:
            first: int = self.blocks.maxKey(seq)
        except ValueError:
            return None
        return first


class LogSet(Persistent):
    """The root object of one store: its logs and the expiry index.

    It keeps no totals: a total here would rewrite the root on every commit;
    the store adds up the logs' counts instead (see ``counts``).
    """

    LAYOUT = 2  # the layout this module reads and writes (2: message blocks)
    layout = 1  # what a root written before layouts were recorded reads as

    def __init__(self) -> None:
        self.logs: OOBTree = OOBTree()
        self.expiry: OOTreeSet = OOTreeSet()  # (expires ms, destination, seq)
        self.layout = self.LAYOUT

    def log(self, destination: str) -> MessageLog:
        """The destination's log, created on first use."""
        log: MessageLog | None = self.logs.get(destination)
        if log is None:
            log = self.logs[destination] = MessageLog()
        return log

    def append(self, messages: Sequence[StoredMessage]) -> list[int]:
        """Add messages to their destinations' logs; returns each one's position there.

        Each destination's messages keep their order and go into as few
        blocks as the block limits allow.
        """
        positions = [0] * len(messages)
        by_destination = grouped((m.destination, (i, m)) for i, m in enumerate(messages))
        for destination, indexed in by_destination.items():
            start = self.log(destination).append([m for _, m in indexed])
            for n, (i, message) in enumerate(indexed):
                positions[i] = start + n
                if message.expires:
                    self.expiry.add((message.expires, destination, start + n))
        return positions

    def pop(self, destination: str, seqs: Iterable[int]) -> list[StoredMessage]:
        """Remove messages of one destination by position (see ``MessageLog.pop``)."""
        log = self.logs.get(destination)
        removed = [] if log is None else log.pop(seqs)
        for seq, message in removed:
            if message.expires:
                self.expiry.remove((message.expires, destination, seq))
        return [message for _, message in removed]

    def expire_due(self, now_ms: int, limit: int) -> tuple[list[StoredMessage], bool]:
        """Remove up to ``limit`` messages due at ``now_ms``, soonest first.

        Returns them and whether no more are due. Stale index entries (left by
        ``clear``) are dropped and count towards the limit, so that one call's
        transaction stays small either way.
        """
        due = list(islice(self.expiry.keys(max=(now_ms + 1,), excludemax=True), limit))
        by_destination = grouped((destination, seq) for _, destination, seq in due)
        removed = [m for name, seqs in by_destination.items() for m in self.pop(name, seqs)]
        for key in due:
            if key in self.expiry:  # stale: its message had already gone
                self.expiry.remove(key)
        return removed, len(due) < limit
