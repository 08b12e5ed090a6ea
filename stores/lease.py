"""The lease of an HA pair: which node is the active, judged by the shared database.

Two things say that a node holds the lease, both in PostgreSQL:

- the row of ``wiremq_lease`` (``hadatabase``): its holder, epoch and expiry,
  where the expiry is set and compared by the database's clock (``now()``), so
  that no node's clock decides anything;
- a session advisory lock held by the active's lease connection. PostgreSQL
  releases it the moment that session ends: an active killed (``kill -9``, a
  crash) is seen at a standby's next try, long before its lease runs out.

A standby (``try_take``) takes the lease over, in one transaction that bumps the
epoch and records the takeover in ``wiremq_failover``, when

- there is no lease yet (``first``), or its holder gave it up on a clean stop
  (``released``);
- the lease has run out by the database's clock (``expired``): the active is
  partitioned from the database, or paused (SIGSTOP, a long GC, a frozen VM)
  while its session lives on and keeps the lock;
- or the standby saw, on its current connection, the advisory lock held by the
  very session the lease row names as the active's, and now gets the lock
  itself (``holder-gone``): that session ended while the database stayed up.
  After a database restart every connection is new and has seen nothing, so a
  standby waits for the expiry while the incumbent, reconnected, takes its lock
  again; a standby that gets the lock but may not take over gives it back at
  once.

The active renews the row (``renew``) only while it is still its epoch: an
``UPDATE ... WHERE epoch = mine`` that finds nothing means it was deposed. It
takes the advisory lock whenever it does not hold it (after a takeover by
expiry, or a reconnection), and records which backend holds it. A takeover also
ends the previous holder's database sessions (``pg_terminate_backend``, by
their application name): locks a paused active held in RelStorage are released,
and its writes, already refused by the fencing trigger, fail at once.

All of it is plain blocking psycopg2 for one thread (the server's lease
thread); a lost connection raises ``StoreError`` and the next call reconnects.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg2
import structlog
from psycopg2.extensions import connection as Connection

from .errors import StoreError
from .hadatabase import (
    FENCE_LOCK,
    LEASE_LOCK,
    LOCK_SPACE,
    close_quietly,
    connect,
    first_line,
    install,
    lost_connection,
)
from .storage import redact

log = structlog.get_logger("wiremq.lease")

FIRST, RELEASED, EXPIRED, HOLDER_GONE = "first", "released", "expired", "holder-gone"

_ROW = """
SELECT holder, session, epoch, lock_pid, released, expires <= now()
FROM wiremq_lease
"""
_LOCK_HOLDER = """
SELECT pid FROM pg_locks
WHERE locktype = 'advisory' AND classid = %s AND objid = %s AND objsubid = 2 AND granted
"""
_HISTORY = """
SELECT epoch, node, extract(epoch FROM at), previous, reason
FROM wiremq_failover ORDER BY epoch DESC LIMIT %s
"""


@dataclass(frozen=True, slots=True)
class Takeover:
    """One row of the failover history: ``at`` in seconds since the epoch."""

    epoch: int
    node: str
    at: float
    previous: str | None
    reason: str


@dataclass(frozen=True, slots=True)
class LeaseView:
    """The lease as the database has it, for the console: ``expires_in`` seconds by the
    database's clock (negative once run out; None without a lease)."""

    holder: str | None
    epoch: int
    expires_in: float | None
    released: bool
    history: tuple[Takeover, ...]


@dataclass(frozen=True, slots=True)
class _Row:
    holder: str
    session: str
    epoch: int
    lock_pid: int | None
    released: bool
    expired: bool


class Lease:
    """One node's side of the lease (see the module docstring); one thread at a time.

    ``session`` names this process's connections (their application name),
    ``lease_time`` is ``HA.leasetime``; ``clock`` gives the monotonic time a renewal
    was sent, from which the caller counts its own deadline.
    """

    def __init__(
        self,
        uri: str,
        node: str,
        session: str,
        lease_time: float,
        connect_timeout: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.uri = uri
        self.node = node
        self.session = session
        self.lease_time = lease_time
        self.connect_timeout = connect_timeout
        self.clock = clock
        self.epoch = 0  # the epoch this node holds, once it took the lease
        self._connection: Connection | None = None
        self._locked = False  # this connection holds the advisory lock
        self._watched: int | None = None  # the epoch whose holder's lock this connection saw

    # -- the connection -----------------------------------------------------------------------

    def open(self) -> None:
        """Connect and make the tables if they are missing (``StoreOpenError`` naming the
        URI, its password masked, if that cannot be done)."""
        connection = self._connect()
        try:
            install(connection)
        except psycopg2.Error as exc:
            self._drop()
            raise StoreError(
                f"cannot make the lease's tables at {redact(self.uri)}: {first_line(exc)}"
            ) from exc

    def _connect(self) -> Connection:
        if self._connection is None or self._connection.closed:
            self._connection = connect(
                self.uri, self.session, self.connect_timeout, self.lease_time
            )
            self._locked = False
            self._watched = None  # a new session has seen nothing
        return self._connection

    def _drop(self) -> None:
        close_quietly(self._connection)
        self._connection = None
        self._locked = False
        self._watched = None

    def _run(self, work: Callable[[Connection], object]) -> object:
        """``work`` on the connection (made if needed); a lost connection is dropped and
        becomes a ``StoreError``, as does any other database error (its transaction rolled
        back)."""
        connection = self._connect()
        try:
            return work(connection)
        except psycopg2.Error as exc:
            if lost_connection(exc):
                self._drop()
            raise StoreError(f"the lease at {redact(self.uri)}: {first_line(exc)}") from exc
        finally:
            if not connection.closed and not connection.autocommit:
                connection.rollback()
                connection.autocommit = True

    def close(self) -> None:
        self._drop()

    # -- a standby --------------------------------------------------------------------------

    def try_take(self) -> str | None:
        """Take the lease over if the rules allow (module docstring); the reason if it was
        taken (``self.epoch`` is then this node's epoch), else None."""
        reason = self._run(self._try_take)
        assert reason is None or isinstance(reason, str)
        return reason

    def _try_take(self, connection: Connection) -> str | None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", (LOCK_SPACE, LEASE_LOCK))
            self._locked = bool(cursor.fetchone()[0])  # type: ignore[index]
            if not self._locked:
                cursor.execute(_LOCK_HOLDER, (LOCK_SPACE, LEASE_LOCK))
                found = cursor.fetchone()
                cursor.execute(_ROW)
                row = _row(cursor.fetchone())
                if row is not None and found is not None and found[0] == row.lock_pid:
                    self._watched = row.epoch  # the active's own session holds the lock
                if row is None or not (row.expired or row.released):
                    return None
            connection.autocommit = False
            # The fence lock first: the records being written under the lease's epoch
            # are committed, and those that come after wait for this transaction.
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_SPACE, FENCE_LOCK))
            cursor.execute(_ROW + " FOR UPDATE")
            row = _row(cursor.fetchone())
            reason = self._reason(row)
            if reason is None:
                connection.rollback()
                connection.autocommit = True
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", (LOCK_SPACE, LEASE_LOCK))
                self._locked = False  # the incumbent takes it again
                return None
            epoch = 1 if row is None else row.epoch + 1
            lock_pid = "pg_backend_pid()" if self._locked else "NULL"
            cursor.execute(
                f"""
                INSERT INTO wiremq_lease (holder, session, epoch, expires, since, lock_pid)
                VALUES (%s, %s, %s, now() + %s * interval '1 second', now(), {lock_pid})
                ON CONFLICT (id) DO UPDATE SET holder = excluded.holder,
                    session = excluded.session, epoch = excluded.epoch,
                    expires = excluded.expires, since = excluded.since,
                    lock_pid = excluded.lock_pid, released = false
                """,
                (self.node, self.session, epoch, self.lease_time),
            )
            cursor.execute(
                "INSERT INTO wiremq_failover (epoch, node, at, previous, reason) "
                "VALUES (%s, %s, now(), %s, %s)",
                (epoch, self.node, None if row is None else row.holder, reason),
            )
            connection.commit()
            connection.autocommit = True
            self.epoch = epoch
            if row is not None and reason != RELEASED:  # a released holder is stopping
                self._end_sessions(cursor, row.session)
        log.info(
            "lease.taken",
            node=self.node,
            epoch=epoch,
            reason=reason,
            previous=None if row is None else row.holder,
        )
        return reason

    def _reason(self, row: _Row | None) -> str | None:
        """Why this node may take the lease over now (it holds the row locked), if it may."""
        if row is None:
            return FIRST
        if row.released:
            return RELEASED
        if row.expired:
            return EXPIRED
        if self._locked and self._watched == row.epoch:
            return HOLDER_GONE
        return None

    def _end_sessions(self, cursor: psycopg2.extensions.cursor, session: str) -> None:
        """End the previous holder's database sessions, waiting for each to end at most
        the lease's length (PostgreSQL 14 or later)."""
        if session == self.session:
            return
        try:
            cursor.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, %s)) "
                "FROM pg_stat_activity WHERE application_name = %s AND pid <> pg_backend_pid()",
                (round(self.lease_time * 1000), session),
            )
            ended = cursor.fetchone()[0]  # type: ignore[index]
        except psycopg2.Error as exc:
            if lost_connection(exc):
                raise
            log.warning("lease.sessions_not_ended", session=session, error=first_line(exc))
            return
        log.info("lease.sessions_ended", session=session, sessions=ended)

    # -- the active -------------------------------------------------------------------------

    def renew(self) -> float | None:
        """Renew the lease for ``lease_time`` by the database's clock. Returns the
        monotonic time the renewal was sent (the caller's deadline counts from it), or
        None if the lease is not this node's any more (deposed). ``StoreError`` if the
        database could not be asked."""
        result = self._run(self._renew)
        assert result is None or isinstance(result, float)
        return result

    def _renew(self, connection: Connection) -> float | None:
        with connection.cursor() as cursor:
            if not self._locked:
                cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", (LOCK_SPACE, LEASE_LOCK))
                self._locked = bool(cursor.fetchone()[0])  # type: ignore[index]
            sent = self.clock()
            cursor.execute(
                "UPDATE wiremq_lease SET expires = now() + %s * interval '1 second', "
                "lock_pid = CASE WHEN %s THEN pg_backend_pid() ELSE lock_pid END "
                "WHERE epoch = %s AND session = %s AND NOT released",
                (self.lease_time, self._locked, self.epoch, self.session),
            )
            if cursor.rowcount != 1:
                log.warning("lease.lost", node=self.node, epoch=self.epoch)
                return None
            return sent

    def release(self) -> None:
        """Give the lease up (a clean stop): a standby takes over at its next try."""
        if not self.epoch:
            return

        def release(connection: Connection) -> None:
            with connection.cursor() as cursor:
                cursor.execute(
                    "UPDATE wiremq_lease SET released = true, expires = now() "
                    "WHERE epoch = %s AND session = %s",
                    (self.epoch, self.session),
                )
                cursor.execute("SELECT pg_advisory_unlock_all()")
            self._locked = False

        self._run(release)
        log.info("lease.released", node=self.node, epoch=self.epoch)

    # -- anyone -----------------------------------------------------------------------------

    def view(self, history: int) -> LeaseView:
        """The lease and the last ``history`` takeovers, newest first."""

        def read(connection: Connection) -> LeaseView:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT holder, epoch, extract(epoch FROM expires - now()), released "
                    "FROM wiremq_lease"
                )
                row = cursor.fetchone()
                cursor.execute(_HISTORY, (history,))
                takeovers = tuple(
                    Takeover(int(e), n, float(at), p, r) for e, n, at, p, r in cursor.fetchall()
                )
            if row is None:
                return LeaseView(None, 0, None, False, takeovers)
            holder, epoch, expires_in, released = row
            return LeaseView(holder, int(epoch), float(expires_in), bool(released), takeovers)

        found = self._run(read)
        assert isinstance(found, LeaseView)
        return found


def _row(found: tuple[Any, ...] | None) -> _Row | None:
    if found is None:
        return None
    holder, session, epoch, lock_pid, released, expired = found
    return _Row(
        str(holder),
        str(session),
        int(epoch),
        None if lock_pid is None else int(lock_pid),
        bool(released),
        bool(expired),
    )
