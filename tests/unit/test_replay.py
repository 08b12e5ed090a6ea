"""Durable replays: in order, in batches, never more at once than maxthreads."""

from __future__ import annotations

import pytest

from tests.fakes import FakeRuntime
from wiremq.config.parameters import REGISTRY
from wiremq.config.settings import Settings
from wiremq.modules.broker import Broker
from wiremq.modules.egress import Egress, Outbox
from wiremq.modules.persistence import Persistence
from wiremq.modules.stomp.codec import FrameDecoder
from wiremq.modules.subscription import Subscription
from wiremq.stores.persqueue import PersQueueStore
from wiremq.stores.records import StoredMessage
from wiremq.stores.storage import open_database
from wiremq.stores.topicstore import TopicStore


@pytest.fixture
def broker(tmp_path):
    settings = Settings(
        REGISTRY,
        {
            "DurableTopicSubscriberThreadPool.maxthreads": 1,
            "TopicFileStore.replaymsgamount": 10,
        },
    )
    runtime = FakeRuntime()
    db = open_database((tmp_path / "Data.fs").as_uri())
    persistence = Persistence(PersQueueStore(db), TopicStore(db), runtime, settings)
    yield Broker(settings, runtime, persistence)
    persistence.close()
    db.close()


def _bodies(egress: Egress) -> list[bytes]:
    decoder = FrameDecoder()
    decoder.version = "1.2"
    return [frame.body for frame in decoder.feed(b"".join(egress.take()))]


def test_replays_deliver_each_backlog_in_order_one_replay_at_a_time(broker):
    runtime = broker.runtime
    persistence = broker.persistence
    topic = broker.destination("/topic/t")
    names = ["a", "b", "c"]
    for name in names:  # the subscriptions exist, their subscribers are away
        persistence.topics.subscribe("client", name, "/topic/t")
    persistence.load_durable_subscriptions()
    persistence.topics.append(
        [StoredMessage(f"m{i}", "/topic/t", (), f"{i}".encode()) for i in range(35)]
    )
    egresses = {}
    for number, name in enumerate(names, start=1):
        egress = Egress(Outbox())
        egresses[name] = egress
        subscription = Subscription(name, number, topic, "auto", egress, "1.2", ("client", name))
        topic.subscribe(subscription)
    most_at_once = 0
    worker = runtime.worker("topics")
    bodies: dict[str, list[bytes]] = {name: [] for name in names}
    for _ in range(200):
        most_at_once = max(most_at_once, len(broker.replays.active))
        worker.run()
        for name in names:  # the clients read what was delivered
            bodies[name] += _bodies(egresses[name])
        runtime.advance(0.02)
        if not broker.replays.active and not broker.replays.waiting and not worker.calls:
            break
    assert most_at_once == 1
    for name in names:
        assert bodies[name] == [f"{i}".encode() for i in range(35)]
    assert all(not s.replaying for s in topic.consumers)
    worker.run()  # the positions acknowledged in auto mode reach the store
    runtime.run_soon()
    worker.run()
    assert [persistence.topics.subscription("client", n).acked_seq for n in names] == [35] * 3
