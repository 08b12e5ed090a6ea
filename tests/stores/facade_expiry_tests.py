"""The facade's expiry: ``expired`` finds due messages through the index, reads skip them,
and removing them is a transaction like any other."""

from __future__ import annotations

from dataclasses import replace

from wiremq.stores.api import StoreTransaction

from .facade_durable_tests import subscribe
from .store_fixtures import WalStores, commit, message, send, stored_ids

T = "/topic/news"
DLQ = "/queue/DLQ.a"


class FacadeExpiryTests:
    def test_expired_lists_due_messages_of_queues_and_topics_soonest_first(
        self, wal: WalStores
    ) -> None:
        store = wal.open()
        subscribe(store, ("c1", "s1"))
        send(
            store,
            message("late", expires=3_000),
            message("t", destination=T, expires=1_500),
            message("first", destination="/queue/b", expires=1_000),
            message("never"),
            message("later", expires=9_000),
        )
        due = store.expired("/queue/", 3_000, 10)
        assert [(pos, m.message_id) for pos, m in due] == [
            (("/queue/b", 1), "first"),
            (("/queue/a", 1), "late"),
        ]
        assert [(pos, m.message_id) for pos, m in store.expired("/topic/", 3_000, 10)] == [
            ((T, 1), "t")
        ]
        assert [m.message_id for _, m in store.expired("/queue/", 3_000, 1)] == ["first"]
        assert store.count("/queue/a")[0] == 3  # listing removes nothing

    def test_removing_expired_messages_reports_each_once(self, wal: WalStores) -> None:
        store = wal.open()
        send(store, message("a", expires=5), message("b", expires=5), message("c"))
        due = [position for position, _ in store.expired("/queue/", 10, 10)]
        commit(store, removals=(due[0],))  # an acknowledgement got there first
        result = commit(store, removals=tuple(due))
        assert result.removed == (due[1],)
        assert store.expired("/queue/", 10, 10) == [] and stored_ids(store) == ["c"]

    def test_a_removal_not_yet_applied_to_zodb_is_seen(self, wal: WalStores) -> None:
        store = wal.open()
        send(store, message("a", expires=5), message("b", expires=5))
        store.catch_up(1.0)
        commit(store, removals=(("/queue/a", 1),))
        assert [m.message_id for _, m in store.expired("/queue/", 10, 10)] == ["b"]

    def test_read_skips_expired_messages_and_lists_them(self, wal: WalStores) -> None:
        store = wal.open()
        send(store, message("a", expires=5), message("b"), message("c", expires=50))
        batch = store.read("/queue/a", now_ms=10, after_seq=0, limit=10, max_bytes=10**6)
        assert [m.message_id for _, m in batch.messages] == ["b", "c"]
        assert [(seq, m.message_id) for seq, m in batch.expired] == [(1, "a")]
        assert batch.last_seq == 3 and store.count("/queue/a")[0] == 3

    def test_a_cleared_topic_backlog_leaves_no_due_entries_behind(self, wal: WalStores) -> None:
        store = wal.open()
        subscribe(store, ("c1", "s1"))
        subscribe(store, ("c2", "s2"), topic="/topic/other")
        send(store, message("gone", T, expires=5), message("due", "/topic/other", expires=5))
        store.catch_up(1.0)  # the backlog reaches ZODB, with its expiry entries
        commit(store, unsubscribes=(("c1", "s1"),))
        expired = store.expired
        assert [m.message_id for _, m in expired("/topic/", 10, 1)] == []  # a stale entry
        assert [m.message_id for _, m in expired("/topic/", 10, 1)] == ["due"]  # it was dropped
        store = wal.crash()
        assert [m.message_id for _, m in store.expired("/topic/", 10, 10)] == ["due"]

    def test_the_expiry_index_survives_a_crash(self, wal: WalStores) -> None:
        store = wal.open()
        send(store, message("e", expires=5), message("k"))
        store = wal.crash()
        assert [(p, m.message_id) for p, m in store.expired("/queue/", 10, 10)] == [
            (("/queue/a", 1), "e")
        ]

    def test_a_move_to_a_dead_message_queue_happens_only_if_the_message_is_still_there(
        self, wal: WalStores
    ) -> None:
        store = wal.open()
        send(store, message("a", expires=5), message("b", expires=5))
        due = store.expired("/queue/", 10, 10)
        moves = tuple((pos, replace(m, destination=DLQ, expires=0)) for pos, m in due)
        acked, moved = store.commit(
            [
                StoreTransaction(removals=(due[0][0],)),  # an acknowledgement got there first
                StoreTransaction(moves=moves),
            ]
        )
        assert acked.removed == (due[0][0],) and moved.moved == (None, 1)
        assert stored_ids(store) == [] and stored_ids(store, DLQ) == ["b"]
        assert store.count(DLQ)[0] == 1 and store.totals("/queue/")[0] == 1
        store = wal.crash()
        assert stored_ids(store, DLQ) == ["b"] and store.expired("/queue/", 10, 10) == []
