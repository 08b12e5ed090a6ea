"""The persistent objects of a store: message blocks, per-destination logs, the root.

The messages a commit appends to one log are kept together (a
``MessageBlock``), not one record per message: ZODB's cost is per record
(pickling, and a persistent reference in an index bucket rewritten on every
append), so a group commit of eight messages costs about what one costs.
A block is two records: its bookkeeping (which offsets are gone, each
message's size) and its messages' pickle (``BlockData``), written once. A
removal rewrites only the small first one, and the write-ahead log's
in-memory index is rebuilt at open from the first ones alone, without
reading any message. The index of blocks is a B-tree with small buckets, so
that the bucket an append rewrites stays small. Counts live beside the data
they count, so that watermarks and a reopen never need a scan.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import Any, TypeVar

from BTrees.LOBTree import LOBTree
from BTrees.OOBTree import OOBTree, OOTreeSet
from persistent import Persistent

from .bodies import dumps, loads, out_of_band
from .errors import StoreError
from .records import StoredMessage

# A block holds at most this many messages, or this many bytes past its first
# message, so that reading one for a few messages stays cheap.
BLOCK_MESSAGES = 64
BLOCK_BYTES = 32_768
# A block written by the write-ahead log's catch-up may have holes (messages
# removed before they reached ZODB); it spans at most this many positions.
BLOCK_SPAN = 4 * BLOCK_MESSAGES
# A large body (``bodies.OUT_OF_BAND_FROM``) is stored in pieces of at most this many
# bytes, each a record of its own (``BodyPiece``): about the cost of a record's
# bookkeeping per millisecond of writing it.
BODY_PIECE_BYTES = 1 << 20


K = TypeVar("K")
V = TypeVar("V")


def grouped(pairs: Iterable[tuple[K, V]]) -> dict[K, list[V]]:
    """The values of ``pairs`` by key, each list in the order met."""
    groups: dict[K, list[V]] = {}
    for key, value in pairs:
        groups.setdefault(key, []).append(value)
    return groups


def runs_at(
    items: Sequence[tuple[int, StoredMessage]],
) -> Iterator[list[tuple[int, StoredMessage]]]:
    """Runs of ``items`` ((seq, message), seqs increasing, maybe with gaps) within the block
    limits: at most ``BLOCK_MESSAGES`` messages, ``BLOCK_BYTES`` past the first one and
    ``BLOCK_SPAN`` positions each."""
    run: list[tuple[int, StoredMessage]] = []
    size = 0
    for seq, message in items:
        if run and (
            len(run) >= BLOCK_MESSAGES
            or size + message.size > BLOCK_BYTES
            or seq - run[0][0] >= BLOCK_SPAN
        ):
            yield run
            run, size = [], 0
        run.append((seq, message))
        size += message.size
    if run:
        yield run


class BodyPiece(Persistent):
    """A piece of a large body, a record of its own (see ``BODY_PIECE_BYTES``); written from
    a view of the body, so that the body is never copied whole. Let go of it
    (``_p_deactivate``) once written or read: while it holds its view, the whole body stays
    in memory."""

    def __init__(self, view: memoryview) -> None:
        self.data: bytes | memoryview = view

    def __getstate__(self) -> dict[str, bytes]:
        return {"data": bytes(self.data)}


def pieces_of(body: bytes) -> tuple[BodyPiece, ...]:
    view = memoryview(body)
    return tuple(
        BodyPiece(view[start : start + BODY_PIECE_BYTES])
        for start in range(0, len(body), BODY_PIECE_BYTES)
    )


def joined(pieces: Sequence[BodyPiece]) -> bytes:
    """A body read back from its pieces, each let go of once copied: at the peak the body
    and one piece."""
    body = io.BytesIO()  # grows in place, and hands over its buffer uncopied
    for piece in pieces:
        body.write(piece.data)
        piece._p_deactivate()
    return body.getvalue()


class BlockData(Persistent):
    """The messages of one block as one pickle of their ``StoredMessage.fields()``
    (None for a hole) and the large bodies it leaves out of band (``stores/bodies``),
    each kept beside it in pieces (``bodies``): ZODB's pickler (zodbpickle) holds a
    record twice over while it writes it, so a body inside the pickle cost three copies
    at once and a body in pieces costs two of a piece. Written once, never changed."""

    bodies: tuple[tuple[BodyPiece, ...], ...] = ()  # a block without large bodies has none

    def __init__(self, data: bytes, bodies: tuple[bytes, ...]) -> None:
        self.data = data
        if bodies:
            self.bodies = tuple(pieces_of(body) for body in bodies)


class MessageBlock(Persistent):
    """Messages appended to one log together, at consecutive sequence numbers.

    ``content`` holds the messages (fields added to ``StoredMessage`` later
    must come last, with defaults); ``gone`` the offsets removed since (and
    the holes of a block written with some); ``sizes`` and ``expiries`` each
    offset's size and expiry (None: none expires), so that removing a message
    (``discard``) never reads the content. A read decodes the block and keeps
    nothing.
    """

    def __init__(self, messages: Sequence[StoredMessage | None]) -> None:
        try:
            data, bodies = dumps(
                tuple(None if m is None else out_of_band(m.fields()) for m in messages)
            )
        except Exception as exc:
            raise StoreError(f"messages cannot be stored: {exc}") from exc
        self.content = BlockData(data, bodies)
        self.count = len(messages)
        self.sizes: tuple[int, ...] = tuple(0 if m is None else m.size for m in messages)
        expiries = tuple(0 if m is None else m.expires for m in messages)
        self.expiries: tuple[int, ...] | None = expiries if any(expiries) else None
        self.gone: frozenset[int] = frozenset(i for i, m in enumerate(messages) if m is None)

    def messages(self) -> tuple[StoredMessage | None, ...]:
        """Every message of the block by offset, removed ones included (see ``gone``);
        None for a hole."""
        content = self.content
        bodies = [joined(pieces) for pieces in content.bodies]
        fields: tuple[tuple[Any, ...] | None, ...] = loads(content.data, bodies)
        return tuple(None if f is None else StoredMessage(*f) for f in fields)

    def pieces(self) -> list[BodyPiece]:
        """The pieces of its large bodies."""
        return [piece for pieces in self.content.bodies for piece in pieces]

    def live_offsets(self) -> Iterator[int]:
        """Offsets of the messages not removed, in order, without decoding the block."""
        gone = self.gone
        return (i for i in range(self.count) if i not in gone)

    def live(self) -> Iterator[tuple[int, StoredMessage]]:
        """(offset, message) of the messages not removed, in order."""
        messages = self.messages()
        return ((i, messages[i]) for i in self.live_offsets())  # type: ignore[misc]

    def discard(self, offsets: Iterable[int]) -> tuple[list[int], bool]:
        """Take messages out without reading them; returns the offsets that were there
        and whether none is left (then the block is not changed: the caller drops it,
        and rewriting it would only write garbage)."""
        taken = sorted({i for i in offsets if 0 <= i < self.count and i not in self.gone})
        emptied = bool(taken) and len(self.gone) + len(taken) == self.count
        if taken and not emptied:
            self.gone = self.gone | set(taken)
        return taken, emptied

    def expires_at(self, offset: int) -> int:
        return 0 if self.expiries is None else self.expiries[offset]


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

    def append_at(
        self, items: Sequence[tuple[int, StoredMessage]], last_seq: int
    ) -> list[MessageBlock]:
        """Add messages at the positions given (increasing, past the end, maybe with
        gaps), then move the end to ``last_seq`` (positions handed out but whose
        messages are already gone count too, so that none is ever used twice); returns
        the blocks written."""
        if items and items[0][0] <= self.last_seq:
            raise StoreError(f"position {items[0][0]} is not past the end of the log")
        written = []
        for run in runs_at(items):
            first = run[0][0]
            slots: list[StoredMessage | None] = [None] * (run[-1][0] - first + 1)
            for seq, message in run:
                slots[seq - first] = message
            block = self.blocks[first] = MessageBlock(slots)
            written.append(block)
        self.count += len(items)
        self.bytes += sum(m.size for _, m in items)
        self.last_seq = max(self.last_seq, last_seq, items[-1][0] if items else 0)
        return written

    def discard(self, seqs: Iterable[int]) -> list[tuple[int, int, int]]:
        """Remove messages by position without reading them; returns (seq, size, expires)
        of those that were there. Positions not (or no longer) there are skipped."""
        starts = ((self._block_start(seq), seq) for seq in dict.fromkeys(seqs))
        by_block = grouped((first, seq - first) for first, seq in starts if first is not None)
        found: list[tuple[int, int, int]] = []
        for first, offsets in by_block.items():
            block = self.blocks[first]
            taken, emptied = block.discard(offsets)
            if emptied:
                del self.blocks[first]
            found += [(first + i, block.sizes[i], block.expires_at(i)) for i in taken]
        self.count -= len(found)
        self.bytes -= sum(size for _, size, _ in found)
        return found

    def after(self, seq: int) -> Iterator[tuple[int, StoredMessage]]:
        """Messages with a sequence number above ``seq``, in order."""
        start = self._block_start(seq + 1) or 0
        for first, block in self.blocks.items(min=start):
            for offset, message in block.live():
                if first + offset > seq:
                    yield first + offset, message

    def read(
        self,
        after_seq: int,
        *,
        now_ms: int,
        limit: int,
        max_bytes: int,
        match: Callable[[StoredMessage], bool] | None = None,
        examine: int | None = None,
    ) -> tuple[list[tuple[int, StoredMessage]], list[tuple[int, StoredMessage]], int, bool]:
        """A batch in order after ``after_seq``: (messages, expired ones met, the last
        position examined, whether the end was reached).

        Stops after examining ``limit`` messages (expired ones included, so a
        run of expired messages cannot make one call unbounded) or before
        exceeding ``max_bytes``; a message bigger than ``max_bytes`` still
        comes back alone. With ``match``, only the messages it accepts come
        back, at most ``limit`` of them, after examining at most ``examine``
        (see ``api.MessageStore.read``).
        """
        messages: list[tuple[int, StoredMessage]] = []
        expired: list[tuple[int, StoredMessage]] = []
        size = 0
        last_seq = after_seq
        most = limit if examine is None else examine
        for examined, (seq, message) in enumerate(self.after(after_seq)):
            if examined >= most or len(messages) >= limit:
                return messages, expired, last_seq, False
            if message.expired(now_ms):
                expired.append((seq, message))
            elif match is None or match(message):
                if messages and size + message.size > max_bytes:
                    return messages, expired, last_seq, False
                messages.append((seq, message))
                size += message.size
            last_seq = seq
        return messages, expired, last_seq, True

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
    the store adds up the logs' counts instead (see ``counts``). ``applied_lsn``
    is the last write-ahead log record applied to it, recorded in the same
    ZODB commit as the changes, so that a replay neither repeats nor skips one.
    """

    LAYOUT = 3  # the layout this module reads and writes (3: blocks with separate content)
    layout = 1  # what a root written before layouts were recorded reads as
    applied_lsn = 0  # a root the write-ahead log never wrote to

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

    def append_at(
        self, destination: str, items: Sequence[tuple[int, StoredMessage]], last_seq: int
    ) -> list[MessageBlock]:
        """Add messages to one log at given positions (see ``MessageLog.append_at``);
        returns the blocks written."""
        written = self.log(destination).append_at(items, last_seq)
        for seq, message in items:
            if message.expires:
                self.expiry.add((message.expires, destination, seq))
        return written

    def discard(self, destination: str, seqs: Iterable[int]) -> int:
        """Remove messages of one destination by position without reading them (see
        ``MessageLog.discard``); returns how many were there."""
        log = self.logs.get(destination)
        found = [] if log is None else log.discard(seqs)
        for seq, _, expires in found:
            if expires:
                self.expiry.remove((expires, destination, seq))
        return len(found)

    def due(
        self, now_ms: int, limit: int
    ) -> tuple[list[tuple[str, int, StoredMessage]], list[tuple[int, str, int]]]:
        """Up to ``limit`` expiry index entries due at ``now_ms``, soonest first:
        (destination, seq, message) of those whose message is there, and the stale
        keys (left by ``MessageLog.clear``) met on the way, changing nothing."""
        found: list[tuple[str, int, StoredMessage]] = []
        stale: list[tuple[int, str, int]] = []
        decoded: dict[tuple[str, int], tuple[StoredMessage | None, ...]] = {}
        for key in islice(self.expiry.keys(max=(now_ms + 1,), excludemax=True), limit):
            _, destination, seq = key
            message = self._lookup(destination, seq, decoded)
            if message is None:
                stale.append(key)
            else:
                found.append((destination, seq, message))
        return found, stale

    def _lookup(
        self,
        destination: str,
        seq: int,
        decoded: dict[tuple[str, int], tuple[StoredMessage | None, ...]],
    ) -> StoredMessage | None:
        """The message at a position, decoding each block once per ``decoded``."""
        log = self.logs.get(destination)
        first = None if log is None else log._block_start(seq)
        if log is None or first is None:
            return None
        block = log.blocks[first]
        offset = seq - first
        if offset >= block.count or offset in block.gone:
            return None
        messages = decoded.get((destination, first))
        if messages is None:
            messages = decoded[destination, first] = block.messages()
        return messages[offset]
