"""Applying write-ahead log records to one store's root, many records per ZODB commit.

The operations (``walops``) were decided at commit time, so applying them
decides nothing; what this adds is batching. Within one batch a message
appended and removed again (a fast consumer's acknowledgement, an expiry, a
passed topic message) never reaches ZODB at all; the messages left are
written per destination in as few blocks as the block limits allow, however
many commits they came from; removals of messages already in ZODB go block by
block without reading the messages. The end of each destination's log still
moves past every position handed out, so that none is ever used twice.
"""

from __future__ import annotations

from collections.abc import Iterable

from .durable import DurableLogSet
from .model import BodyPiece, LogSet
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


class Applier:
    """Applies operations to one root inside one open ZODB transaction; ``finish``
    writes what is still pending and records the last LSN applied; once committed,
    ``let_go`` drops what the cache would keep of the large bodies written."""

    def __init__(self, root: LogSet) -> None:
        self._root = root
        self._pending: dict[str, dict[int, StoredMessage]] = {}  # appends not in ZODB yet
        self._top: dict[str, int] = {}  # the highest position handed out, per destination
        self._removals: dict[str, list[int]] = {}  # of messages already in ZODB
        self.appended = 0
        self.pieces: list[BodyPiece] = []  # of the large bodies written, to let go of

    def apply(self, ops: Iterable[Op]) -> None:
        for op in ops:
            code = op[0]
            if code == APPEND:
                message = StoredMessage(*op[2])
                self._pending.setdefault(message.destination, {})[op[1]] = message
                self._top[message.destination] = op[1]
                self.appended += 1
            elif code == REMOVE:
                pending = self._pending.get(op[1])
                if pending is None or pending.pop(op[2], None) is None:
                    self._removals.setdefault(op[1], []).append(op[2])
            elif code == COLLECT:
                self._drop_pending(op[1], op[2])
                self._topics().collect_upto(op[1], op[2])
            elif code == CLEAR:
                self._drop_pending(op[1], None)
                self._root.log(op[1]).clear()
            elif code == SUBSCRIBE:
                self._topics().set_subscription((op[1], op[2]), op[3], op[4], op[5])
            elif code == UNSUBSCRIBE:
                self._topics().drop_subscription((op[1], op[2]))
            elif code == ACKNOWLEDGE:
                self._topics().acknowledge((op[1], op[2]), op[3])
            elif code == ACKNOWLEDGE_SINGLE:
                self._topics().acknowledge_single((op[1], op[2]), op[3])
            else:
                raise ValueError(f"unknown write-ahead log operation {code!r}")

    def finish(self, lsn: int) -> None:
        # Removals commute with everything else in the batch: a message that a
        # collection or a clear took already is skipped.
        for destination, seqs in self._removals.items():
            self._root.discard(destination, seqs)
        for destination, top in self._top.items():
            pending = self._pending.get(destination, {})
            for block in self._root.append_at(destination, sorted(pending.items()), top):
                self.pieces += block.pieces()
        self._root.applied_lsn = lsn

    def let_go(self) -> None:
        """Deactivate the pieces of the large bodies written: each holds a view of its
        whole body, which the object cache would keep in memory as long as any of them."""
        for piece in self.pieces:
            piece._p_deactivate()

    def _drop_pending(self, topic: str, upto: int | None) -> None:
        pending = self._pending.get(topic)
        if pending:
            for seq in [s for s in pending if upto is None or s <= upto]:
                del pending[seq]

    def _topics(self) -> DurableLogSet:
        root = self._root
        assert isinstance(root, DurableLogSet), "a topic operation reached the queue store"
        return root
