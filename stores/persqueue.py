"""PersQueueStore: persistent queue messages in ZODB until they are acknowledged.

Each queue is a log keyed by a growing sequence number, so per-queue order is
the order of ``append``. Appends and removals are batched by the caller (the
storage module's small processing buffer, fastdeletionsize) and each batch is
one commit, whose messages are one record per queue: ZODB costs far more per
commit and per record than per byte.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from ZODB import DB

from .counts import CountSnapshot
from .logstore import LogStore, destinations_of
from .model import LogSet
from .records import StoredMessage
from .results import Batch


class PersQueueStore(LogStore[LogSet]):
    """Persistent queue messages; one thread at a time (see ``LogStore``)."""

    def __init__(
        self,
        db: DB,
        *,
        root_name: str = "persqueue",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(db, root_name, LogSet, clock)

    def append(self, messages: Sequence[StoredMessage]) -> list[int]:
        """Store a batch in one commit; returns each message's sequence number in its queue.

        When this returns, the batch is durable: receipts may be sent.
        """
        with self._session.write(f"append {len(messages)}") as logs:
            seqs = logs.append(messages)
            snapshot = CountSnapshot.of(logs, destinations_of(messages))
        self._counts.publish(snapshot)
        return seqs

    def remove(self, queue: str, seqs: Iterable[int]) -> int:
        """Remove acknowledged messages of one queue in one commit; returns how many were there."""
        return self.remove_batch({queue: seqs})

    def remove_batch(self, positions: Mapping[str, Iterable[int]]) -> int:
        """Remove acknowledged messages of several queues in one commit."""
        batch = {queue: list(seqs) for queue, seqs in positions.items()}
        return len(self._remove(batch, f"remove from {len(batch)} queues"))

    def expire(self, positions: Mapping[str, Iterable[int]]) -> list[StoredMessage]:
        """Remove expired messages found by the server; returns those that were still there.

        The cleanup sweep may have removed some already: each expired message is
        reported by exactly one of the two.
        """
        batch = {queue: list(seqs) for queue, seqs in positions.items()}
        return self._remove(batch, f"expire from {len(batch)} queues")

    def read(
        self,
        queue: str,
        *,
        now_ms: int,
        after_seq: int = 0,
        limit: int = 100,
        max_bytes: int = 1_048_576,
        expiry_on_read: bool = False,
    ) -> Batch:
        """The next messages of ``queue`` after ``after_seq``, in order, none expired.

        ``expiry_on_read`` deletes the expired messages met on the way.
        """
        return self._read_log(
            queue,
            after_seq,
            limit=limit,
            max_bytes=max_bytes,
            now_ms=now_ms,
            remove_expired=expiry_on_read,
        )
