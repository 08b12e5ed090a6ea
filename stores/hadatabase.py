"""The database an HA pair shares: its connections, and the tables wiremq keeps beside
RelStorage's.

The queue store's PostgreSQL database (``PersQueueFileStore.storageuri``) holds,
next to RelStorage's tables:

- ``wiremq_lease``: one row, the lease: who holds it (``holder``, the node's
  name, and ``session``, the application name of its process's connections),
  its ``epoch`` (one more at every takeover), when it ends (``expires``, by the
  database's clock, never a node's), the backend of the holder's connection
  that holds the advisory lock (``lock_pid``), and whether its holder gave it
  up on a clean stop (``released``);
- ``wiremq_failover``: one row per takeover (epoch, node, when, the previous
  holder, why), for the console;
- ``wiremq_log``: the log records of the active (lsn, the writer's epoch, the
  record), the durability point in HA mode (``dblog.DatabaseLog``);

and a trigger on ``wiremq_log`` that refuses, in the writing transaction
itself, a record whose epoch is not the lease's (SQLSTATE ``WQ001``). It takes
the fence lock shared (a transaction-level advisory lock) before it reads the
lease's epoch, and a takeover takes it exclusively before it bumps the epoch:
the takeover waits for the records being written, and a record written after
it waits for the takeover's commit and then reads the new epoch (a volatile
function's query takes a fresh snapshot). That is what fences a deposed
active: not its own clock, the database. The lock rather than reading the row
``FOR SHARE``: the same order, without a row lock written (and WAL-logged) for
every record or renewals of the lease waiting for records being written
(measured in docs/architecture.md, "The log in the database").

``install`` makes them if they are missing (the first node to start does, under
a transaction-level advisory lock so that two starting together do not race).
"""

from __future__ import annotations

import contextlib
from urllib.parse import urlsplit, urlunsplit

import psycopg2
import psycopg2.errors
from psycopg2.extensions import connection as Connection
from psycopg2.extensions import make_dsn, parse_dsn

from .errors import StoreError, StoreOpenError
from .storage import redact

FENCED = "WQ001"  # SQLSTATE of a write refused because the lease moved on
LOCK_SPACE = 0x776D71  # "wmq": the advisory locks' first key (RelStorage uses one-key locks)
LEASE_LOCK = 1  # the lease's session lock: held by the active's lease connection
INSTALL_LOCK = 2  # the schema's transaction lock
FENCE_LOCK = 3  # shared by each log record's transaction, exclusive for a takeover's

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS wiremq_lease (
    id boolean PRIMARY KEY DEFAULT true CHECK (id),
    holder text NOT NULL,
    session text NOT NULL,
    epoch bigint NOT NULL,
    expires timestamptz NOT NULL,
    since timestamptz NOT NULL,
    lock_pid integer,
    released boolean NOT NULL DEFAULT false
);
CREATE TABLE IF NOT EXISTS wiremq_failover (
    epoch bigint PRIMARY KEY,
    node text NOT NULL,
    at timestamptz NOT NULL,
    previous text,
    reason text NOT NULL
);
CREATE TABLE IF NOT EXISTS wiremq_log (
    lsn bigint PRIMARY KEY,
    epoch bigint NOT NULL,
    record bytea NOT NULL
);
CREATE OR REPLACE FUNCTION wiremq_fence() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    current bigint;
BEGIN
    PERFORM pg_advisory_xact_lock_shared({LOCK_SPACE}, {FENCE_LOCK});
    SELECT epoch INTO current FROM wiremq_lease;
    IF current IS DISTINCT FROM NEW.epoch THEN
        RAISE EXCEPTION 'wiremq: a log record of lease epoch % refused: the lease is at epoch %',
            NEW.epoch, current USING ERRCODE = '{FENCED}';
    END IF;
    RETURN NEW;
END
$$;
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_trigger
        WHERE tgname = 'wiremq_fence' AND tgrelid = 'wiremq_log'::regclass
    ) THEN
        CREATE TRIGGER wiremq_fence BEFORE INSERT OR UPDATE ON wiremq_log
            FOR EACH ROW EXECUTE FUNCTION wiremq_fence();
    END IF;
END
$$;
"""


class Fenced(StoreError):
    """The database refused a write: the lease moved on to another epoch (a takeover)."""


def database_dsn(uri: str, client_name: str, connect_timeout: float, lease_time: float) -> str:
    """libpq's connection string for ``uri``: named ``client_name`` (so that a node
    taking over can end a deposed active's sessions), waiting at most ``connect_timeout``
    to connect, and giving up a connection whose peer stops answering within about
    ``lease_time`` (TCP keepalives and ``tcp_user_timeout``), so that nothing hangs for
    minutes on a vanished database."""
    parts = urlsplit(uri)
    settings = parse_dsn(urlunsplit(parts._replace(scheme="postgresql")))
    settings.setdefault("connect_timeout", str(max(1, round(connect_timeout))))
    settings["application_name"] = client_name
    probe = max(1, round(lease_time / 4))
    settings.update(
        keepalives="1",
        keepalives_idle=str(probe),
        keepalives_interval=str(probe),
        keepalives_count="3",
        tcp_user_timeout=str(round(lease_time * 1000)),
    )
    return str(make_dsn(**settings))


def connect(uri: str, client_name: str, connect_timeout: float, lease_time: float) -> Connection:
    """An autocommit connection to the database of ``uri``; ``StoreOpenError`` naming the
    URI (its password masked) if there is none."""
    try:
        connection = psycopg2.connect(database_dsn(uri, client_name, connect_timeout, lease_time))
    except psycopg2.Error as exc:
        raise StoreOpenError(f"cannot use PostgreSQL at {redact(uri)}: {first_line(exc)}") from exc
    connection.autocommit = True
    return connection


def install(connection: Connection) -> None:
    """Make the lease, failover and log tables and the fencing trigger if missing."""
    connection.autocommit = False
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_SPACE, INSTALL_LOCK))
            cursor.execute(SCHEMA)
        connection.commit()
    except BaseException:
        connection.rollback()
        raise
    finally:
        connection.autocommit = True


_TRY_AGAIN = (
    "08",  # connection exceptions
    "57P",  # the server shutting down, restarting, or its backend terminated
    "25006",  # a read-only transaction: a primary demoted in a failover of PostgreSQL
    "53300",  # too many connections
)


def lost_connection(exc: BaseException) -> bool:
    """Whether ``exc`` means this connection cannot serve (try again on a new one), rather
    than an answer to what was asked."""
    if isinstance(exc, psycopg2.InterfaceError):
        return True
    if isinstance(exc, psycopg2.Error):
        code = exc.pgcode or ""
        # No code: the socket failed (an OperationalError without an answer).
        return (not code and isinstance(exc, psycopg2.OperationalError)) or code.startswith(
            _TRY_AGAIN
        )
    return False


def fenced(exc: BaseException) -> bool:
    """Whether ``exc`` is the fencing trigger's refusal."""
    return isinstance(exc, psycopg2.Error) and exc.pgcode == FENCED


def first_line(exc: BaseException) -> str:
    """The first line of a database error, for one-line messages."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def close_quietly(connection: Connection | None) -> None:
    if connection is not None:
        with contextlib.suppress(psycopg2.Error):
            connection.close()
