"""Expiry: the bounded cleanup sweep and expiry on read/replay, on every backend."""

from __future__ import annotations

import itertools

from .store_fixtures import Stores, message, queued

T = "/topic/news"


def ticking_clock(step: float) -> itertools.count[float]:
    return itertools.count(0.0, step)


class ExpirySweepTests:
    def test_sweep_removes_exactly_the_expired_messages_and_reports_them(
        self, stores: Stores
    ) -> None:
        queue = stores.queue()
        queue.append(
            [
                message("old", expires=1_000),
                message("due", destination="/queue/b", expires=2_000),
                message("later", expires=3_000),
                message("never"),
            ]
        )
        result = queue.sweep_expired(2_000)
        assert sorted((m.message_id, m.destination, m.expires) for m in result.removed) == [
            ("due", "/queue/b", 2_000),
            ("old", "/queue/a", 1_000),
        ]
        assert not result.more
        left = queued(queue)
        assert left == ["later", "never"] and queue.count("/queue/b") == 0

    def test_sweep_commits_in_small_transactions_and_stops_at_max_messages(
        self, stores: Stores
    ) -> None:
        queue = stores.queue()
        queue.append([message(f"m{i}", expires=100 + i) for i in range(25)])
        first = queue.sweep_expired(10_000, transaction_size=4, max_messages=10)
        assert len(first.removed) == 10 and first.more and first.commits == 3
        assert [m.message_id for m in first.removed] == [f"m{i}" for i in range(10)]
        rest = queue.sweep_expired(10_000, transaction_size=4)
        assert len(rest.removed) == 15 and not rest.more and rest.commits == 4
        assert queue.count("/queue/a") == 0

    def test_sweep_stops_when_its_time_is_up(self, stores: Stores) -> None:
        queue = stores.queue(clock=ticking_clock(1.0).__next__)  # each look: a second later
        queue.append([message(f"m{i}", expires=5) for i in range(20)])
        result = queue.sweep_expired(10, transaction_size=5, max_seconds=0.5)
        assert len(result.removed) == 5 and result.more and result.commits == 1

    def test_a_sweep_reads_the_expiry_index_not_every_message(self, stores: Stores) -> None:
        queue = stores.queue()
        queue.append([message(f"m{i}") for i in range(2_000)] + [message("x", expires=5)])
        stores.restart()
        queue = stores.queue()
        loaded_before = stores.db().cacheSize()
        result = queue.sweep_expired(10)
        assert [m.message_id for m in result.removed] == ["x"]
        assert stores.db().cacheSize() - loaded_before < 50

    def test_read_skips_expired_messages_and_can_remove_them(self, stores: Stores) -> None:
        queue = stores.queue()
        queue.append([message("a", expires=5), message("b"), message("c", expires=50)])
        kept = queue.read("/queue/a", now_ms=10)
        assert [m.message_id for _, m in kept.messages] == ["b", "c"]
        assert [m.message_id for m in kept.expired] == ["a"] and not kept.expired_removed
        assert queue.count("/queue/a") == 3
        removed = queue.read("/queue/a", now_ms=60, expiry_on_read=True)
        assert [m.message_id for _, m in removed.messages] == ["b"]
        assert {m.message_id for m in removed.expired} == {"a", "c"} and removed.expired_removed
        assert queue.count("/queue/a") == 1
        assert queue.sweep_expired(60).removed == []

    def test_replay_skips_expired_messages_and_can_remove_them(self, stores: Stores) -> None:
        topics = stores.topics()
        topics.subscribe("c1", "s1", T)
        topics.append([message("a", T, expires=5), message("b", T)])
        batch = topics.replay("c1", "s1", now_ms=10)
        assert [m.message_id for _, m in batch.messages] == ["b"]
        assert topics.count(T) == 2
        batch = topics.replay("c1", "s1", now_ms=10, expiry_on_replay=True)
        assert [m.message_id for m in batch.expired] == ["a"] and topics.count(T) == 1

    def test_topic_sweep_and_stale_index_entries_of_dropped_backlogs(self, stores: Stores) -> None:
        topics = stores.topics()
        topics.subscribe("c1", "s1", T)
        topics.subscribe("c2", "s2", "/topic/other")
        topics.append([message("gone", T, expires=5), message("due", "/topic/other", expires=5)])
        topics.unsubscribe("c1", "s1", collect_limit=0)  # its backlog is dropped at once
        result = topics.sweep_expired(10)
        assert [m.message_id for m in result.removed] == ["due"]
        assert topics.total_count() == 0
        assert topics.sweep_expired(10).removed == []
