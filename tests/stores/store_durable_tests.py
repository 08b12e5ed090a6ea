"""Durable subscriptions and replay: what every TopicStore backend must do."""

from __future__ import annotations

import pytest

from wiremq.stores.topicstore import TopicStore, UnknownSubscriptionError

from .store_fixtures import Stores, message, replayed

T = "/topic/news"


def publish(topics: TopicStore, *ids: str, topic: str = T) -> list[int | None]:
    return topics.append([message(i, destination=topic) for i in ids])


class DurableSubscriptionTests:
    def test_a_new_subscription_starts_at_the_current_end(self, stores: Stores) -> None:
        topics = stores.topics()
        topics.subscribe("c0", "early", T)
        publish(topics, "before")
        info, created = topics.subscribe("c1", "s1", T, "color = 'red'")
        assert created and info.selector == "color = 'red'" and info.topic == T
        publish(topics, "after1", "after2")
        assert replayed(topics) == ["after1", "after2"]

    def test_messages_of_a_topic_nobody_subscribed_durably_are_not_kept(
        self, stores: Stores
    ) -> None:
        topics = stores.topics()
        topics.subscribe("c1", "s1", T)
        seqs = publish(topics, "x", topic="/topic/other") + publish(topics, "y")
        assert seqs[0] is None and seqs[1] is not None
        assert topics.count("/topic/other") == 0 and topics.count(T) == 1

    def test_replay_pages_in_order_by_count_and_bytes(self, stores: Stores) -> None:
        topics = stores.topics()
        topics.subscribe("c1", "s1", T)
        seqs = publish(topics, *(f"m{i}" for i in range(7)))
        first = topics.replay("c1", "s1", now_ms=0, max_messages=3)
        assert [s for s, _ in first.messages] == seqs[:3] and not first.at_end
        second = topics.replay("c1", "s1", now_ms=0, after_seq=first.last_seq, max_bytes=1)
        assert [s for s, _ in second.messages] == seqs[3:4]
        rest = topics.replay("c1", "s1", now_ms=0, after_seq=second.last_seq)
        assert [s for s, _ in rest.messages] == seqs[4:] and rest.at_end

    def test_acknowledged_messages_are_not_replayed_and_are_collected(self, stores: Stores) -> None:
        topics = stores.topics()
        topics.subscribe("c1", "s1", T)
        seqs = publish(topics, "m0", "m1", "m2")
        assert seqs[1] is not None
        topics.acknowledge("c1", "s1", seqs[1])
        assert replayed(topics) == ["m2"]
        assert topics.count(T) == 1

    def test_a_message_stays_until_every_subscriber_has_passed_it(self, stores: Stores) -> None:
        topics = stores.topics()
        topics.subscribe("c1", "s1", T)
        topics.subscribe("c2", "s2", T)
        seqs = publish(topics, "m0", "m1")
        assert seqs[1] is not None
        topics.acknowledge("c1", "s1", seqs[1])
        assert topics.count(T) == 2
        assert replayed(topics, "c2", "s2") == ["m0", "m1"]
        topics.acknowledge("c2", "s2", seqs[0])
        assert topics.count(T) == 1
        topics.acknowledge_batch({("c2", "s2"): seqs[1], ("gone", "x"): 99})
        assert topics.count(T) == 0

    def test_acknowledging_never_moves_a_position_back(self, stores: Stores) -> None:
        topics = stores.topics()
        topics.subscribe("c1", "s1", T)
        topics.subscribe("c2", "s2", T)
        seqs = publish(topics, "m0", "m1", "m2")
        assert seqs[0] is not None and seqs[2] is not None
        topics.acknowledge("c1", "s1", seqs[2])
        topics.acknowledge("c1", "s1", seqs[0])
        info = topics.subscription("c1", "s1")
        assert info is not None and info.acked_seq == seqs[2]
        assert replayed(topics) == []

    def test_unsubscribe_drops_the_backlog_and_the_subscription(self, stores: Stores) -> None:
        topics = stores.topics()
        topics.subscribe("c1", "s1", T)
        publish(topics, "m0", "m1")
        topics.unsubscribe("c1", "s1")
        assert topics.count(T) == 0 and topics.subscriptions() == []
        with pytest.raises(UnknownSubscriptionError):
            topics.replay("c1", "s1", now_ms=0)
        with pytest.raises(UnknownSubscriptionError):
            topics.unsubscribe("c1", "s1")

    def test_unsubscribe_keeps_what_other_subscribers_still_need(self, stores: Stores) -> None:
        topics = stores.topics()
        topics.subscribe("c1", "s1", T)
        topics.subscribe("c2", "s2", T)
        seqs = publish(topics, "m0", "m1")
        assert seqs[0] is not None
        topics.acknowledge("c2", "s2", seqs[0])
        topics.unsubscribe("c1", "s1")
        assert topics.count(T) == 1
        assert replayed(topics, "c2", "s2") == ["m1"]

    def test_resubscribing_the_same_way_resumes_and_another_way_starts_over(
        self, stores: Stores
    ) -> None:
        topics = stores.topics()
        topics.subscribe("c1", "s1", T, "a > 1")
        publish(topics, "m0")
        info, created = topics.subscribe("c1", "s1", T, "a > 1")
        assert not created and replayed(topics) == ["m0"]
        info, created = topics.subscribe("c1", "s1", T, "a > 2")
        assert created and info.selector == "a > 2"
        assert replayed(topics) == [] and topics.count(T) == 0

    def test_collection_beyond_the_inline_limit_is_finished_by_collect_garbage(
        self, stores: Stores
    ) -> None:
        topics = stores.topics()
        topics.subscribe("c1", "s1", T)
        seqs = publish(topics, *(f"m{i}" for i in range(10)))
        assert seqs[-1] is not None
        topics.acknowledge("c1", "s1", seqs[-1], collect_limit=3)
        assert topics.count(T) == 7
        result = topics.collect_garbage(transaction_size=2)
        assert len(result.removed) == 7 and not result.more and result.commits == 4
        assert topics.count(T) == 0
