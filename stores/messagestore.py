"""WalStore: the ``MessageStore`` with a write-ahead log in front of ZODB.

A commit is one record in the write-ahead log (``wal.py``): one write and one
``fdatasync`` for all the transactions handed to it, then its results. The
server makes it in steps (``begin``: decided and encoded in memory on the event
loop; the write and sync on a thread that never takes the interpreter lock;
``finish``), so that only the sync happens off the event loop. ZODB
stays the store of record and catches up later in large batches
(``catch_up``, on the store worker), many records per ZODB commit: a
FileStorage commit costs about a millisecond of CPU whatever it carries, so
this turns a thousand small commits into a few large ones, and a message
acknowledged before its batch is applied never reaches ZODB at all.

The commit decides everything in memory (``walstate.StoreState``: positions,
which removals find a message, subscriptions, counts) and logs the outcome as
plain operations (``walops``), so that applying a record later decides
nothing. Each database records, in its root and in the same ZODB commit as the
changes, the last record applied to it (``LogSet.applied_lsn``): a replay
after a crash starts right after it, so no record is applied twice or
skipped. The two stores may be two databases (by default ``persqueue.fs`` and
``topics.fs``); the log is what makes a transaction that touches both atomic.
Reads and the expiry query first apply what ZODB lacks, then read ZODB. On a full
disk (another process filled it) ZODB cannot take what it lacks: it stays behind
the log, and reads, the expiry query and an open see it as the log has it, the
records it lacks applied in the reading unit only and never committed
(``_view``); the catch-up applies them once there is room. So consumers drain
a full disk and a server starts on one.

At open: the log is read (a torn tail is cut and logged; damage followed by
good records is refused before any database is touched), each database gets
the records it lacks (as many as the disk has room for), and the in-memory
state is rebuilt from ZODB as the log has it (block bookkeeping only, no
message content).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import structlog
from ZODB import DB

from .api import (
    QUEUE_PREFIX,
    Batch,
    Committed,
    LogWrite,
    Match,
    MessageStore,
    PendingCommit,
    Position,
    StoreTransaction,
)
from .durable import DurableLogSet, SubscriptionInfo
from .errors import StoreError, StoreOpenError, is_disk_full
from .filestorage import WAL_NOTE
from .logstore import open_session
from .model import LogSet
from .records import StoredMessage
from .session import Session
from .storage import Location, open_database
from .wal import TornTail, WriteAheadLog
from .walapply import Applier
from .walops import Op, decode, encode, split
from .walstate import StoreState, Touched, Undo

log = structlog.get_logger(__name__)

_Record = tuple[int, tuple[int, tuple[Op, ...]]]  # a record's LSN, transactions, operations


class RecordLog(Protocol):
    """What the store needs of its log: ``wal.WriteAheadLog`` (files in a folder) or, in
    HA mode, ``dblog.DatabaseLog`` (a table of the shared database). Records are numbered
    by LSN from 1; ``first_lsn``..``last_lsn`` are those kept when it was opened,
    ``durable_lsn`` the last one known durable."""

    first_lsn: int
    last_lsn: int
    durable_lsn: int

    @property
    def folder(self) -> Path | str:
        """Where it is, for messages."""

    def cut_torn_tail(self) -> TornTail | None: ...
    def start(self, next_lsn: int) -> None: ...
    def place(self, payload: Sequence[bytes]) -> LogWrite: ...
    def write(self, write: LogWrite) -> None: ...
    def take_back(self, write: LogWrite, error: OSError) -> StoreError: ...
    def written(self, write: LogWrite) -> int: ...
    def records(self, after: int, upto: int, max_bytes: int) -> list[tuple[int, bytes]]: ...
    def skip(self, lsn: int) -> None: ...
    def release(self, upto: int) -> int: ...
    def prepare(self) -> None: ...
    def close(self) -> None: ...


class _Part:
    """One store's root (queues or topics) and the last record applied to it.

    Each write checks, in its own ZODB transaction, that the root is still where this
    store left it (``check``): a database shared by an HA pair may have been brought
    further by the node that took over, and a deposed active's catch-up must not apply
    its records again over that. Either its transaction sees the newer root (and stops
    here) or it does not, and then its commit conflicts on the root (ZODB's optimistic
    concurrency: the root has no conflict resolution).
    """

    def __init__(self, name: str, session: Session[LogSet]) -> None:
        self.name = name
        self.session = session
        with session.read() as root:
            self.applied: int = root.applied_lsn

    def check(self, root: LogSet) -> None:
        """Refuse to write to a root that another process brought further (HA)."""
        if root.applied_lsn != self.applied:
            raise StoreError(
                f"the {self.name!r} store was brought to record {root.applied_lsn} by "
                f"another node (this one applied up to {self.applied}): it holds the "
                "store now"
            )

    def apply(self, records: Sequence[tuple[int, list[Op]]]) -> int:
        """Apply the records it lacks in one ZODB commit; returns messages appended."""
        todo = [(lsn, ops) for lsn, ops in records if lsn > self.applied]
        if not todo:
            return 0
        first, last = todo[0][0], todo[-1][0]
        with self.session.write(f"{WAL_NOTE} {first}..{last}") as root:
            self.check(root)
            applier = Applier(root)
            for _, ops in todo:
                applier.apply(ops)
            applier.finish(last)
        applier.let_go()
        self.applied = last
        return applier.appended


class WalStore:
    """Persistent queue and topic messages and durable subscriptions (``api.MessageStore``).

    Constructor values (each a candidate registry parameter):

    - ``log``: the log's folder (``<datadir>/wal``; locked while open), or a
      ``RecordLog`` made elsewhere: in HA mode the shared database's
      (``dblog.DatabaseLog``). The store owns it from then on.
    - ``queues``, ``topics``: where the two stores' databases are
      (``storage.Location``); the same URI opens one database for both.
    - ``segment_bytes``: for a log in a folder, the size of each segment file
      (WriteAheadLog.segmentsize). A segment is deleted once both databases have
      applied it, so the log keeps about two of them; a commit bigger than this
      gets a segment of its own.
    - ``catch_up_bytes``: log payload applied per ZODB commit
      (WriteAheadLog.catchupsize; 256 KiB is about 1,300 one-message records or
      10,000 messages in records of eight). Measured from 64 KiB to 4 MiB,
      256 KiB caught up fastest here and a batch held the store worker under
      100 ms; larger batches were slower.
    - ``queue_root``, ``topic_root``: the stores' root names in their database.
    - ``clock``: monotonic seconds, for ``catch_up``'s time bound.

    Threads: ``commit``, or its steps (``begin``, then ``finish`` or
    ``abandon``), from one thread at a time (the server's event loop), one
    commit at a time; the record of a begun commit may be written and synced
    by any thread (``write`` and ``take_back`` here, or its ``LogWrite`` by the
    server's C sync thread); ``read``, ``expired``, ``catch_up`` and ``pack``
    from one other thread at a time (the store worker), which should call
    ``catch_up`` whenever it is idle or every few hundred milliseconds, so
    that the log stays short (an open replays what is left) and reads find
    little to apply; ``count``, ``totals``, ``destinations`` and
    ``subscriptions`` from any thread. ``close`` once all have stopped.
    """

    def __init__(
        self,
        log: Path | RecordLog,
        queues: Location,
        topics: Location,
        *,
        catch_up_bytes: int,
        segment_bytes: int | None = None,
        queue_root: str = "persqueue",
        topic_root: str = "topics",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if catch_up_bytes < 1:
            raise ValueError("catch_up_bytes must be at least 1")
        self._clock = clock
        # The last record committed with large bodies, as decided (its bodies the very
        # objects the server holds), until it is applied: the catch-up applies it from
        # here instead of reading and decoding a copy of it from the log. One record at
        # most, so what it keeps alive is bounded by one commit.
        self._held: _Record | None = None
        self._catch_up_bytes = catch_up_bytes
        self._unprepared = False  # the last catch-up could not prepare the next segment
        self._short_of_space = False  # the last apply stopped at a full disk
        if isinstance(log, Path):
            if segment_bytes is None:
                raise ValueError("a log in a folder needs segment_bytes")
            self._wal: RecordLog = WriteAheadLog(log, segment_bytes=segment_bytes)
        else:
            self._wal = log
        self._databases: dict[str, DB] = {}
        self._parts: list[_Part] = []
        try:
            for location in (queues, topics):
                if location.uri not in self._databases:
                    self._databases[location.uri] = open_database(location)
            queue_session = open_session(self._databases[queues.uri], queue_root, LogSet)
            self._parts.append(_Part(queue_root, queue_session))
            topic_session = open_session(self._databases[topics.uri], topic_root, DurableLogSet)
            self._parts.append(_Part(topic_root, topic_session))  # type: ignore[arg-type]
            self._recover()
            self._state = self._load()
            # Read on every persistent SEND and commit (the spool's checks and watermarks,
            # several times each): the state's own methods, not a call through one here.
            self.count: Callable[[str], tuple[int, int]] = self._state.count
            self.totals: Callable[[str], tuple[int, int]] = self._state.totals
            self._opened_positions = self._state.last_positions()
            self._wal.release(self._applied())
            self._wal.start(max(self._wal.last_lsn, *(p.applied for p in self._parts)) + 1)
        except BaseException as exc:
            self._close_all()
            if isinstance(exc, OSError):
                raise StoreOpenError(
                    f"cannot use the write-ahead log in {self._wal.folder}: {exc}"
                ) from exc
            raise

    # -- open ---------------------------------------------------------------------------

    def _recover(self) -> None:
        wal = self._wal
        wal_dir = wal.folder
        for part in self._parts:
            if part.applied < wal.first_lsn - 1:
                raise StoreOpenError(
                    f"the {part.name!r} store has applied the write-ahead log up to record "
                    f"{part.applied}, but {wal_dir} starts at record {wal.first_lsn}: "
                    "records are missing (a segment deleted or a log from elsewhere)"
                )
        ahead = [p for p in self._parts if p.applied > wal.last_lsn]
        behind = [p for p in self._parts if p.applied < wal.last_lsn]
        lagging = [p for p in self._parts if ahead and p.applied < ahead[0].applied]
        if lagging:
            raise StoreOpenError(
                f"{wal_dir} ends at record {wal.last_lsn}, the {ahead[0].name!r} store has "
                f"applied up to record {ahead[0].applied} and the {lagging[0].name!r} store "
                f"only up to record {lagging[0].applied}: the records between are in neither "
                "the log nor that store (the log was deleted or replaced while it held them)"
            )
        torn = wal.cut_torn_tail()
        if torn is not None:
            _log_torn_tail(wal_dir, torn)
        if not behind:
            return
        start = time.monotonic()
        transactions, messages, records = self._apply_with_room(wal.last_lsn, None)
        log.info(
            "wal.replayed",
            folder=str(wal_dir),
            records=records,
            transactions=transactions,
            messages=messages,
            seconds=round(time.monotonic() - start, 3),
            stores={p.name: p.applied for p in self._parts},
        )

    def _load(self) -> StoreState:
        start = time.monotonic()
        state = StoreState()
        for part in self._parts:
            with self._view(part, self._wal.durable_lsn) as root:
                for name, message_log in root.logs.items():
                    state.load_log(name, message_log.last_seq, message_log.blocks.items())
                if isinstance(root, DurableLogSet):
                    for key, sub in root.subscriptions.items():
                        state.load_subscription(
                            key, sub.topic, sub.selector, sub.acked_seq, sub.acknowledged
                        )
        state.loaded()
        log.info(
            "wal.opened",
            queue_messages=state.totals(QUEUE_PREFIX).messages,
            topic_messages=state.totals("/topic/").messages,
            subscriptions=len(state.subscriptions()),
            last_record=self._wal.last_lsn,
            seconds=round(time.monotonic() - start, 3),
        )
        return state

    # -- the writer ------------------------------------------------------------------------

    def begin(self, transactions: Sequence[StoreTransaction]) -> PendingCommit:
        """Decide ``transactions`` in memory and encode their record, with no I/O: what
        ``commit`` does before its write. ``finish`` once the record is durable (``write``
        here, or its ``LogWrite`` elsewhere), ``abandon`` if it could not be; one commit at
        a time. Raises ``StoreError`` (nothing changed) if they cannot be stored."""
        ops: list[Op] = []
        undo: Undo = []
        touched = Touched()
        try:
            results = [self._state.resolve(t, ops, undo, touched) for t in transactions]
            payload = encode(len(transactions), ops) if ops else None
            write = self._wal.place(payload) if payload else None
        except BaseException as exc:
            _undo(undo)
            if isinstance(exc, Exception) and not isinstance(exc, StoreError):
                raise StoreError(f"messages cannot be stored: {exc}") from exc
            raise
        held: _Record | None = None
        if write is not None and payload is not None and len(payload) > 1:  # large bodies
            held = (write.lsn, (len(transactions), tuple(ops)))
        return PendingCommit(
            results, write, lambda: _undo(undo), lambda: self._publish(touched, held)
        )

    def _publish(self, touched: Touched, held: _Record | None) -> None:
        self._state.publish(touched)
        if held is not None:
            self._held = held

    def write(self, pending: PendingCommit) -> None:
        """Make a begun commit's record durable on this thread (any thread, one at a time;
        it may start a log segment). Raises ``StoreError`` (the bytes taken back) if it
        could not."""
        if pending.write is not None:
            self._wal.write(pending.write)

    def take_back(self, pending: PendingCommit, error: OSError) -> StoreError:
        """The write of a begun commit failed elsewhere: take its bytes back (I/O, so off
        the event loop); returns the error to ``abandon`` it with."""
        assert pending.write is not None
        return self._wal.take_back(pending.write, error)

    def finish(self, pending: PendingCommit) -> list[Committed]:
        """A begun commit's record is durable: publish what it changed; its results."""
        if pending.write is not None:
            self._wal.written(pending.write)
        pending.publish()
        return pending.results

    def abandon(self, pending: PendingCommit) -> None:
        """A begun commit's record could not be made durable: none of its transactions
        happened."""
        pending.undo()

    def commit(self, transactions: Sequence[StoreTransaction]) -> list[Committed]:
        """Apply ``transactions`` in order, each all or none; durable on return (one
        write and one fdatasync for all of them, nothing at all if they change nothing
        stored). Raises ``StoreError`` if they could not be made durable (then none is)."""
        pending = self.begin(transactions)
        try:
            self.write(pending)
        except BaseException:
            self.abandon(pending)
            raise
        return self.finish(pending)

    # -- the store worker ------------------------------------------------------------------

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
        """The messages of ``destination`` after ``after_seq``, in order, none expired
        (see ``api.MessageStore.read``); applies what ZODB lacks first."""
        upto = self._wal.durable_lsn
        self._apply_with_room(upto, None)
        part = self._parts[0 if destination.startswith(QUEUE_PREFIX) else 1]
        with self._view(part, upto) as root:
            message_log = root.logs.get(destination)
            if message_log is None:
                return Batch([], after_seq, True)
            messages, expired, last_seq, at_end = message_log.read(
                after_seq,
                now_ms=now_ms,
                limit=limit,
                max_bytes=max_bytes,
                match=match,
                examine=examine,
            )
        return Batch(messages, last_seq, at_end, expired)

    def expired(self, prefix: str, now_ms: int, limit: int) -> list[tuple[Position, StoredMessage]]:
        """Up to ``limit`` stored messages of the queues (``prefix`` ``/queue/``) or the
        topics expired at ``now_ms``, soonest first.

        Expiry index entries left behind by a topic's cleared backlog are
        dropped on the way (and count towards ``limit``, so one call stays
        bounded).
        """
        upto = self._wal.durable_lsn
        self._apply_with_room(upto, None)
        part = self._parts[0] if prefix == QUEUE_PREFIX else self._parts[1]
        with self._view(part, upto) as root:
            due, stale = root.due(now_ms, limit)
        if stale and part.applied >= upto:  # (else ZODB lacks what made them stale)
            try:
                with part.session.write(f"drop {len(stale)} stale expiry entries") as root:
                    part.check(root)
                    for key in stale:
                        root.expiry.remove(key)
            except StoreError as error:
                if not is_disk_full(error):
                    raise  # (on a full disk they are dropped by a later query)
        found = [(m.expires, (d, seq), m) for d, seq, m in due]
        live = [f for f in found if self._state.is_live(*f[1])]  # not removed since
        live.sort(key=lambda f: (f[0], f[1]))
        return [(position, message) for _, position, message in live[:limit]]

    def catch_up(self, max_seconds: float) -> int:
        """Apply what ZODB lacks, a batch per ZODB commit, until done or ``max_seconds``
        have passed (at least one batch); drop the segments every database has applied
        and prepare the next one. Returns how many transactions were applied."""
        deadline = self._clock() + max_seconds
        transactions, _, _ = self._apply_with_room(self._wal.durable_lsn, deadline)
        self._wal.release(self._applied())
        try:
            self._wal.prepare()
        except OSError as error:  # a full disk: the next catch-up tries again
            if not self._unprepared:
                log.warning("wal.prepare_failed", error=str(error))
            self._unprepared = True
        else:
            self._unprepared = False
        return transactions

    def pack(self) -> None:
        """Give back the space of removed messages (ZODB pack of each database)."""
        for db in self._databases.values():
            db.pack()

    # -- any thread ------------------------------------------------------------------------

    def subscriptions(self) -> list[SubscriptionInfo]:
        return self._state.subscriptions()

    def destinations(self, prefix: str) -> list[str]:
        return self._state.destinations(prefix)

    def opened_positions(self) -> dict[str, int]:
        return dict(self._opened_positions)

    # -- closing ---------------------------------------------------------------------------

    def close(self) -> None:
        """Apply everything to ZODB (so that the next open has nothing to replay), drop
        the log's applied segments and release the storages and the log's folder."""
        try:
            self._apply_with_room(self._wal.durable_lsn, None)
            self._wal.release(self._applied())
        finally:
            self._close_all()

    def _close_all(self) -> None:
        """Release everything without applying anything (also what a crash leaves)."""
        for part in self._parts:
            part.session.close()
        for db in self._databases.values():
            db.close()
        self._wal.close()

    # -- applying the log ------------------------------------------------------------------

    def _applied(self) -> int:
        return min(part.applied for part in self._parts)

    def _apply_with_room(self, upto: int, deadline: float | None) -> tuple[int, int, int]:
        """``_apply``, except that a full disk leaves the databases behind the log (what
        was applied before it stays applied): ``_view`` shows them as the log has them,
        and a later call applies the rest once there is room."""
        try:
            done = self._apply(upto, deadline)
        except StoreError as error:
            if not is_disk_full(error):
                raise
            if not self._short_of_space:
                log.warning("wal.apply_postponed", reason=str(error), applied=self._applied())
            self._short_of_space = True
            return 0, 0, 0
        if self._short_of_space:
            log.info("wal.apply_resumed", applied=self._applied())
            self._short_of_space = False
        return done

    @contextmanager
    def _view(self, part: _Part, upto: int) -> Iterator[LogSet]:
        """``part``'s root as of record ``upto``: ZODB's, with the records it has not
        applied (a full disk kept them out) applied in this reading unit only, never
        committed."""
        index = self._parts.index(part)
        with part.session.read() as root:
            after = part.applied
            if after < upto:
                applier = Applier(root)
                while after < upto:
                    read = self._wal.records(after, upto, self._catch_up_bytes)
                    for lsn, (_, ops) in _decoded(read):
                        applier.apply(split(ops)[index])
                        after = lsn
                applier.finish(after)
            yield root

    def _apply(self, upto: int, deadline: float | None) -> tuple[int, int, int]:
        """Apply records up to LSN ``upto`` (until ``deadline``, if given, after at least
        one batch); returns (transactions, messages appended, records)."""
        transactions = messages = records = 0
        while (start := self._applied()) < upto:
            held = self._take_held(start)
            if held is not None:
                batch: Iterable[_Record] = [held]
                records += 1
            else:
                read = self._wal.records(start, self._before_held(upto), self._catch_up_bytes)
                records += len(read)
                batch = _decoded(read)
            queue_ops: list[tuple[int, list[Op]]] = []
            topic_ops: list[tuple[int, list[Op]]] = []
            for lsn, (count, ops) in batch:
                transactions += count
                for_queues, for_topics = split(ops)
                queue_ops.append((lsn, for_queues))
                topic_ops.append((lsn, for_topics))
            for part, part_ops in zip(self._parts, (queue_ops, topic_ops), strict=True):
                messages += part.apply(part_ops)
            if deadline is not None and self._clock() >= deadline:
                break
        return transactions, messages, records

    def _before_held(self, upto: int) -> int:
        """Where a read of the log stops: before the record held in memory, if any."""
        held = self._held
        return upto if held is None else min(upto, held[0] - 1)

    def _take_held(self, start: int) -> _Record | None:
        """The record after LSN ``start`` if it is the one held in memory (the log's
        reader moves past it unread); a held record already applied is let go of.

        The event loop may hold a newer record meanwhile, and this may then let go of it
        as well: it is read back from the log instead.
        """
        held = self._held
        if held is None or held[0] > start + 1:
            return None
        self._held = None
        if held[0] <= start:
            return None
        self._wal.skip(held[0])
        return held


def _decoded(batch: list[tuple[int, bytes]]) -> Iterator[_Record]:
    """Each record's LSN and decoded payload, in order; the list is emptied as it goes, so
    that a record's bytes are let go of once decoded (a large message's are its size)."""
    batch.reverse()
    while batch:
        lsn = batch[-1][0]
        yield lsn, decode(batch.pop()[1])


def _undo(undo: Undo) -> None:
    for step in reversed(undo):
        step()


def _log_torn_tail(wal_dir: Path | str, torn: TornTail) -> None:
    log.warning(
        "wal.torn_tail",
        folder=str(wal_dir),
        segment=torn.segment,
        at_offset=torn.offset,
        discarded_bytes=torn.size,
        record=torn.lsn,
        record_header=("readable" if torn.header else "not written"),
        meaning="a commit that never returned was cut off; no receipt was sent for it",
    )


if TYPE_CHECKING:  # mypy checks that WalStore is what api.MessageStore describes
    _conforms: type[MessageStore] = WalStore
