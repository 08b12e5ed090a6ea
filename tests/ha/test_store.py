"""The message store on the shared database: recovered from PostgreSQL alone by the node
that takes over, and safe from a deposed active's catch-up."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator

import pytest

from tests.defaults import WAL_OPTIONS, location
from tests.stores.store_fixtures import message, send, stored_ids
from wiremq.stores.api import StoreTransaction
from wiremq.stores.dblog import DatabaseLog
from wiremq.stores.errors import StoreError
from wiremq.stores.lease import EXPIRED, FIRST, HOLDER_GONE, Lease
from wiremq.stores.messagestore import WalStore
from wiremq.stores.storage import Location

LEASE = 1.0
_runs = itertools.count(1)


class Node:
    """One node's lease and, once it holds it, its store on the shared database."""

    def __init__(self, uri: str, name: str) -> None:
        self.uri = uri
        self.lease = Lease(uri, name, f"wiremq/{name}-{next(_runs)}", LEASE, 5.0)
        self.lease.open()
        self.store: WalStore | None = None

    def open_store(self) -> WalStore:
        assert self.lease.epoch, "only the lease's holder opens the store"
        where = location(self.uri)
        named = Location(where.uri, where.connect_timeout, where.cache_size, self.lease.session)
        log = DatabaseLog(
            self.uri,
            epoch=self.lease.epoch,
            client_name=self.lease.session,
            connect_timeout=5.0,
            lease_time=LEASE,
            retry_interval=0.05,
            keep_bytes=1 << 20,
        )
        self.store = WalStore(log, named, named, **WAL_OPTIONS)
        return self.store

    def crash(self) -> None:
        """Let go of everything without applying anything, as a killed process would."""
        if self.store is not None:
            self.store._close_all()
            self.store = None
        self.lease.close()

    def close(self) -> None:
        if self.store is not None:
            self.store._close_all()
        self.lease.close()


@pytest.fixture
def nodes(database: str) -> Iterator[tuple[Node, Node]]:
    a, b = Node(database, "a"), Node(database, "b")
    yield a, b
    a.close()
    b.close()


def take_over(node: Node) -> str:
    """Try every 50 ms until ``node`` takes the lease; why it could."""
    for _ in range(200):
        found = node.lease.try_take()
        if found is not None:
            return found
        time.sleep(0.05)
    raise AssertionError(f"{node.lease.node} never took the lease over")


def test_the_node_taking_over_recovers_every_committed_change_from_the_database(nodes) -> None:
    a, b = nodes
    assert take_over(a) == FIRST
    store = a.open_store()
    send(store, message("m1"), message("m2"), message("t1", "/topic/t"))
    (result,) = store.commit([StoreTransaction(subscribes=((("c", "d"), "/topic/t", ""),))])
    send(store, message("t2", "/topic/t"), message("m3"))
    send(store, message("m4"))
    store.commit([StoreTransaction(removals=(("/queue/a", 2),))])
    store.catch_up(5.0)  # some of it reaches the databases, the rest only the log
    send(store, message("m5"))
    store.commit([StoreTransaction(acknowledgements=((("c", "d"), 0),))])
    a.crash()

    assert take_over(b) in (HOLDER_GONE, EXPIRED)
    recovered = b.open_store()
    assert stored_ids(recovered) == ["m1", "m3", "m4", "m5"]
    assert stored_ids(recovered, "/topic/t") == ["t2"]
    assert [(s.client_id, s.name, s.topic) for s in recovered.subscriptions()] == [
        ("c", "d", "/topic/t")
    ]
    # It goes on where the log ended: new records after the recovered ones.
    send(recovered, message("m6"))
    recovered.catch_up(5.0)
    assert stored_ids(recovered) == ["m1", "m3", "m4", "m5", "m6"]


def test_a_deposed_actives_catch_up_changes_nothing(nodes) -> None:
    a, b = nodes
    assert take_over(a) == FIRST
    old = a.open_store()
    send(old, message("m1"), message("m2"), message("m3"))
    old.catch_up(5.0)
    old.commit([StoreTransaction(removals=(("/queue/a", 1),))])  # in the log only
    # a is paused past its lease; b takes over, recovers, and goes on.
    assert take_over(b) == EXPIRED
    new = b.open_store()
    assert stored_ids(new) == ["m2", "m3"]
    send(new, message("m4"))
    new.catch_up(5.0)
    # a wakes up and runs its catch-up: the databases are no longer where it left them,
    # so it must not apply its records (nor move their applied position back) over b's.
    for _ in range(2):
        with pytest.raises(StoreError, match="brought to record 3 by another node"):
            old.catch_up(5.0)
    with pytest.raises(StoreError):
        send(old, message("late"))  # refused by the database, not written
    assert stored_ids(new) == ["m2", "m3", "m4"]
    b.crash()
    c = Node(b.uri, "c")
    try:
        assert take_over(c) == EXPIRED
        assert stored_ids(c.open_store()) == ["m2", "m3", "m4"]
    finally:
        c.close()
