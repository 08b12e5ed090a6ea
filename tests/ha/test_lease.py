"""The lease's rules and the fencing trigger, against a real PostgreSQL database."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator

import psycopg2
import pytest

from wiremq.stores.dblog import DatabaseLog
from wiremq.stores.errors import StoreError
from wiremq.stores.hadatabase import FENCE_LOCK, LOCK_SPACE, Fenced
from wiremq.stores.lease import EXPIRED, FIRST, HOLDER_GONE, RELEASED, Lease

LEASE = 1.0  # seconds: short, so that expiries come soon
_runs = itertools.count(1)


@pytest.fixture
def leases(database: str) -> Iterator[Callable[[str], Lease]]:
    """Make nodes' leases on the test's database; all closed afterwards."""
    made: list[Lease] = []

    def make(node: str) -> Lease:
        lease = Lease(database, node, f"wiremq/{node}-{next(_runs)}", LEASE, 5.0)
        lease.open()
        made.append(lease)
        return lease

    yield make
    for lease in made:
        lease.close()


def until(condition: Callable[[], object], timeout: float = 10.0) -> object:
    """Ask ``condition`` every 50 ms until it is true; its value (fails after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.05)
    return value


def query(uri: str, sql: str, *args: object) -> list[tuple[object, ...]]:
    connection = psycopg2.connect(uri)
    try:
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute(sql, args)
            return cursor.fetchall() if cursor.description else []
    finally:
        connection.close()


def test_the_first_node_takes_the_lease_and_the_others_wait(leases) -> None:
    a, b = leases("a"), leases("b")
    assert a.try_take() == FIRST and a.epoch == 1
    assert b.try_take() is None and b.try_take() is None
    view = b.view(10)
    assert (view.holder, view.epoch, view.released) == ("a", 1, False)
    assert view.expires_in is not None and 0 < view.expires_in <= LEASE
    assert [(t.epoch, t.node, t.previous, t.reason) for t in view.history] == [
        (1, "a", None, FIRST)
    ]


def test_two_nodes_starting_together_never_both_take_the_lease(leases) -> None:
    nodes = [leases(name) for name in "abcd"]
    reasons: dict[str, str | None] = {}
    start = threading.Barrier(len(nodes))

    def race(lease: Lease) -> None:
        start.wait()
        reasons[lease.node] = lease.try_take()

    threads = [threading.Thread(target=race, args=(n,)) for n in nodes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r for r in reasons.values() if r is not None) == [FIRST]
    assert len(nodes[0].view(10).history) == 1


def test_a_standby_that_saw_the_active_hold_the_lock_takes_over_when_its_session_ends(
    leases,
) -> None:
    a, b = leases("a"), leases("b")
    assert a.try_take() == FIRST
    assert a.renew() is not None  # the active holds its lock (taken with the lease)
    assert b.try_take() is None  # sees a's session hold the lock
    a.close()  # the active's session ends (its process died)
    started = time.monotonic()
    assert until(b.try_take) == HOLDER_GONE
    assert time.monotonic() - started < LEASE  # not waited for the expiry
    assert b.epoch == 2
    assert [(t.epoch, t.node, t.previous, t.reason) for t in b.view(1).history] == [
        (2, "b", "a", HOLDER_GONE)
    ]


def test_after_the_database_lost_every_session_a_standby_waits_and_the_incumbent_renews(
    leases, database: str
) -> None:
    a, b = leases("a"), leases("b")
    assert a.try_take() == FIRST
    assert b.try_take() is None
    # Every session ends, as in a database restart: both connections are new afterwards.
    query(
        database,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE application_name LIKE 'wiremq/%%'",
    )
    with pytest.raises(StoreError):
        b.try_take()  # its connection is gone
    assert b.try_take() is None  # a new session has seen nothing: it waits for the expiry
    with pytest.raises(StoreError):
        a.renew()
    assert a.renew() is not None  # the incumbent, reconnected, renews and takes its lock
    assert b.try_take() is None
    assert b.view(1).holder == "a"


def test_an_expired_lease_is_taken_over_without_the_lock_and_the_old_holder_is_deposed(
    leases, database: str
) -> None:
    a, b = leases("a"), leases("b")
    assert a.try_take() == FIRST  # holds the lock, then stops renewing: paused
    assert b.try_take() is None
    assert until(b.try_take, timeout=LEASE * 5) == EXPIRED
    assert b.epoch == 2
    # The takeover ended the paused holder's sessions, releasing what they held.
    left = query(
        database, "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", a.session
    )
    assert left == [(0,)]
    with pytest.raises(StoreError):
        a.renew()  # its session was ended
    assert a.renew() is None  # reconnected: the lease is not its own any more
    assert b.renew() is not None  # and b takes the lock that a's end released
    assert b.try_take() is None
    c = leases("c")
    assert c.try_take() is None


def test_a_released_lease_is_taken_over_at_the_next_try(leases) -> None:
    a, b = leases("a"), leases("b")
    assert a.try_take() == FIRST
    a.release()
    assert b.try_take() == RELEASED
    assert b.view(1).history[0].previous == "a"
    assert a.renew() is None


def writer(database: str, epoch: int, **options: object) -> DatabaseLog:
    return DatabaseLog(
        database,
        epoch=epoch,
        client_name=f"wiremq/log-{epoch}",
        connect_timeout=5.0,
        lease_time=LEASE,
        retry_interval=0.05,
        keep_bytes=1 << 20,
        **options,  # type: ignore[arg-type]
    )


def record(log: DatabaseLog, lsn: int, data: bytes) -> None:
    log.start(lsn)
    write = log.place([data])
    log.write(write)
    log.written(write)


def test_the_database_refuses_a_record_of_a_deposed_epoch(leases, database: str) -> None:
    a, b = leases("a"), leases("b")
    assert a.try_take() == FIRST
    told: list[str] = []
    old = writer(database, 1, on_fenced=lambda: told.append("fenced"))
    record(old, 1, b"one")
    a.release()
    assert b.try_take() == RELEASED
    with pytest.raises(Fenced, match="lease epoch 1 refused"):
        record(old, 2, b"two")
    assert told == ["fenced"]
    assert old.release(1) == 0  # a deposed node deletes nothing either
    new = writer(database, 2)
    record(new, 2, b"two, by b")
    rows = query(database, "SELECT lsn, epoch, convert_from(record, 'UTF8') FROM wiremq_log")
    assert sorted(rows) == [(1, 1, "one"), (2, 2, "two, by b")]
    assert new.records(1, 2, 1 << 20) == [(2, b"two, by b")]  # its own, from memory
    assert new.records(0, 2, 1 << 20) == [(1, b"one"), (2, b"two, by b")]  # read back
    assert new.records(0, 2, 1) == [(1, b"one")]  # at least one, then within the bytes
    assert new.release(1) == 1
    old.close()
    new.close()


def test_a_takeover_waits_for_a_record_being_written_and_refuses_those_after_it(
    leases, database: str
) -> None:
    a, b = leases("a"), leases("b")
    assert a.try_take() == FIRST
    a.release()
    slow = psycopg2.connect(database)  # a record of epoch 1 in flight: not committed yet
    slow.cursor().execute("INSERT INTO wiremq_log VALUES (1, 1, 'in flight')")
    taken: list[str | None] = []
    takeover = threading.Thread(target=lambda: taken.append(b.try_take()))
    takeover.start()
    takeover.join(0.5)
    assert takeover.is_alive(), "the takeover did not wait for the record being written"
    slow.commit()
    takeover.join(10)
    assert taken == [RELEASED]
    with pytest.raises(psycopg2.Error) as refused:
        slow.cursor().execute("INSERT INTO wiremq_log VALUES (2, 1, 'too late')")
    assert refused.value.pgcode == "WQ001"
    slow.close()
    assert query(database, "SELECT lsn FROM wiremq_log") == [(1,)]


def test_a_record_written_during_a_takeover_waits_for_it_and_is_refused(
    leases, database: str
) -> None:
    a = leases("a")
    assert a.try_take() == FIRST
    takeover = psycopg2.connect(database)  # a takeover in progress: not committed yet
    with takeover.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_SPACE, FENCE_LOCK))
        cursor.execute("UPDATE wiremq_lease SET epoch = 2")
    outcome: list[object] = []
    log = writer(database, 1)
    write = threading.Thread(target=lambda: outcome.append(_try(lambda: record(log, 1, b"x"))))
    write.start()
    write.join(0.5)
    assert write.is_alive(), "the record did not wait for the takeover"
    takeover.commit()
    write.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], Fenced)
    takeover.close()
    log.close()
    assert query(database, "SELECT count(*) FROM wiremq_log") == [(0,)]


def _try(action: Callable[[], object]) -> object:
    try:
        return action()
    except Exception as error:
        return error


def test_a_record_whose_connection_died_is_found_by_its_lsn_not_written_twice(
    leases, database: str
) -> None:
    a = leases("a")
    assert a.try_take() == FIRST
    reachable: list[bool] = []
    log = writer(database, 1, on_reachable=reachable.append)
    record(log, 1, b"one")
    # Its connection dies: the next record is written on a new one.
    query(
        database,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE application_name = 'wiremq/log-1'",
    )
    record(log, 2, b"two")
    assert reachable == [False, True]
    # A record that reached the table before its reply was lost is not written again.
    query(database, "INSERT INTO wiremq_log VALUES (3, 1, 'three')")
    record(log, 3, b"three")
    assert query(database, "SELECT lsn FROM wiremq_log ORDER BY lsn") == [(1,), (2,), (3,)]
    # One that another epoch wrote means this node was deposed.
    query(database, "UPDATE wiremq_lease SET epoch = 2")
    query(database, "INSERT INTO wiremq_log VALUES (4, 2, 'by another')")
    with pytest.raises(Fenced):
        record(log, 4, b"four")
    log.close()
