"""TransactionManager: held work per connection and transaction, handed over at COMMIT."""

import pytest

from tests.defaults import BOUNDS
from wiremq.modules.errors import Refused
from wiremq.modules.transaction import TransactionManager

ALICE, BOB = object(), object()


@pytest.fixture
def manager():
    manager = TransactionManager(BOUNDS.maxtransactions)
    manager.modules["p2p"] = object()  # a pipeline with a transaction module
    return manager


def test_take_hands_over_held_messages_and_acks_in_order_once(manager):
    manager.begin(ALICE, "t1")
    for n in range(3):
        manager.hold(ALICE, "t1", f"m{n}")
        manager.hold_ack(ALICE, "t1", lambda n=n: n)
    taken = manager.take(ALICE, "t1")
    assert taken.messages == ["m0", "m1", "m2"]
    assert [ack() for ack in taken.acks] == [0, 1, 2]
    with pytest.raises(Refused, match="unknown transaction"):
        manager.take(ALICE, "t1")


def test_abort_drops_what_is_held(manager):
    manager.begin(ALICE, "t1")
    manager.hold(ALICE, "t1", "m")
    manager.abort(ALICE, "t1")
    with pytest.raises(Refused, match="unknown transaction"):
        manager.take(ALICE, "t1")


def test_abort_all_drops_only_that_connections_transactions(manager):
    for owner, name in ((ALICE, "t1"), (ALICE, "t2"), (BOB, "t1")):
        manager.begin(owner, name)
        manager.hold(owner, name, (owner, name))
    manager.abort_all(ALICE)
    for name in ("t1", "t2"):
        with pytest.raises(Refused):
            manager.check(ALICE, name, "p2p")
    assert manager.take(BOB, "t1").messages == [(BOB, "t1")]


def test_transactions_are_per_connection(manager):
    manager.begin(ALICE, "t1")
    manager.check(ALICE, "t1", "p2p")
    with pytest.raises(Refused, match="unknown transaction") as caught:
        manager.check(BOB, "t1", "p2p")
    assert "'t1'" in caught.value.detail


@pytest.mark.parametrize(
    "use",
    [
        lambda m: m.hold(ALICE, "nope", "m"),
        lambda m: m.hold_ack(ALICE, "nope", lambda: None),
        lambda m: m.take(ALICE, "nope"),
        lambda m: m.abort(ALICE, "nope"),
        lambda m: m.check(ALICE, "nope", "p2p"),
    ],
    ids=["hold", "hold_ack", "take", "abort", "check"],
)
def test_unknown_transaction_is_refused(manager, use):
    with pytest.raises(Refused, match="unknown transaction"):
        use(manager)


def test_beginning_twice_is_refused(manager):
    manager.begin(ALICE, "t1")
    with pytest.raises(Refused, match="already begun"):
        manager.begin(ALICE, "t1")


def test_begin_is_refused_when_no_domain_has_transactions():
    with pytest.raises(Refused, match="transactions disabled"):
        TransactionManager(BOUNDS.maxtransactions).begin(ALICE, "t1")


def test_work_in_a_domain_without_transactions_is_refused(manager):
    manager.begin(ALICE, "t1")
    with pytest.raises(Refused, match="transactions disabled") as caught:
        manager.check(ALICE, "t1", "pubsub")
    assert "pubsub" in caught.value.detail
