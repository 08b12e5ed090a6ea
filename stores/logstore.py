"""What the queue store and the topic store share: a session on a ``LogSet``,
committed counts, and the expiry sweep.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from ZODB import DB

from .chunks import Chunk, run_in_chunks
from .counts import CountMirror, CountSnapshot
from .errors import StoreOpenError
from .model import LogSet
from .records import StoredMessage
from .results import Batch, SweepResult
from .session import Session

RootT = TypeVar("RootT", bound=LogSet)


def destinations_of(messages: Iterable[StoredMessage]) -> set[str]:
    return {m.destination for m in messages}


def open_session(db: DB, root_name: str, new_root: Callable[[], RootT]) -> Session[RootT]:
    """A session on a store's root, refused if the root was written in another layout."""
    session: Session[RootT] = Session(db, root_name, new_root)
    with session.read() as logs:
        layout = logs.layout
    if layout != LogSet.LAYOUT:
        session.close()
        raise StoreOpenError(
            f"the {root_name!r} store was written in layout {layout} by an older "
            f"wiremq; this one reads layout {LogSet.LAYOUT}. Drain it with the older "
            "version, or move its data away to start empty."
        )
    return session


class LogStore(Generic[RootT]):
    """A store of per-destination message logs in one ZODB database.

    Used by one thread at a time (see ``Session``); only the count readers
    (``count``, ``byte_count``, ``total_count``, ``total_bytes``,
    ``destinations``) may be called from any thread at any time.
    """

    def __init__(
        self,
        db: DB,
        root_name: str,
        new_root: Callable[[], RootT],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._session: Session[RootT] = open_session(db, root_name, new_root)
        self._clock = clock
        self._counts = CountMirror()
        with self._session.read() as logs:
            self._counts.publish(CountSnapshot.of(logs, logs.logs.keys()))

    def close(self) -> None:
        """Close this store's connection; the database stays open for its owner."""
        self._session.close()

    # -- counts (any thread) -------------------------------------------------

    def destinations(self) -> list[str]:
        return self._counts.destinations()

    def count(self, destination: str) -> int:
        return self._counts.get(destination).messages

    def byte_count(self, destination: str) -> int:
        return self._counts.get(destination).bytes

    def total_count(self) -> int:
        return self._counts.total().messages

    def total_bytes(self) -> int:
        return self._counts.total().bytes

    # -- cleanup -------------------------------------------------------------

    def sweep_expired(
        self,
        now_ms: int,
        *,
        max_messages: int = 100_000,
        max_seconds: float = 5.0,
        transaction_size: int = 500,
    ) -> SweepResult:
        """Remove messages expired at ``now_ms`` in commits of ``transaction_size``.

        Uses the expiry index, so the cost is that of the expired messages,
        not of everything stored.
        """
        return run_in_chunks(
            lambda limit: self._expire_chunk(now_ms, limit),
            max_messages=max_messages,
            max_seconds=max_seconds,
            transaction_size=transaction_size,
            clock=self._clock,
        )

    def _expire_chunk(self, now_ms: int, limit: int) -> Chunk:
        with self._session.write(f"expire up to {limit}") as logs:
            removed, exhausted = logs.expire_due(now_ms, limit)
            snapshot = CountSnapshot.of(logs, destinations_of(removed))
        self._counts.publish(snapshot)
        return removed, exhausted

    # -- helpers for subclasses ----------------------------------------------

    def _read_log(
        self,
        destination: str,
        after_seq: int,
        *,
        limit: int,
        max_bytes: int,
        now_ms: int,
        remove_expired: bool,
    ) -> Batch:
        """Read a batch in order (see ``MessageLog.read``), skipping expired messages
        (and removing them if asked)."""
        with self._session.read() as logs:
            log = logs.logs.get(destination)
            messages, expired, last_seq, at_end = (
                ([], [], after_seq, True)
                if log is None
                else log.read(after_seq, now_ms=now_ms, limit=limit, max_bytes=max_bytes)
            )
        if remove_expired and expired:
            self._remove({destination: [seq for seq, _ in expired]}, "expire on read")
        return Batch(messages, last_seq, at_end, [m for _, m in expired], remove_expired)

    def _remove(self, positions: dict[str, list[int]], note: str) -> list[StoredMessage]:
        """Remove messages by position in one commit; positions already gone are ignored."""
        with self._session.write(note) as logs:
            removed = [m for name, seqs in positions.items() for m in logs.pop(name, seqs)]
            snapshot = CountSnapshot.of(logs, destinations_of(removed))
        self._counts.publish(snapshot)
        return removed
