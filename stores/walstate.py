"""What ``WalStore.commit`` decides with, in memory: positions, live messages, subscriptions.

A commit must not touch ZODB (that is what the write-ahead log saves), yet it
must hand out positions, know which removals find a message, start new
subscriptions at their topic's end and keep counts true. So the store keeps,
per destination, its last position and the positions of its live messages
with their sizes (``LiveIndex``: about 4 bytes a message, never the messages
themselves), and the durable subscriptions. ``StoreState.resolve`` turns a
``StoreTransaction`` into the operations of ``walops`` and changes the state as
it goes, recording how to undo each change, so that a commit whose record
cannot be written leaves the state as it found it.

Only the committing thread changes this state. Counts and subscriptions are
published to the readers (any thread, no lock) only once a commit's record is
durable, the way ``counts.CountMirror`` is.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from .api import QUEUE_PREFIX, TOPIC_PREFIX, Committed, Position, StoreTransaction
from .counts import CountMirror, Counts
from .durable import SubscriptionInfo, SubscriptionKey
from .errors import StoreError
from .model import MessageBlock
from .records import StoredMessage
from .walops import (
    ACKNOWLEDGE,
    ACKNOWLEDGE_SINGLE,
    APPEND,
    CLEAR,
    COLLECT,
    REMOVE,
    SUBSCRIBE,
    UNSUBSCRIBE,
    Op,
)

CHUNK_BITS = 8  # positions per chunk: 256
CHUNK_MASK = (1 << CHUNK_BITS) - 1
GONE = 0xFFFFFFFF  # a chunk slot with no live message (so a message's size must be below it)

Undo = list[Callable[[], None]]


@dataclass(slots=True)
class Touched:
    """What a commit changed, to publish once it is durable."""

    destinations: set[str] = field(default_factory=set)
    keys: set[SubscriptionKey] = field(default_factory=set)


class LiveIndex:
    """The live positions of one destination with each message's size.

    Positions are dense (each append takes the next one), so they live in
    chunks of 256 slots (an ``array`` of 32-bit sizes, ``GONE`` for none): an
    emptied chunk is dropped, so memory follows the live messages, not the
    positions ever used.
    """

    __slots__ = ("_chunks", "_live", "_low", "count", "bytes")

    def __init__(self) -> None:
        self._chunks: dict[int, array[int]] = {}
        self._live: dict[int, int] = {}  # chunk -> live slots in it
        self._low = 0  # no chunk below this one has a live slot
        self.count = 0
        self.bytes = 0

    def add(self, seq: int, size: int) -> None:
        chunk = seq >> CHUNK_BITS
        slots = self._chunks.get(chunk)
        if slots is None:
            slots = self._chunks[chunk] = array("I", [GONE]) * (CHUNK_MASK + 1)
            self._live[chunk] = 0
            self._low = min(self._low, chunk) if self.count else chunk
        slots[seq & CHUNK_MASK] = size
        self._live[chunk] += 1
        self.count += 1
        self.bytes += size

    def add_block(self, first: int, sizes: Sequence[int], gone: Collection[int]) -> None:
        """Add a run of messages at once: ``sizes[i]`` at ``first + i``, except the
        offsets in ``gone`` (a stored block's bookkeeping, at open)."""
        offset = 0
        while offset < len(sizes):
            seq = first + offset
            chunk, slot = seq >> CHUNK_BITS, seq & CHUNK_MASK
            take = min(len(sizes) - offset, CHUNK_MASK + 1 - slot)
            part = array("I", sizes[offset : offset + take])
            for i in gone:
                if offset <= i < offset + take:
                    part[i - offset] = GONE
            live = take - sum(1 for i in gone if offset <= i < offset + take)
            if live:
                slots = self._chunks.get(chunk)
                if slots is None:
                    slots = self._chunks[chunk] = array("I", [GONE]) * (CHUNK_MASK + 1)
                    self._live[chunk] = 0
                    self._low = min(self._low, chunk) if self.count else chunk
                slots[slot : slot + take] = part
                self._live[chunk] += live
                self.count += live
                self.bytes += sum(size for size in part if size != GONE)
            offset += take

    def size(self, seq: int) -> int | None:
        """The size of the message at ``seq``, or None if there is none."""
        slots = self._chunks.get(seq >> CHUNK_BITS)
        if slots is None:
            return None
        size = slots[seq & CHUNK_MASK]
        return None if size == GONE else size

    def remove(self, seq: int) -> int | None:
        """Take the message at ``seq`` out; its size, or None if there was none."""
        chunk = seq >> CHUNK_BITS
        slots = self._chunks.get(chunk)
        if slots is None:
            return None
        size = slots[seq & CHUNK_MASK]
        if size == GONE:
            return None
        slots[seq & CHUNK_MASK] = GONE
        self._live[chunk] -= 1
        if not self._live[chunk]:
            del self._chunks[chunk], self._live[chunk]
        self.count -= 1
        self.bytes -= size
        return size

    def cut(self, upto: int) -> list[tuple[int, int]]:
        """Take out every message at or below ``upto``; returns their (seq, size)."""
        taken: list[tuple[int, int]] = []
        last_chunk = upto >> CHUNK_BITS
        for chunk in range(self._low, last_chunk + 1):
            slots = self._chunks.get(chunk)
            if slots is None:
                continue
            base = chunk << CHUNK_BITS
            end = min(CHUNK_MASK, upto - base)
            taken += [(base + i, slots[i]) for i in range(end + 1) if slots[i] != GONE]
        for seq, _ in taken:
            self.remove(seq)
        self._low = max(self._low, last_chunk)
        return taken

    def __iter__(self) -> Iterator[tuple[int, int]]:
        """(seq, size) of every live message, in order."""
        for chunk in sorted(self._chunks):
            slots = self._chunks[chunk]
            base = chunk << CHUNK_BITS
            yield from ((base + i, size) for i, size in enumerate(slots) if size != GONE)


@dataclass(slots=True)
class _Subscription:
    topic: str
    selector: str
    acked: int
    singles: frozenset[int] = frozenset()  # positions past ``acked`` acknowledged singly


class StoreState:
    """Positions, live messages and durable subscriptions of both stores, in memory."""

    def __init__(self) -> None:
        self._indexes: dict[str, LiveIndex] = {}
        self._last_seq: dict[str, int] = {}
        self._subs: dict[SubscriptionKey, _Subscription] = {}
        self._members: dict[str, set[SubscriptionKey]] = {}  # topic -> its subscriptions
        self._queue_counts = CountMirror()
        self._topic_counts = CountMirror()
        self._published: dict[SubscriptionKey, SubscriptionInfo] = {}

    # -- loading (at open, before any commit) --------------------------------

    def load_log(
        self, destination: str, last_seq: int, blocks: Iterable[tuple[int, MessageBlock]]
    ) -> None:
        """Take one log as ZODB has it: its last position and its blocks (first position,
        block), whose bookkeeping alone is read."""
        index = self._index(destination)
        for first, block in blocks:
            index.add_block(first, block.sizes, block.gone)
        self._last_seq[destination] = last_seq

    def load_subscription(
        self,
        key: SubscriptionKey,
        topic: str,
        selector: str,
        acked: int,
        singles: frozenset[int] = frozenset(),
    ) -> None:
        self._subs[key] = _Subscription(topic, selector, acked, singles)
        self._members.setdefault(topic, set()).add(key)

    def loaded(self) -> None:
        """Publish what was loaded."""
        self.publish(Touched(set(self._indexes), set(self._subs)))

    # -- readers (any thread) --------------------------------------------------

    def last_positions(self) -> dict[str, int]:
        """The last position handed out in each destination's log (event loop only)."""
        return dict(self._last_seq)

    def count(self, destination: str) -> Counts:
        if destination.startswith(QUEUE_PREFIX):
            return self._queue_counts.get(destination)
        return self._topic_counts.get(destination)

    def totals(self, prefix: str) -> Counts:
        if prefix == QUEUE_PREFIX:  # read on every persistent SEND and commit
            return self._queue_counts.total
        if prefix == TOPIC_PREFIX:
            return self._topic_counts.total
        found = [self.count(name) for name in self.destinations(prefix)]
        return Counts(sum(c.messages for c in found), sum(c.bytes for c in found))

    def destinations(self, prefix: str) -> list[str]:
        mirrors = [self._queue_counts, self._topic_counts]
        names = (name for mirror in mirrors for name in mirror.destinations())
        return sorted(n for n in names if n.startswith(prefix) and self.count(n).messages)

    def subscriptions(self) -> list[SubscriptionInfo]:
        return list(self._published.values())

    def is_live(self, destination: str, seq: int) -> bool:
        """Whether a committed (or committing) transaction left a message at that position."""
        index = self._indexes.get(destination)
        return index is not None and index.size(seq) is not None

    # -- commit (one thread) -------------------------------------------------------

    def resolve(
        self, txn: StoreTransaction, ops: list[Op], undo: Undo, touched: Touched
    ) -> Committed:
        """Apply one transaction to the state; appends its operations to ``ops``, the way
        back to ``undo`` (run it backwards) and what it changed to ``touched``."""
        # Each kind is looked at only if the transaction has some (most have one kind):
        # a comprehension costs a call even over nothing.
        subscriptions: tuple[tuple[SubscriptionInfo, bool], ...] = ()
        if txn.subscribes:
            subscriptions = tuple(
                [
                    self._subscribe(key, topic, selector, ops, undo, touched)
                    for key, topic, selector in txn.subscribes
                ]
            )
        for key in txn.unsubscribes:
            if key in self._subs:
                self._unsubscribe(key, ops, undo, touched)
        positions: tuple[int | None, ...] = ()
        if txn.appends:
            positions = tuple([self._append(m, ops, undo, touched) for m in txn.appends])
        removed: tuple[Position, ...] = ()
        if txn.removals:
            removed = tuple([p for p in txn.removals if self._remove(p, ops, undo, touched)])
        moved: tuple[int | None, ...] = ()
        if txn.moves:
            moved = tuple(
                [
                    self._append(m, ops, undo, touched)
                    if self._remove(p, ops, undo, touched)
                    else None
                    for p, m in txn.moves
                ]
            )
        if txn.acknowledgements:
            acknowledged = {
                topic
                for key, seq in txn.acknowledgements
                if (topic := self._acknowledge(key, seq, ops, undo, touched))
            }
            for topic in sorted(acknowledged):
                self._collect(topic, ops, undo, touched)
        for key, seq in txn.single_acknowledgements:
            self._acknowledge_single(key, seq, ops, undo, touched)
        return Committed(positions, removed, subscriptions, moved)

    def publish(self, touched: Touched) -> None:
        """Show the readers what a commit changed (once it is durable)."""
        queues: dict[str, Counts] = {}
        topics: dict[str, Counts] = {}
        for name in touched.destinations:
            index = self._indexes.get(name)
            if index is not None:
                counts = Counts(index.count, index.bytes)
                (queues if name.startswith(QUEUE_PREFIX) else topics)[name] = counts
        if queues:
            self._queue_counts.publish(queues)
        if topics:
            self._topic_counts.publish(topics)
        if touched.keys:
            self._publish_subscriptions(touched.keys)

    def _publish_subscriptions(self, keys: set[SubscriptionKey]) -> None:
        changed = {key: self._info(key) for key in keys}
        if all(changed.values()) and changed.keys() <= self._published.keys():
            for key, info in changed.items():  # in place: readers iterating see no new key
                self._published[key] = info  # type: ignore[assignment]
        else:
            merged = {**self._published, **changed}
            self._published = {key: info for key, info in merged.items() if info is not None}

    # -- the steps of a transaction ------------------------------------------------

    def _subscribe(
        self,
        key: SubscriptionKey,
        topic: str,
        selector: str,
        ops: list[Op],
        undo: Undo,
        touched: Touched,
    ) -> tuple[SubscriptionInfo, bool]:
        if not topic.startswith(TOPIC_PREFIX):
            raise StoreError(
                f"a durable subscription needs a {TOPIC_PREFIX} destination: {topic!r}"
            )
        old = self._subs.get(key)
        if old is not None and (old.topic, old.selector) == (topic, selector):
            return self._info(key), False  # type: ignore[return-value]
        if old is not None:
            self._unsubscribe(key, ops, undo, touched)
        start = self._last_seq.get(topic, 0)
        self._subs[key] = _Subscription(topic, selector, start)
        members = self._members.setdefault(topic, set())
        members.add(key)

        def back() -> None:
            del self._subs[key]
            self._members_discard(topic, key)

        undo.append(back)
        ops.append((SUBSCRIBE, key[0], key[1], topic, selector, start))
        touched.destinations.add(topic)
        touched.keys.add(key)
        return SubscriptionInfo(key[0], key[1], topic, selector, start), True

    def _unsubscribe(
        self, key: SubscriptionKey, ops: list[Op], undo: Undo, touched: Touched
    ) -> None:
        sub = self._subs.pop(key)
        topic = sub.topic
        self._members_discard(topic, key)
        undo.append(
            lambda: self.load_subscription(key, topic, sub.selector, sub.acked, sub.singles)
        )
        ops.append((UNSUBSCRIBE, key[0], key[1]))
        touched.keys.add(key)
        touched.destinations.add(topic)
        if topic in self._members:
            self._collect(topic, ops, undo, touched)
            return
        old = self._indexes.get(topic)
        if old is not None and old.count:
            self._indexes[topic] = LiveIndex()
            undo.append(lambda: self._indexes.__setitem__(topic, old))
            ops.append((CLEAR, topic))

    def _append(
        self, message: StoredMessage, ops: list[Op], undo: Undo, touched: Touched
    ) -> int | None:
        destination = message.destination
        if destination.startswith(TOPIC_PREFIX):
            if not self._members.get(destination):
                return None  # no durable subscription will ever read it
        elif not destination.startswith(QUEUE_PREFIX):
            raise StoreError(
                f"cannot store a message for {destination!r}: "
                f"not a {QUEUE_PREFIX} or {TOPIC_PREFIX} destination"
            )
        if message.size >= GONE:
            raise StoreError(f"message {message.message_id} is too big to store")
        last = self._last_seq.get(destination, 0)
        seq = last + 1
        self._last_seq[destination] = seq
        index = self._index(destination)
        index.add(seq, message.size)

        def back() -> None:
            index.remove(seq)
            self._last_seq[destination] = last

        undo.append(back)
        ops.append((APPEND, seq, message.fields()))
        touched.destinations.add(destination)
        return seq

    def _remove(self, position: Position, ops: list[Op], undo: Undo, touched: Touched) -> bool:
        destination, seq = position
        index = self._indexes.get(destination)
        size = None if index is None else index.remove(seq)
        if index is None or size is None:
            return False
        undo.append(lambda: index.add(seq, size))
        ops.append((REMOVE, destination, seq))
        touched.destinations.add(destination)
        return True

    def _acknowledge(
        self, key: SubscriptionKey, seq: int, ops: list[Op], undo: Undo, touched: Touched
    ) -> str | None:
        """Move a position forward (never past its topic's end); the topic if it moved."""
        sub = self._subs.get(key)
        if sub is None:
            return None
        upto = min(seq, self._last_seq.get(sub.topic, 0))
        if upto <= sub.acked:
            return None
        before, singles = sub.acked, sub.singles
        sub.acked = upto
        if singles:
            sub.singles = frozenset(s for s in singles if s > upto)

        def back() -> None:
            sub.acked, sub.singles = before, singles

        undo.append(back)
        ops.append((ACKNOWLEDGE, key[0], key[1], upto))
        touched.keys.add(key)
        return sub.topic

    def _acknowledge_single(
        self, key: SubscriptionKey, seq: int, ops: list[Op], undo: Undo, touched: Touched
    ) -> None:
        """Keep one position past the subscription's own as acknowledged."""
        sub = self._subs.get(key)
        if sub is None or seq <= sub.acked or seq in sub.singles:
            return
        singles = sub.singles
        sub.singles = singles | {seq}
        undo.append(lambda: setattr(sub, "singles", singles))
        ops.append((ACKNOWLEDGE_SINGLE, key[0], key[1], seq))
        touched.keys.add(key)

    def _collect(self, topic: str, ops: list[Op], undo: Undo, touched: Touched) -> None:
        """Drop the messages of ``topic`` that every subscription has passed."""
        index = self._indexes.get(topic)
        if index is None or not index.count:
            return
        floor = min(self._subs[key].acked for key in self._members[topic])
        taken = index.cut(floor)
        if taken:

            def back() -> None:
                for seq, size in taken:
                    index.add(seq, size)

            undo.append(back)
            ops.append((COLLECT, topic, floor))
            touched.destinations.add(topic)

    # -- helpers ----------------------------------------------------------------------

    def _index(self, destination: str) -> LiveIndex:
        index = self._indexes.get(destination)
        if index is None:
            index = self._indexes[destination] = LiveIndex()
        return index

    def _members_discard(self, topic: str, key: SubscriptionKey) -> None:
        members = self._members.get(topic)
        if members is not None:
            members.discard(key)
            if not members:
                del self._members[topic]

    def _info(self, key: SubscriptionKey) -> SubscriptionInfo | None:
        sub = self._subs.get(key)
        return (
            None
            if sub is None
            else SubscriptionInfo(key[0], key[1], sub.topic, sub.selector, sub.acked, sub.singles)
        )
