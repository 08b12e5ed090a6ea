"""The facade across restarts and crashes: what a commit returned is there, replayed exactly
once, and a transaction over both stores is all or none."""

from __future__ import annotations

import os

import pytest
from structlog.testing import capture_logs

from wiremq.stores import messagestore
from wiremq.stores.errors import StoreError, StoreOpenError
from wiremq.stores.messagestore import WalStore
from wiremq.stores.model import BODY_PIECE_BYTES

from .facade_durable_tests import acked, replayed, subscribe
from .store_fixtures import WalStores, commit, message, send, stored_ids

T = "/topic/news"


def mixed_transaction(store: WalStore) -> None:
    """A queue append, a topic append, a queue removal and a durable acknowledgement."""
    commit(
        store,
        appends=(message("q2"), message("t2", T)),
        removals=(("/queue/a", 1),),
        acknowledgements=((("c1", "s1"), 1),),
    )


def prepare_mixed(store: WalStore) -> None:
    subscribe(store, ("c1", "s1"))
    subscribe(store, ("c2", "s2"))
    send(store, message("q1"), message("t1", T))
    store.catch_up(1.0)


class FacadeReopenTests:
    def test_commits_survive_a_restart_and_a_crash_removals_stay_removed(
        self, wal: WalStores
    ) -> None:
        store = wal.open()
        seqs = send(store, *(message(f"m{i}") for i in range(5)))
        commit(store, removals=(("/queue/a", seqs[1]), ("/queue/a", seqs[2])))  # type: ignore[arg-type]
        store = wal.restart()
        assert stored_ids(store) == ["m0", "m3", "m4"]
        commit(store, removals=(("/queue/a", seqs[0]),))  # type: ignore[arg-type]
        send(store, message("m5"))
        with capture_logs() as logs:
            store = wal.crash()
        (replay,) = [e for e in logs if e["event"] == "wal.replayed"]
        assert (replay["records"], replay["transactions"], replay["messages"]) == (2, 2, 1)
        assert replay["log_level"] == "info"
        assert stored_ids(store) == ["m3", "m4", "m5"]
        assert send(store, message("m6")) == [7]

    def test_a_transaction_over_both_stores_is_applied_to_each_exactly_once(
        self, wal: WalStores, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        store = wal.open()
        prepare_mixed(store)
        mixed_transaction(store)
        apply = messagestore._Part.apply

        def topics_fail(part: messagestore._Part, records: object) -> int:
            if part.name.startswith("topics"):
                raise StoreError("the topic database went away")
            return apply(part, records)  # type: ignore[arg-type]

        monkeypatch.setattr(messagestore._Part, "apply", topics_fail)
        with pytest.raises(StoreError, match="went away"):
            store.catch_up(1.0)  # the queue store has the transaction, the topic store not
        monkeypatch.setattr(messagestore._Part, "apply", apply)
        store = wal.crash()
        assert stored_ids(store) == ["q2"]  # not applied twice
        assert stored_ids(store, T) == ["t1", "t2"] and acked(store, ("c1", "s1")) == 1
        assert replayed(store, ("c2", "s2")) == ["t1", "t2"]
        assert store.count("/queue/a")[0] == 1 and store.count(T)[0] == 2

    def test_a_transaction_over_both_stores_that_failed_is_in_neither(
        self, wal: WalStores, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        store = wal.open()
        prepare_mixed(store)

        def no_disk(*args: object) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(messagestore.WriteAheadLog, "_write_record", no_disk)
        with pytest.raises(StoreError, match="No space left"):
            mixed_transaction(store)
        monkeypatch.undo()
        assert stored_ids(store) == ["q1"] and stored_ids(store, T) == ["t1"]
        assert acked(store, ("c1", "s1")) == 0 and store.count("/queue/a")[0] == 1
        store = wal.crash()
        assert stored_ids(store) == ["q1"] and stored_ids(store, T) == ["t1"]
        assert acked(store, ("c1", "s1")) == 0
        mixed_transaction(store)  # and it can be committed now
        assert stored_ids(store) == ["q2"] and acked(store, ("c1", "s1")) == 1

    def test_subscriptions_and_positions_survive_a_crash(self, wal: WalStores) -> None:
        store = wal.open()
        subscribe(store, ("c1", "s1"), selector="x = 1")
        publish = send(store, *(message(f"m{i}", T) for i in range(3)))
        commit(store, acknowledgements=((("c1", "s1"), publish[0]),))  # type: ignore[arg-type]
        store = wal.crash()
        (info,) = store.subscriptions()
        assert (info.client_id, info.name, info.topic, info.selector, info.acked_seq) == (
            "c1",
            "s1",
            T,
            "x = 1",
            publish[0],
        )
        assert replayed(store, ("c1", "s1")) == ["m1", "m2"]
        assert not subscribe(store, ("c1", "s1"), selector="x = 1")[1]

    def test_packing_keeps_every_live_message(self, wal: WalStores) -> None:
        store = wal.open()
        subscribe(store, ("c1", "s1"))
        seqs = send(store, *(message(f"m{i}") for i in range(10)), message("t", T))
        commit(store, removals=tuple(("/queue/a", s) for s in seqs[:10:2]))  # type: ignore[misc]
        store.catch_up(1.0)
        store.pack()
        store = wal.restart()
        assert stored_ids(store) == [f"m{i}" for i in range(1, 10, 2)]
        assert store.count("/queue/a")[0] == 5 and stored_ids(store, T) == ["t"]

    def test_large_bodies_survive_the_catch_up_a_crash_and_a_pack(self, wal: WalStores) -> None:
        """Bodies kept out of band (in the log record, and in pieces in the database)."""
        store = wal.open()
        subscribe(store, ("c1", "s1"))
        bodies = [os.urandom(BODY_PIECE_BYTES + i) for i in range(3)]
        seqs = send(store, message("l0", body=bodies[0]), message("gone", body=bodies[1]))
        send(store, message("t", T, body=bodies[2]))
        store.catch_up(1.0)
        commit(store, removals=(("/queue/a", seqs[1]),))  # type: ignore[arg-type]
        send(store, message("l1", body=bodies[1]))
        store = wal.crash()  # l1 is replayed from the log
        store.catch_up(1.0)
        store.pack()
        store = wal.restart()
        batch = store.read("/queue/a", now_ms=0, after_seq=0, limit=10, max_bytes=1 << 30)
        assert [(m.message_id, m.body) for _, m in batch.messages] == [
            ("l0", bodies[0]),
            ("l1", bodies[1]),
        ]
        topic = store.read(T, now_ms=0, after_seq=0, limit=10, max_bytes=1 << 30)
        assert [m.body for _, m in topic.messages] == [bodies[2]]

    def test_a_store_in_an_older_layout_is_refused_with_a_clear_error(self, wal: WalStores) -> None:
        store = wal.open()
        send(store, message("old"))
        store.catch_up(1.0)
        with store._parts[0].session.write("pretend an older wiremq wrote this") as root:
            root.layout = 2
        wal.close()
        with pytest.raises(StoreOpenError, match="layout 2 by an older wiremq"):
            wal.open()
