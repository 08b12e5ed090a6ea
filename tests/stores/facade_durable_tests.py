"""The facade's durable subscriptions: created at the topic's end, replayed by position,
messages kept until every subscriber has passed them."""

from __future__ import annotations

from wiremq.stores.durable import SubscriptionInfo, SubscriptionKey
from wiremq.stores.messagestore import WalStore

from .store_fixtures import WalStores, commit, message, send, stored_ids

T = "/topic/news"


def subscribe(
    store: WalStore, key: SubscriptionKey, topic: str = T, selector: str = ""
) -> tuple[SubscriptionInfo, bool]:
    (made,) = commit(store, subscribes=((key, topic, selector),)).subscriptions
    return made


def publish(store: WalStore, *ids: str, topic: str = T) -> list[int | None]:
    return send(store, *(message(i, destination=topic) for i in ids))


def acked(store: WalStore, key: SubscriptionKey) -> int:
    (info,) = [s for s in store.subscriptions() if (s.client_id, s.name) == key]
    return info.acked_seq


def replayed(store: WalStore, key: SubscriptionKey, topic: str = T) -> list[str]:
    return stored_ids(store, topic, after_seq=acked(store, key))


class FacadeDurableTests:
    def test_a_new_subscription_starts_at_the_current_end(self, wal: WalStores) -> None:
        store = wal.open()
        subscribe(store, ("c0", "early"))
        publish(store, "before")
        info, created = subscribe(store, ("c1", "s1"), selector="color = 'red'")
        assert created and (info.topic, info.selector, info.acked_seq) == (T, "color = 'red'", 1)
        publish(store, "after1", "after2")
        assert replayed(store, ("c1", "s1")) == ["after1", "after2"]
        assert replayed(store, ("c0", "early")) == ["before", "after1", "after2"]

    def test_appends_in_the_subscribing_transaction_are_kept_for_it(self, wal: WalStores) -> None:
        store = wal.open()
        result = commit(
            store,
            subscribes=((("c1", "s1"), T, ""),),
            appends=(message("m", destination=T),),
        )
        assert result.positions == (1,) and result.subscriptions[0][0].acked_seq == 0
        assert replayed(store, ("c1", "s1")) == ["m"]

    def test_messages_of_a_topic_nobody_subscribed_durably_are_not_kept(
        self, wal: WalStores
    ) -> None:
        store = wal.open()
        subscribe(store, ("c1", "s1"))
        lsn = store._wal.durable_lsn
        assert publish(store, "x", topic="/topic/other") == [None]
        assert store._wal.durable_lsn == lsn  # nothing was written for it
        assert publish(store, "y") == [1]
        assert store.count("/topic/other") == (0, 0) and store.count(T)[0] == 1
        assert store.destinations("/topic/") == [T]

    def test_acknowledged_messages_are_collected_once_every_subscriber_passed_them(
        self, wal: WalStores
    ) -> None:
        store = wal.open()
        subscribe(store, ("c1", "s1"))
        subscribe(store, ("c2", "s2"))
        seqs = publish(store, "m0", "m1", "m2")
        commit(store, acknowledgements=((("c1", "s1"), seqs[1]),))  # type: ignore[arg-type]
        assert store.count(T)[0] == 3 and replayed(store, ("c1", "s1")) == ["m2"]
        commit(store, acknowledgements=((("c2", "s2"), seqs[0]),))  # type: ignore[arg-type]
        assert store.count(T)[0] == 2
        assert stored_ids(store, T) == ["m1", "m2"]  # m0 is gone from ZODB too
        commit(store, acknowledgements=((("c2", "s2"), 99), (("gone", "x"), 1)))
        assert acked(store, ("c2", "s2")) == 3  # never past the topic's end
        assert store.count(T) == (1, message("m2", T).size)
        store = wal.crash()
        assert stored_ids(store, T) == ["m2"] and store.count(T)[0] == 1

    def test_single_acknowledgements_past_the_position_are_kept_until_it_passes_them(
        self, wal: WalStores
    ) -> None:
        store = wal.open()
        key = ("c1", "s1")
        subscribe(store, key)
        publish(store, "m0", "m1", "m2", "m3")
        commit(store, single_acknowledgements=((key, 2), (key, 4), (("gone", "x"), 3)))
        commit(store, single_acknowledgements=((key, 0),))  # at or below the position: nothing
        (info,) = store.subscriptions()
        assert (info.acked_seq, info.acknowledged) == (0, frozenset({2, 4}))
        store = wal.crash()  # from the log alone
        assert store.subscriptions()[0].acknowledged == frozenset({2, 4})
        store.catch_up(10.0)
        store = wal.crash()  # from ZODB
        assert store.subscriptions()[0].acknowledged == frozenset({2, 4})
        commit(store, acknowledgements=((key, 2),))
        assert store.subscriptions()[0].acknowledged == frozenset({4})  # passed: dropped
        store.catch_up(10.0)
        store = wal.crash()
        (info,) = store.subscriptions()
        assert (info.acked_seq, info.acknowledged) == (2, frozenset({4}))

    def test_acknowledging_never_moves_a_position_back(self, wal: WalStores) -> None:
        store = wal.open()
        subscribe(store, ("c1", "s1"))
        subscribe(store, ("c2", "s2"))
        publish(store, "m0", "m1", "m2")
        commit(store, acknowledgements=((("c1", "s1"), 3),))
        commit(store, acknowledgements=((("c1", "s1"), 1),))
        assert acked(store, ("c1", "s1")) == 3 and replayed(store, ("c1", "s1")) == []

    def test_unsubscribe_drops_the_backlog_and_the_subscription(self, wal: WalStores) -> None:
        store = wal.open()
        subscribe(store, ("c1", "s1"))
        publish(store, "m0", "m1")
        commit(store, unsubscribes=(("c1", "s1"), ("never", "there")))
        assert store.count(T) == (0, 0) and store.subscriptions() == []
        assert stored_ids(store, T) == []
        store = wal.crash()
        assert store.subscriptions() == [] and stored_ids(store, T) == []
        assert publish(store, "later") == [None]

    def test_unsubscribe_keeps_what_other_subscribers_still_need(self, wal: WalStores) -> None:
        store = wal.open()
        subscribe(store, ("c1", "s1"))
        subscribe(store, ("c2", "s2"))
        seqs = publish(store, "m0", "m1")
        commit(store, acknowledgements=((("c2", "s2"), seqs[0]),))  # type: ignore[arg-type]
        commit(store, unsubscribes=(("c1", "s1"),))
        assert store.count(T)[0] == 1
        assert replayed(store, ("c2", "s2")) == ["m1"] and stored_ids(store, T) == ["m1"]

    def test_resubscribing_the_same_way_resumes_and_another_way_starts_over(
        self, wal: WalStores
    ) -> None:
        store = wal.open()
        subscribe(store, ("c1", "s1"), selector="a > 1")
        publish(store, "m0")
        info, created = subscribe(store, ("c1", "s1"), selector="a > 1")
        assert not created and info.acked_seq == 0 and replayed(store, ("c1", "s1")) == ["m0"]
        info, created = subscribe(store, ("c1", "s1"), selector="a > 2")
        assert created and info.selector == "a > 2" and info.acked_seq == 1
        assert replayed(store, ("c1", "s1")) == [] and store.count(T) == (0, 0)
        publish(store, "m1")
        store = wal.crash()
        assert replayed(store, ("c1", "s1")) == ["m1"]
        assert [(s.selector, s.acked_seq) for s in store.subscriptions()] == [("a > 2", 1)]

    def test_positions_are_never_reused_even_for_messages_that_never_reached_zodb(
        self, wal: WalStores
    ) -> None:
        store = wal.open()
        subscribe(store, ("c1", "s1"))
        seqs = publish(store, "m0", "m1")
        commit(store, acknowledgements=((("c1", "s1"), 2),))
        queued = send(store, message("q"))
        commit(store, removals=(("/queue/a", queued[0]),))  # type: ignore[arg-type]
        store = wal.crash()  # all four records replayed in one batch: nothing written
        assert publish(store, "m2") == [max(seqs) + 1]  # type: ignore[type-var]
        assert send(store, message("q2")) == [2]
        assert replayed(store, ("c1", "s1")) == ["m2"]
