"""Counts per destination and in total, kept by the store so watermarks need no scan."""

from __future__ import annotations

import pytest

from wiremq.stores.errors import StoreError
from wiremq.stores.records import StoredMessage

from .store_fixtures import Stores, message, queued

T = "/topic/news"


class Unpicklable(bytes):
    """A body that cannot be written, so the append fails."""

    def __reduce_ex__(self, protocol: object) -> tuple[object, ...]:
        raise TypeError("this body cannot be stored")


def sizes(*messages: StoredMessage) -> int:
    return sum(m.size for m in messages)


class CountTests:
    def test_queue_counts_follow_appends_removals_and_expiry(self, stores: Stores) -> None:
        queue = stores.queue()
        a = [message(f"a{i}", body=b"x" * (10 * i)) for i in range(4)]
        b = [message("b0", destination="/queue/b", body=b"yy", expires=5)]
        seqs = queue.append(a + b)
        assert (queue.count("/queue/a"), queue.byte_count("/queue/a")) == (4, sizes(*a))
        assert (queue.total_count(), queue.total_bytes()) == (5, sizes(*a, *b))
        queue.remove("/queue/a", seqs[:2])
        assert (queue.count("/queue/a"), queue.byte_count("/queue/a")) == (2, sizes(*a[2:]))
        queue.sweep_expired(10)
        assert (queue.count("/queue/b"), queue.byte_count("/queue/b")) == (0, 0)
        assert (queue.total_count(), queue.total_bytes()) == (2, sizes(*a[2:]))
        assert queue.count("/queue/unknown") == 0

    def test_topic_counts_follow_appends_and_collection(self, stores: Stores) -> None:
        topics = stores.topics()
        topics.subscribe("c1", "s1", T)
        sent = [message(f"m{i}", T, body=b"z" * i) for i in range(3)]
        seqs = topics.append(sent)
        assert (topics.count(T), topics.byte_count(T), topics.total_bytes()) == (
            3,
            sizes(*sent),
            sizes(*sent),
        )
        assert seqs[0] is not None
        topics.acknowledge("c1", "s1", seqs[0])
        assert (topics.count(T), topics.byte_count(T)) == (2, sizes(*sent[1:]))

    def test_counts_are_the_same_after_a_restart(self, stores: Stores) -> None:
        queue = stores.queue()
        queue.append([message(f"m{i}", destination=f"/queue/{i % 3}") for i in range(10)])
        before = {d: (queue.count(d), queue.byte_count(d)) for d in queue.destinations()}
        totals = (queue.total_count(), queue.total_bytes())
        stores.restart()
        queue = stores.queue()
        assert {d: (queue.count(d), queue.byte_count(d)) for d in queue.destinations()} == before
        assert (queue.total_count(), queue.total_bytes()) == totals

    def test_a_failed_append_changes_neither_data_nor_counts(self, stores: Stores) -> None:
        queue = stores.queue()
        queue.append([message("ok")])
        unpicklable = StoredMessage("bad", "/queue/a", (), Unpicklable(b"x"))
        with pytest.raises(StoreError, match="cannot be stored"):
            queue.append([message("lost"), unpicklable])
        assert (queue.count("/queue/a"), queue.total_count()) == (1, 1)
        queue.append([message("after")])
        assert queued(queue) == ["ok", "after"]
