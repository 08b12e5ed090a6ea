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
from collections.abc import Iterator, Sequence
from itertools import islice

from BTrees.LOBTree import LOBTree
from BTrees.OOBTree import OOBTree, OOTreeSet
from persistent import Persistent

from .errors import StoreError
from .records import StoredMessage

# A block holds at most this many messages, or this many bytes past its first
# message, so that removing part of one (which rewrites it) stays cheap.
BLOCK_MESSAGES = 64
BLOCK_BYTES = 32_768


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

    def live(self) -> Iterator[tuple[int, StoredMessage]]:
        """(offset, message) of the messages not removed, in order."""
        gone = self.gone
        return ((i, m) for i, m in enumerate(self.messages()) if i not in gone)

    def remove(self, offset: int) -> StoredMessage | None:
        """Mark one message removed; None if it is not (or no longer) there."""
        if not 0 <= offset < self.count or offset in self.gone:
            return None
        messages = self._v_messages = self.messages()
        self.gone = self.gone | {offset}
        if self.empty:
            del self._v_messages
        return messages[offset]

    @property
    def empty(self) -> bool:
        return len(self.gone) == self.count


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
        """Add messages at the end, in one block; returns the first one's sequence number."""
        first = self.last_seq + 1
        self.blocks[first] = MessageBlock(messages)
        self.last_seq += len(messages)
        self.count += len(messages)
        self.bytes += sum(m.size for m in messages)
        return first

    def pop(self, seq: int) -> StoredMessage | None:
        """Remove one message; None if it is not (or no longer) there."""
        first = self._block_start(seq)
        if first is None:
            return None
        block: MessageBlock = self.blocks[first]
        message = block.remove(seq - first)
        if message is None:
            return None
        if block.empty:
            del self.blocks[first]
        self.count -= 1
        self.bytes -= message.size
        return message

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
            for offset, _ in block.live():
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
        for destination, indexed in _by_destination(messages).items():
            log = self.log(destination)
            start = log.last_seq + 1
            for block in blocks_of([m for _, m in indexed]):
                log.append(block)
            for n, (i, message) in enumerate(indexed):
                positions[i] = start + n
                if message.expires:
                    self.expiry.add((message.expires, destination, start + n))
        return positions

    def pop(self, destination: str, seq: int) -> StoredMessage | None:
        log = self.logs.get(destination)
        message = None if log is None else log.pop(seq)
        if message is not None and message.expires:
            self.expiry.remove((message.expires, destination, seq))
        return message

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


def _by_destination(
    messages: Sequence[StoredMessage],
) -> dict[str, list[tuple[int, StoredMessage]]]:
    """(index in ``messages``, message) per destination, in order."""
    groups: dict[str, list[tuple[int, StoredMessage]]] = {}
    for i, message in enumerate(messages):
        groups.setdefault(message.destination, []).append((i, message))
    return groups
