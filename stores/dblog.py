"""The log of an HA pair: the store's records in the shared database, fenced by the lease.

In HA mode the durability point is PostgreSQL, where every node sees it: each
record ``WalStore`` commits (one group commit, decided and encoded on the event
loop exactly as for the local log) is one ``INSERT`` into ``wiremq_log`` (lsn,
this node's lease epoch, the record) in autocommit, one round trip, made by the
store's writer thread (psycopg2 lets go of the interpreter lock while it
waits). The fencing trigger (``hadatabase``) refuses it in the same transaction
if the lease moved on: a deposed active cannot write. The catch-up applies the
records to the RelStorage databases from memory (the records this process
wrote, up to ``keep_bytes``) or, after a takeover, from the table, and deletes
them once both databases have them (``release``), again only while the lease is
this node's epoch.

A write whose connection fails may or may not have been committed: the writer
reconnects, asks the table for its LSN and writes it again only if it is not
there, trying every ``retry_interval`` for as long as it takes, and tells
``on_reachable`` when the database stops and starts answering (the server holds
its producers meanwhile). Measured against the other ways a record could reach
the database in docs/architecture.md, "The log in the database".
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import psycopg2
import psycopg2.errors
import structlog
from psycopg2.extensions import connection as Connection

from .api import LogWrite
from .errors import StoreError, StoreOpenError
from .hadatabase import Fenced, close_quietly, connect, fenced, first_line, lost_connection
from .storage import redact

log = structlog.get_logger("wiremq.dblog")

_INSERT = "INSERT INTO wiremq_log (lsn, epoch, record) VALUES (%s, %s, %s)"
_FOUND = "SELECT epoch FROM wiremq_log WHERE lsn = %s"


class DatabaseLog:
    """``WalStore``'s log in the shared database (see the module docstring).

    Threads as ``wal.WriteAheadLog``: ``start``, ``place``, ``write`` and ``written``
    from the committing side, one at a time; ``records``, ``skip`` and ``release``
    from the store worker. Each side has its own connection.
    """

    torn = None  # nothing is ever torn: a record is in the table or not

    def __init__(
        self,
        uri: str,
        *,
        epoch: int,
        client_name: str,
        connect_timeout: float,
        lease_time: float,
        retry_interval: float,
        keep_bytes: int,
        on_reachable: Callable[[bool], None] = lambda reachable: None,
        on_fenced: Callable[[], None] = lambda: None,
    ) -> None:
        """``on_fenced`` is told, on the writer's thread, when the database refused a record
        because the lease moved on, before ``write`` raises ``Fenced`` (the server steps
        down there and need not return)."""
        self.uri = uri
        self.folder = f"the wiremq_log table at {redact(uri)}"
        self.epoch = epoch
        self._connect = lambda: connect(uri, client_name, connect_timeout, lease_time)
        self._retry_interval = retry_interval
        self._keep_bytes = keep_bytes
        self._on_reachable = on_reachable
        self._on_fenced = on_fenced
        self._writer: Connection | None = None
        self._reader: Connection | None = self._connect()
        self._recent: deque[tuple[int, bytes]] = deque()  # written here, not yet released
        self._recent_bytes = 0
        self._lock = threading.Lock()  # guards _recent
        try:
            first, last = self._query("SELECT min(lsn), max(lsn) FROM wiremq_log", ())[0]
        except StoreError as exc:
            self.close()
            raise StoreOpenError(str(exc)) from exc
        self.first_lsn: int = 1 if first is None else int(first)
        self.last_lsn: int = 0 if last is None else int(last)
        self.durable_lsn = self.last_lsn
        self._next_lsn = 0

    def cut_torn_tail(self) -> None:
        return None

    def start(self, next_lsn: int) -> None:
        """Be ready to write records from ``next_lsn`` on (past every record kept)."""
        if next_lsn <= self.last_lsn:
            raise StoreError(f"record {next_lsn} was written already")
        self._next_lsn = next_lsn

    # -- the committing side --------------------------------------------------------------

    def place(self, payload: Sequence[bytes]) -> LogWrite:
        """The next record, whole (a row holds it as one value); written by ``write``."""
        record = b"".join(payload)
        return LogWrite(self._next_lsn, (record,), -1, 0, len(record))

    def write(self, write: LogWrite) -> None:
        """Make a placed record durable in the table, trying again until the database
        answers; ``Fenced`` if it refused the record (the lease moved on)."""
        failures = 0
        while True:
            try:
                if self._written_before(write.lsn, failures):
                    break
                self._insert(write)
                break
            except psycopg2.errors.UniqueViolation:
                if self._written_before(write.lsn, failures=1):
                    break  # its first INSERT got through after all
                raise self._fenced(write, "another node wrote that record") from None
            except psycopg2.Error as exc:
                if fenced(exc):
                    raise self._fenced(write, first_line(exc)) from exc
                if not lost_connection(exc):
                    raise StoreError(f"cannot write {self.folder}: {first_line(exc)}") from exc
                close_quietly(self._writer)
                self._writer = None
                failures += 1
                if failures == 1:
                    log.warning("dblog.unreachable", lsn=write.lsn, error=first_line(exc))
                    self._on_reachable(False)
                time.sleep(self._retry_interval)
        if failures:
            log.info("dblog.reachable", lsn=write.lsn, tries=failures + 1)
            self._on_reachable(True)

    def _insert(self, write: LogWrite) -> None:
        if self._writer is None:
            self._writer = self._connect_again()
        with self._writer.cursor() as cursor:
            cursor.execute(_INSERT, (write.lsn, self.epoch, write.parts[0]))

    def _written_before(self, lsn: int, failures: int) -> bool:
        """After a failure, whether record ``lsn`` reached the table all the same (asked
        on a new connection): its INSERT may have committed before the reply was lost."""
        if not failures:
            return False
        if self._writer is None:
            self._writer = self._connect_again()
        with self._writer.cursor() as cursor:
            cursor.execute(_FOUND, (lsn,))
            found = cursor.fetchone()
        if found is None:
            return False
        if int(found[0]) != self.epoch:
            raise self._fenced_lsn(lsn, int(found[0]))
        return True

    def _connect_again(self) -> Connection:
        try:
            return self._connect()
        except StoreOpenError as exc:
            raise psycopg2.OperationalError(str(exc)) from exc  # lost: tried again

    def _fenced(self, write: LogWrite, why: str) -> Fenced:
        log.error("dblog.fenced", lsn=write.lsn, epoch=self.epoch, why=why)
        self._on_fenced()
        return Fenced(f"record {write.lsn} of lease epoch {self.epoch} refused: {why}")

    def _fenced_lsn(self, lsn: int, epoch: int) -> Fenced:
        log.error("dblog.fenced", lsn=lsn, epoch=self.epoch, found_epoch=epoch)
        self._on_fenced()
        return Fenced(f"record {lsn} is in the log with lease epoch {epoch}, not {self.epoch}")

    def take_back(self, write: LogWrite, error: OSError) -> StoreError:
        """Nothing to take back: a record is in the table or not (never written in place)."""
        return StoreError(f"cannot write {self.folder}: {error}")

    def written(self, write: LogWrite) -> int:
        """A record is durable: the next one follows it; kept in memory for the catch-up."""
        record = write.parts[0]
        with self._lock:
            self._recent.append((write.lsn, record))
            self._recent_bytes += len(record)
            while self._recent_bytes > self._keep_bytes and len(self._recent) > 1:
                self._recent_bytes -= len(self._recent.popleft()[1])  # read back if needed
        self._next_lsn = write.lsn + 1
        self.durable_lsn = write.lsn
        return write.lsn

    # -- the store worker -----------------------------------------------------------------

    def records(self, after: int, upto: int, max_bytes: int) -> list[tuple[int, bytes]]:
        """The records after LSN ``after`` up to ``upto``, in order, at least one and about
        ``max_bytes`` of them: from memory, or from the table."""
        found: list[tuple[int, bytes]] = []
        size = 0
        with self._lock:
            recent = self._recent
            while recent and recent[0][0] <= after:
                self._recent_bytes -= len(recent.popleft()[1])
            if recent and recent[0][0] == after + 1:
                for lsn, record in recent:
                    if lsn > upto or (found and size >= max_bytes):
                        break
                    found.append((lsn, record))
                    size += len(record)
        if found or after >= upto:
            return found
        return self._read_back(after, upto, max_bytes)

    def _read_back(self, after: int, upto: int, max_bytes: int) -> list[tuple[int, bytes]]:
        """Records after ``after`` from the table, in order, while those before each come
        to less than ``max_bytes`` (so at least one); the LSNs must follow on."""
        rows = self._query(
            "SELECT lsn, record FROM (SELECT lsn, record, "
            "sum(length(record)) OVER (ORDER BY lsn) - length(record) AS before "
            "FROM wiremq_log WHERE lsn > %s AND lsn <= %s) AS log "
            "WHERE before < %s ORDER BY lsn",
            (after, upto, max_bytes),
        )
        found = [(int(lsn), bytes(record)) for lsn, record in rows]
        for expected, (lsn, _) in enumerate(found, after + 1):
            if lsn != expected:
                raise StoreError(f"record {expected} is missing from {self.folder}")
        if not found:
            raise StoreError(f"record {after + 1} is missing from {self.folder}")
        return found

    def skip(self, lsn: int) -> None:
        """Record ``lsn`` was applied from the caller's memory (each read says where it
        starts: nothing to move)."""

    def release(self, upto: int) -> int:
        """Delete the records at or below LSN ``upto`` (every database applied them), while
        the lease is still this node's epoch; returns how many."""
        rows = self._query(
            "WITH gone AS (DELETE FROM wiremq_log WHERE lsn <= %s "
            "AND (SELECT epoch FROM wiremq_lease) = %s RETURNING 1) "
            "SELECT count(*) FROM gone",
            (upto, self.epoch),
        )
        return int(rows[0][0])

    def prepare(self) -> None:
        """Nothing to prepare (no files)."""

    def _query(self, sql: str, args: tuple[object, ...]) -> list[tuple[Any, ...]]:
        """Rows of a query on the store worker's connection; ``StoreError`` if it failed
        (a lost connection is made again at the next query)."""
        try:
            if self._reader is None:
                self._reader = self._connect()
            with self._reader.cursor() as cursor:
                cursor.execute(sql, args)
                return cursor.fetchall()
        except psycopg2.Error as exc:
            if lost_connection(exc):
                close_quietly(self._reader)
                self._reader = None
            raise StoreError(f"{self.folder}: {first_line(exc)}") from exc

    def close(self) -> None:
        close_quietly(self._writer)
        close_quietly(self._reader)
        self._writer = self._reader = None
