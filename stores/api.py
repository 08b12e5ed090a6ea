"""The one interface the server has to its persistent messages: ``MessageStore``.

Everything that changes what is stored is a ``StoreTransaction`` handed to
``commit``: messages appended to queues and topics, messages removed
(acknowledged, expired, moved to a dead message queue), durable subscribers'
positions, durable subscriptions created or removed. A transaction is applied
all or none, also across a crash: this is what lets a STOMP transaction that
sends to queues and topics and acknowledges messages be stored as one unit,
and an expired message be moved to a dead message queue without a moment in
which it is in neither place. When ``commit`` returns, its transactions are
durable (a receipt may be sent).

The records handed in and out on every commit (``StoreTransaction``,
``Committed``, ``records.StoredMessage``) are never changed once made, but are
not ``frozen`` dataclasses: a frozen one's ``__init__`` sets each field through
``object.__setattr__``, three to five times the cost of a plain one, paid on
every persistent message's way in and every commit (bench/README.md).

Threads: ``commit`` (or its steps, ``begin`` to ``finish``) is called by one
thread at a time (the server's event loop; ``write`` and ``take_back`` on a
worker); ``read``, ``expired``, ``catch_up`` and ``pack`` by one other thread at a
time (its store worker); the count readers and ``subscriptions`` from any
thread. Reads see every transaction whose ``commit`` has returned.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Protocol

from .durable import SubscriptionInfo, SubscriptionKey
from .errors import StoreError
from .records import StoredMessage

QUEUE_PREFIX = "/queue/"
TOPIC_PREFIX = "/topic/"

Position = tuple[str, int]  # (destination, sequence number in its log)
Match = Callable[[StoredMessage], bool]  # which stored messages a read returns


@dataclass(slots=True)
class StoreTransaction:
    """What one unit of work changes in the stores.

    - ``appends``: messages to store, each at the end of its destination's log
      (a ``/queue/`` or ``/topic/`` name). A topic message is kept only while
      its topic has durable subscriptions (as of this transaction, its own
      ``subscribes`` included); otherwise it gets no position.
    - ``removals``: stored messages to delete, by position; positions no longer
      there are skipped (a cleanup may have got there first).
    - ``moves``: stored messages to move, e.g. an expired one to its dead
      message queue: the message at the position is deleted and the one given
      (its copy for the new destination) appended, only if the position still
      held a message, so that a message acknowledged meanwhile is not moved.
    - ``acknowledgements``: durable subscriptions' acknowledged positions; a
      position never moves back, and an unknown subscription is skipped.
    - ``single_acknowledgements``: stored messages a durable subscription
      acknowledged one by one past its position (an older one is still
      unacknowledged); they are kept with the subscription (its
      ``SubscriptionInfo.acknowledged``) until its position passes them, so
      that its replays can skip them, also after a restart.
    - ``subscribes``: durable subscriptions to create or resume: (key, topic,
      selector). A new one starts at its topic's current end; resuming with
      another topic or selector replaces it and drops its backlog (JMS).
    - ``unsubscribes``: durable subscriptions to delete with their backlog; an
      unknown one is skipped.

    Subscription changes apply first, subscribes before unsubscribes (so
    that an append in the same transaction is kept for a subscription it
    creates), then appends, removals, moves (so a removal of the same position
    wins), acknowledgements and single acknowledgements.
    """

    appends: tuple[StoredMessage, ...] = ()
    removals: tuple[Position, ...] = ()
    acknowledgements: tuple[tuple[SubscriptionKey, int], ...] = ()
    subscribes: tuple[tuple[SubscriptionKey, str, str], ...] = ()
    unsubscribes: tuple[SubscriptionKey, ...] = ()
    moves: tuple[tuple[Position, StoredMessage], ...] = ()
    single_acknowledgements: tuple[tuple[SubscriptionKey, int], ...] = ()

    @classmethod
    def merged(cls, parts: Sequence[StoreTransaction]) -> StoreTransaction:
        """One transaction that makes every change of ``parts``, in their order."""
        return cls(
            *(tuple(item for part in parts for item in getattr(part, f.name)) for f in fields(cls))
        )

    @property
    def empty(self) -> bool:
        """Whether it changes nothing."""
        return not (
            self.appends
            or self.removals
            or self.acknowledgements
            or self.subscribes
            or self.unsubscribes
            or self.moves
            or self.single_acknowledgements
        )


@dataclass(slots=True)
class Committed:
    """What ``commit`` tells about one transaction.

    ``positions[i]`` is the sequence number ``appends[i]`` got in its log (None
    for a topic message no durable subscription keeps); ``removed`` the
    positions the removals found (each reported by exactly one commit), in the
    order asked; ``subscriptions[i]`` the subscription ``subscribes[i]`` made or
    resumed and whether it is new; ``moved[i]`` the position ``moves[i]``'s
    message got, or None if nothing was appended: its source was gone (then
    nothing was deleted either), or it went to a topic no durable subscription
    keeps.

    ``removed`` names positions, not messages: whoever removes a message has it
    already (it was delivered, or ``expired``/``read`` handed it out), and a
    store that had to hand it back would have to keep every stored message in
    memory or read it back from the database on the commit path.
    """

    positions: tuple[int | None, ...] = ()
    removed: tuple[Position, ...] = ()
    subscriptions: tuple[tuple[SubscriptionInfo, bool], ...] = ()
    moved: tuple[int | None, ...] = ()


@dataclass(frozen=True, slots=True)
class Batch:
    """Messages read in order from one destination's log (a queue read or a replay).

    ``last_seq`` is the position to pass as ``after_seq`` for the next batch: the
    last message examined, expired ones included. ``expired`` are the expired
    messages met on the way, never handed out; removing them is the caller's
    choice (a ``StoreTransaction``).
    """

    messages: list[tuple[int, StoredMessage]]
    last_seq: int
    at_end: bool
    expired: list[tuple[int, StoredMessage]] = field(default_factory=list)


@dataclass(slots=True)
class LogWrite:
    """The bytes that make a commit durable, and where they go: the record's ``parts``
    written one after the other at ``offset`` of the open file ``fd``, then synced.

    A record comes in parts so that a large message's body is written from the bytes
    the server holds rather than from a copy joined to the rest (``stores/bodies``).
    ``fd`` is -1 (and ``offset`` 0) if the record needs a new file first, which only
    ``MessageStore.write`` can start. ``size`` is the record's length in bytes (its
    parts' together).
    """

    lsn: int
    parts: tuple[bytes, ...]
    fd: int
    offset: int
    size: int

    @property
    def in_place(self) -> bool:
        """Whether it goes into the open file (so that any thread may write and sync it)."""
        return self.fd >= 0


@dataclass(slots=True)
class PendingCommit:
    """A commit decided in memory (``MessageStore.begin``) whose record is not durable yet.

    ``write`` is its record (None if it changes nothing stored), ``results`` what
    ``finish`` returns; ``undo`` puts the store's memory back as it was and
    ``publish`` shows the other threads what the commit changed.
    """

    results: list[Committed]
    write: LogWrite | None
    undo: Callable[[], None]
    publish: Callable[[], None]


class MessageStore(Protocol):
    """Persistent queue and topic messages and durable subscriptions."""

    def commit(self, transactions: Sequence[StoreTransaction]) -> list[Committed]:
        """Apply ``transactions`` in order, each all or none; durable on return.

        Raises ``StoreError`` if they could not be made durable (then none is).
        """

    def begin(self, transactions: Sequence[StoreTransaction]) -> PendingCommit:
        """``commit`` in steps, so that the event loop decides and a thread of the
        caller's choice writes: decide ``transactions`` in memory and encode their record
        (no I/O). One commit at a time, until ``finish`` or ``abandon``. Raises
        ``StoreError`` (nothing changed) if they cannot be stored."""

    def write(self, pending: PendingCommit) -> None:
        """Make its record durable on this thread (it may start a new file). Raises
        ``StoreError`` (the bytes taken back) if it could not."""

    def take_back(self, pending: PendingCommit, error: OSError) -> StoreError:
        """Its record's write failed elsewhere: take the bytes back (I/O); returns the
        error to report."""

    def finish(self, pending: PendingCommit) -> list[Committed]:
        """Its record is durable: publish what it changed; returns its results."""

    def abandon(self, pending: PendingCommit) -> None:
        """Its record could not be made durable: none of its transactions happened."""

    def read(
        self,
        destination: str,
        *,
        now_ms: int,
        after_seq: int,
        limit: int,
        max_bytes: int,
        match: Match | None = None,
        examine: int | None = None,
    ) -> Batch:
        """The messages of ``destination`` after ``after_seq``, in order, none expired.

        Stops after examining ``limit`` messages (expired ones included) or
        before exceeding ``max_bytes``; a message bigger than ``max_bytes``
        still comes back alone.

        With ``match`` (a queue looking for what one of its consumers selects, or for
        one priority), only the messages it accepts come back (expired ones are
        still reported): it stops once ``limit`` came back, after examining
        ``examine`` messages (``limit`` if not given), or before exceeding
        ``max_bytes``. ``match`` runs on the reader's thread.
        """

    def expired(self, prefix: str, now_ms: int, limit: int) -> list[tuple[Position, StoredMessage]]:
        """Up to ``limit`` stored messages of destinations named ``prefix``... (queues or
        topics: each has its own cleanup process) expired at ``now_ms``, soonest first."""

    def subscriptions(self) -> list[SubscriptionInfo]:
        """Every durable subscription, as of the last commit."""

    def count(self, destination: str) -> tuple[int, int]:
        """(messages, bytes) stored for ``destination`` as of the last commit."""

    def totals(self, prefix: str) -> tuple[int, int]:
        """(messages, bytes) stored in all destinations whose names start with ``prefix``."""

    def destinations(self, prefix: str) -> list[str]:
        """Destinations whose names start with ``prefix`` and that have stored messages."""

    def opened_positions(self) -> dict[str, int]:
        """The last position of each destination's log when the store was opened: a
        message at or before it was stored before this process (a restart, an HA
        takeover), which may have delivered it already."""

    def catch_up(self, max_seconds: float) -> int:
        """Bring the store of record up to date with what was committed (bounded work);
        returns how many transactions were applied."""

    def pack(self) -> None:
        """Give back the space of removed messages."""

    def close(self) -> None:
        """Finish what is pending and release the storages."""
