"""TransactionManager: held work per connection and transaction, run at COMMIT."""

import pytest

from wiremq.modules.stomp.frames import ProtocolError
from wiremq.modules.transaction import TransactionManager

ALICE, BOB = object(), object()


@pytest.fixture
def manager():
    manager = TransactionManager()
    manager.domains.add("p2p")
    return manager


def test_commit_runs_held_actions_in_order_once(manager):
    done = []
    manager.begin(ALICE, "t1")
    for n in range(3):
        manager.hold(ALICE, "t1", lambda n=n: done.append(n))
    assert done == []
    manager.commit(ALICE, "t1")
    assert done == [0, 1, 2]
    with pytest.raises(ProtocolError, match="unknown transaction"):
        manager.commit(ALICE, "t1")
    assert done == [0, 1, 2]


def test_abort_drops_held_actions(manager):
    done = []
    manager.begin(ALICE, "t1")
    manager.hold(ALICE, "t1", lambda: done.append(1))
    manager.abort(ALICE, "t1")
    with pytest.raises(ProtocolError, match="unknown transaction"):
        manager.commit(ALICE, "t1")
    assert done == []


def test_abort_all_drops_only_that_connections_transactions(manager):
    done = []
    for owner, name in ((ALICE, "t1"), (ALICE, "t2"), (BOB, "t1")):
        manager.begin(owner, name)
        manager.hold(owner, name, lambda owner=owner, name=name: done.append((owner, name)))
    manager.abort_all(ALICE)
    for name in ("t1", "t2"):
        with pytest.raises(ProtocolError):
            manager.check(ALICE, name, "p2p")
    manager.commit(BOB, "t1")
    assert done == [(BOB, "t1")]


def test_transactions_are_per_connection(manager):
    manager.begin(ALICE, "t1")
    manager.check(ALICE, "t1", "p2p")
    with pytest.raises(ProtocolError, match="unknown transaction") as caught:
        manager.check(BOB, "t1", "p2p")
    assert "'t1'" in caught.value.detail


@pytest.mark.parametrize(
    "use",
    [
        lambda m: m.hold(ALICE, "nope", lambda: None),
        lambda m: m.commit(ALICE, "nope"),
        lambda m: m.abort(ALICE, "nope"),
        lambda m: m.check(ALICE, "nope", "p2p"),
    ],
    ids=["hold", "commit", "abort", "check"],
)
def test_unknown_transaction_is_refused(manager, use):
    with pytest.raises(ProtocolError, match="unknown transaction"):
        use(manager)


def test_beginning_twice_is_refused(manager):
    manager.begin(ALICE, "t1")
    with pytest.raises(ProtocolError, match="already begun"):
        manager.begin(ALICE, "t1")


def test_begin_is_refused_when_no_domain_has_transactions():
    with pytest.raises(ProtocolError, match="transactions disabled"):
        TransactionManager().begin(ALICE, "t1")


def test_work_in_a_domain_without_transactions_is_refused(manager):
    manager.begin(ALICE, "t1")
    with pytest.raises(ProtocolError, match="transactions disabled") as caught:
        manager.check(ALICE, "t1", "pubsub")
    assert "pubsub" in caught.value.detail
