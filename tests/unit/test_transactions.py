"""TransactionManager: held work per connection and transaction, handed over at COMMIT."""

import pytest

from tests.defaults import BOUNDS, TRANSACTION_MEMORY
from wiremq.config.groups import TransactionMemorySettings
from wiremq.modules.errors import Refused
from wiremq.modules.message import Message
from wiremq.modules.pipeline.transaction_manager import TransactionManager

ALICE, BOB = object(), object()


def message(text: str, size: int = 10) -> Message:
    return Message(text, "/queue/a", {}, b"x" * size)


@pytest.fixture
def manager():
    manager = TransactionManager(BOUNDS.maxtransactions, TRANSACTION_MEMORY, lambda: 0.0)
    manager.modules["p2p"] = object()  # a pipeline with a transaction module
    return manager


def test_take_hands_over_held_messages_and_acks_in_order_once(manager):
    manager.begin(ALICE, "t1")
    held = [message(f"m{n}") for n in range(3)]
    for n, m in enumerate(held):
        manager.hold(ALICE, "t1", m)
        manager.hold_ack(ALICE, "t1", lambda n=n: n)
    taken = manager.take(ALICE, "t1")
    assert taken.messages == held
    assert [ack() for ack in taken.acks] == [0, 1, 2]
    with pytest.raises(Refused, match="unknown transaction"):
        manager.take(ALICE, "t1")


def test_abort_drops_what_is_held(manager):
    manager.begin(ALICE, "t1")
    manager.hold(ALICE, "t1", message("m"))
    manager.abort(ALICE, "t1")
    with pytest.raises(Refused, match="unknown transaction"):
        manager.take(ALICE, "t1")


def test_abort_all_drops_only_that_connections_transactions(manager):
    bobs = message("bob's")
    for owner, name in ((ALICE, "t1"), (ALICE, "t2"), (BOB, "t1")):
        manager.begin(owner, name)
        manager.hold(owner, name, bobs if owner is BOB else message("alice's"))
    manager.abort_all(ALICE)
    for name in ("t1", "t2"):
        with pytest.raises(Refused):
            manager.check(ALICE, name, "p2p")
    assert manager.take(BOB, "t1").messages == [bobs]


def test_transactions_are_per_connection(manager):
    manager.begin(ALICE, "t1")
    manager.check(ALICE, "t1", "p2p")
    with pytest.raises(Refused, match="unknown transaction") as caught:
        manager.check(BOB, "t1", "p2p")
    assert "'t1'" in caught.value.detail


@pytest.mark.parametrize(
    "use",
    [
        lambda m: m.hold(ALICE, "nope", message("m")),
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
        TransactionManager(BOUNDS.maxtransactions, TRANSACTION_MEMORY, lambda: 0.0).begin(
            ALICE, "t1"
        )


def test_work_in_a_domain_without_transactions_is_refused(manager):
    manager.begin(ALICE, "t1")
    with pytest.raises(Refused, match="transactions disabled") as caught:
        manager.check(ALICE, "t1", "pubsub")
    assert "pubsub" in caught.value.detail


class Owner:
    """A connection as the transaction manager sees it: told of discards, stopped."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.told: list[tuple[str, Refused]] = []
        self.stops: set[object] = set()

    def transaction_discarded(self, name: str, refusal: Refused) -> None:
        self.told.append((name, refusal))

    def stop_reading(self, reason: object) -> None:
        self.stops.add(reason)

    def start_reading(self, reason: object) -> None:
        self.stops.discard(reason)

    def __repr__(self) -> str:
        return self.name


def limited(limit: int, strategy: str = "MAXBYTES", order: str = "MIXEDFIRSTSTANDARD"):
    clock = iter(range(1000))
    manager = TransactionManager(
        BOUNDS.maxtransactions,
        TransactionMemorySettings(limit, strategy, order),
        lambda: float(next(clock)),
    )
    manager.modules["p2p"] = object()
    return manager


def test_past_the_limit_the_largest_transaction_is_discarded_and_its_owner_told():
    manager = limited(1000)
    alice, bob = Owner("alice"), Owner("bob")
    manager.begin(alice, "big")
    manager.begin(bob, "small")
    manager.hold(alice, "big", message("a1", 600))
    manager.hold(bob, "small", message("b1", 300))
    assert manager.memory.total == 900 and not alice.told
    manager.hold(bob, "small", message("b2", 200))  # 1100 > 1000: the largest goes
    assert manager.memory.total == 500
    assert [name for name, _ in alice.told] == ["big"] and not bob.told
    refusal = alice.told[0][1]
    assert refusal.message == "transaction discarded"
    assert "'big'" in refusal.detail and "MAXBYTES" in refusal.detail and "1100" in refusal.detail
    manager.hold(alice, "big", message("a2", 600))  # a discarded transaction holds nothing
    assert manager.memory.total == 500
    with pytest.raises(Refused) as caught:
        manager.take(alice, "big")  # its COMMIT fails, naming it and why
    assert caught.value is refusal
    with pytest.raises(Refused, match="unknown transaction"):
        manager.take(alice, "big")  # and it is over
    assert [m.message_id for m in manager.take(bob, "small").messages] == ["b1", "b2"]
    assert manager.memory.total == 0
    assert manager.memory.state()["discards"] == {"MAXBYTES": 1}


def test_an_aborted_discarded_transaction_just_ends():
    manager = limited(100, "ALL")
    alice = Owner("alice")
    manager.begin(alice, "t")
    manager.hold(alice, "t", message("a", 200))
    assert alice.told and manager.memory.total == 0
    manager.abort(alice, "t")
    with pytest.raises(Refused, match="unknown transaction"):
        manager.take(alice, "t")


def test_under_none_the_sender_is_stopped_until_memory_is_freed():
    manager = limited(1000, "NONE")
    alice, bob, carol = Owner("alice"), Owner("bob"), Owner("carol")
    for owner in (alice, bob, carol):
        manager.begin(owner, "t")
    manager.hold(alice, "t", message("a", 900))
    manager.hold(bob, "t", message("b", 200))  # over the limit: bob is stopped
    assert bob.stops and not alice.stops and not carol.stops
    assert not alice.told and not bob.told  # nothing is discarded
    manager.hold(carol, "t", message("c", 10))
    assert carol.stops
    manager.abort(alice, "t")  # 210 held: every producer goes on
    assert not bob.stops and not carol.stops


def test_under_none_the_oldest_transaction_goes_on_when_every_holder_is_stopped():
    manager = limited(1000, "NONE")
    alice, bob = Owner("alice"), Owner("bob")
    manager.begin(alice, "t")
    manager.begin(bob, "t")
    manager.hold(bob, "t", message("b", 900))
    manager.hold(alice, "t", message("a", 200))  # alice stopped
    assert alice.stops and not bob.stops
    manager.hold(bob, "t", message("b2", 10))  # bob too: both would wait for ever
    assert alice.stops == set() and bob.stops, "the oldest transaction's owner is read"
