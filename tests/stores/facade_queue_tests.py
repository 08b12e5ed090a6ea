"""The facade's queues: commit appends and removals, read them back in order."""

from __future__ import annotations

import pytest

from wiremq.stores.api import StoreTransaction
from wiremq.stores.errors import StoreError
from wiremq.stores.records import StoredMessage

from .store_fixtures import Unpicklable, WalStores, commit, message, send, stored_ids


class FacadeQueueTests:
    def test_appends_get_growing_positions_and_read_gives_them_back_in_order(
        self, wal: WalStores
    ) -> None:
        store = wal.open()
        sent = [message(f"m{i}", body=f"body {i}".encode()) for i in range(5)]
        seqs = send(store, *sent)
        assert seqs == [1, 2, 3, 4, 5]
        batch = store.read("/queue/a", now_ms=0, after_seq=0, limit=100, max_bytes=10**6)
        assert batch.messages == list(zip(seqs, sent, strict=True))
        assert batch.at_end and batch.last_seq == 5 and batch.expired == []

    def test_one_commit_over_several_queues_keeps_each_queues_order(self, wal: WalStores) -> None:
        store = wal.open()
        sent = [message(f"m{i}", destination=f"/queue/{'ab'[i % 2]}") for i in range(10)]
        send(store, *sent)
        for name in ("/queue/a", "/queue/b"):
            assert stored_ids(store, name) == [m.message_id for m in sent if m.destination == name]
        assert store.destinations("/queue/") == ["/queue/a", "/queue/b"]

    def test_binary_bodies_and_unicode_headers_round_trip(self, wal: WalStores) -> None:
        store = wal.open()
        sent = message("ü-1", body=bytes(range(256)) * 3, headers=(("näme", "wért:\n"), ("a", "")))
        send(store, sent)
        batch = store.read("/queue/a", now_ms=0, after_seq=0, limit=1, max_bytes=1)
        assert batch.messages == [(1, sent)]

    def test_removals_report_the_positions_they_found_in_the_order_asked(
        self, wal: WalStores
    ) -> None:
        store = wal.open()
        seqs = send(store, *(message(f"m{i}") for i in range(6)))
        asked = [("/queue/a", seqs[5]), ("/queue/a", 99), ("/queue/a", seqs[0]), ("/queue/x", 1)]
        asked.append(("/queue/a", seqs[5]))  # twice in one transaction: removed once
        result = commit(store, removals=tuple(asked))  # type: ignore[arg-type]
        assert result.removed == (("/queue/a", seqs[5]), ("/queue/a", seqs[0]))
        assert commit(store, removals=(("/queue/a", seqs[0]),)).removed == ()
        assert stored_ids(store) == ["m1", "m2", "m3", "m4"]

    def test_a_later_transaction_of_one_commit_sees_the_earlier_ones(self, wal: WalStores) -> None:
        store = wal.open()
        first, second = store.commit(
            [
                StoreTransaction(appends=(message("a"), message("b"))),
                StoreTransaction(appends=(message("c"),), removals=(("/queue/a", 1),)),
            ]
        )
        assert first.positions == (1, 2) and second.positions == (3,)
        assert second.removed == (("/queue/a", 1),)
        assert stored_ids(store) == ["b", "c"]

    def test_read_pages_by_count_and_by_bytes(self, wal: WalStores) -> None:
        store = wal.open()
        seqs = send(store, *(message(f"m{i}", body=b"x" * 100) for i in range(10)))
        first = store.read("/queue/a", now_ms=0, after_seq=0, limit=4, max_bytes=10**6)
        assert [s for s, _ in first.messages] == seqs[:4] and not first.at_end
        second = store.read("/queue/a", now_ms=0, after_seq=first.last_seq, limit=9, max_bytes=250)
        assert [s for s, _ in second.messages] == seqs[4:6]
        rest = store.read("/queue/a", now_ms=0, after_seq=second.last_seq, limit=9, max_bytes=10**6)
        assert [s for s, _ in rest.messages] == seqs[6:] and rest.at_end

    def test_a_message_bigger_than_max_bytes_still_comes_back_alone(self, wal: WalStores) -> None:
        store = wal.open()
        send(store, message("big", body=b"x" * 5000), message("small"))
        batch = store.read("/queue/a", now_ms=0, after_seq=0, limit=10, max_bytes=100)
        assert [m.message_id for _, m in batch.messages] == ["big"] and not batch.at_end

    def test_a_read_with_a_match_returns_what_it_accepts_and_examines_at_most_examine(
        self, wal: WalStores
    ) -> None:
        store = wal.open()
        sent = [message(f"m{i}", body=b"x" * 10, headers=(("k", str(i % 5)),)) for i in range(40)]
        seqs = send(store, *sent)
        wanted = lambda m: dict(m.headers)["k"] == "0"  # noqa: E731
        first = store.read(
            "/queue/a", now_ms=0, after_seq=0, limit=3, max_bytes=10**6, match=wanted, examine=12
        )
        assert [s for s, _ in first.messages] == [seqs[0], seqs[5], seqs[10]]
        assert first.last_seq == seqs[10] and not first.at_end  # stopped at ``limit`` found
        second = store.read(
            "/queue/a",
            now_ms=0,
            after_seq=first.last_seq,
            limit=9,
            max_bytes=10**6,
            match=wanted,
            examine=12,
        )
        assert [s for s, _ in second.messages] == [seqs[15], seqs[20]]
        assert second.last_seq == seqs[22] and not second.at_end  # examined 12
        rest = store.read(
            "/queue/a",
            now_ms=0,
            after_seq=second.last_seq,
            limit=9,
            max_bytes=30,
            match=wanted,
            examine=1000,
        )
        assert [s for s, _ in rest.messages] == [seqs[25], seqs[30]]  # 14 B each: two fit in 30
        assert rest.last_seq == seqs[34] and not rest.at_end
        end = store.read(
            "/queue/a",
            now_ms=0,
            after_seq=rest.last_seq,
            limit=9,
            max_bytes=10**6,
            match=wanted,
            examine=1000,
        )
        assert [s for s, _ in end.messages] == [seqs[35]] and end.at_end

    def test_reading_an_unknown_queue_is_empty(self, wal: WalStores) -> None:
        batch = wal.open().read("/queue/none", now_ms=0, after_seq=7, limit=10, max_bytes=10)
        assert batch.messages == [] and batch.at_end and batch.last_seq == 7

    def test_many_commits_caught_up_at_once_keep_positions_order_and_gaps(
        self, wal: WalStores
    ) -> None:
        store = wal.open()
        for i in range(150):  # one record each, applied to ZODB in one batch by the read
            send(store, message(f"m{i}", body=b"x" * 700))
        commit(store, removals=tuple(("/queue/a", seq) for seq in range(2, 151, 3)))
        expected = [f"m{i}" for i in range(150) if (i + 1) % 3 != 2]
        assert stored_ids(store) == expected
        store = wal.crash()  # and the blocks written with holes read back the same
        assert stored_ids(store) == expected

    def test_a_failed_commit_changes_nothing_and_the_next_one_works(self, wal: WalStores) -> None:
        store = wal.open()
        send(store, message("ok"))
        bad = StoredMessage("bad", "/queue/a", (), Unpicklable(b"x"))
        with pytest.raises(StoreError, match="cannot be stored"):
            store.commit(
                [
                    StoreTransaction(appends=(message("lost"),), removals=(("/queue/a", 1),)),
                    StoreTransaction(appends=(bad,)),
                ]
            )
        with pytest.raises(StoreError, match="not a /queue/ or /topic/ destination"):
            send(store, message("nowhere", destination="/elsewhere/a"))
        assert store.count("/queue/a") == (1, message("ok").size)
        assert send(store, message("after")) == [2]  # the failed commit's position is free
        assert stored_ids(store) == ["ok", "after"]
        store = wal.crash()
        assert stored_ids(store) == ["ok", "after"]
