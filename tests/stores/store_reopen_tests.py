"""Reopen: what was committed is there after a restart, and nothing removed comes back."""

from __future__ import annotations

import pytest

from wiremq.stores.errors import StoreOpenError

from .store_fixtures import Stores, message, queued, replayed

T = "/topic/news"


class ReopenTests:
    def test_messages_survive_a_restart_in_order_and_removals_stay_removed(
        self, stores: Stores
    ) -> None:
        queue = stores.queue()
        seqs = queue.append([message(f"m{i}") for i in range(5)])
        queue.remove("/queue/a", seqs[1:3])
        stores.restart()
        queue = stores.queue()
        assert queued(queue) == ["m0", "m3", "m4"]

    def test_positions_are_never_reused_after_a_restart(self, stores: Stores) -> None:
        queue = stores.queue()
        seqs = queue.append([message("m0"), message("m1")])
        queue.remove("/queue/a", seqs)
        stores.restart()
        queue = stores.queue()
        (seq,) = queue.append([message("m2")])
        assert seq > max(seqs)

    def test_subscriptions_and_positions_survive_a_restart(self, stores: Stores) -> None:
        topics = stores.topics()
        topics.subscribe("c1", "s1", T, "x = 1")
        seqs = topics.append([message(f"m{i}", T) for i in range(3)])
        assert seqs[0] is not None
        topics.acknowledge("c1", "s1", seqs[0])
        stores.restart()
        topics = stores.topics()
        (info,) = topics.subscriptions()
        assert (info.client_id, info.name, info.topic, info.selector, info.acked_seq) == (
            "c1",
            "s1",
            T,
            "x = 1",
            seqs[0],
        )
        assert replayed(topics) == ["m1", "m2"]
        info, created = topics.subscribe("c1", "s1", T, "x = 1")
        assert not created

    def test_the_expiry_index_survives_a_restart(self, stores: Stores) -> None:
        queue = stores.queue()
        queue.append([message("e", expires=5), message("k")])
        stores.restart()
        queue = stores.queue()
        assert [m.message_id for m in queue.sweep_expired(10).removed] == ["e"]

    def test_stores_on_one_database_do_not_see_each_other(self, stores: Stores) -> None:
        queue, topics = stores.queue(), stores.topics()
        topics.subscribe("c1", "s1", T)
        queue.append([message("q")])
        topics.append([message("t", T)])
        stores.restart()
        assert stores.queue().destinations() == ["/queue/a"]
        assert stores.topics().destinations() == [T]

    def test_packing_the_database_keeps_every_live_message(self, stores: Stores) -> None:
        queue, topics = stores.queue(), stores.topics()
        topics.subscribe("c1", "s1", T)
        seqs = queue.append([message(f"m{i}") for i in range(10)])
        topics.append([message("t", T)])
        queue.remove("/queue/a", seqs[::2])
        stores.db().pack()
        stores.restart()
        queue, topics = stores.queue(), stores.topics()
        assert queued(queue) == [f"m{i}" for i in range(1, 10, 2)]
        assert queue.count("/queue/a") == 5
        assert replayed(topics) == ["t"]

    def test_a_store_in_an_older_layout_is_refused_with_a_clear_error(self, stores: Stores) -> None:
        queue = stores.queue()
        queue.append([message("old")])
        with queue._session.write("pretend an older wiremq wrote this") as logs:
            logs.layout = 1
        stores.restart()
        with pytest.raises(StoreOpenError, match="layout 1 by an older wiremq"):
            stores.queue()
