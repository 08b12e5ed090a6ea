"""Durable replays: in order, in batches, never more at once than maxthreads, and never
losing or repeating a message committed while a replay reads."""

from __future__ import annotations

import pytest

from tests.defaults import decoder, egress
from tests.fakes import FakeRuntime
from wiremq.config.parameters import REGISTRY
from wiremq.config.settings import Settings
from wiremq.config.xmlconfig import default_pipelines
from wiremq.modules.client.egress import Egress
from wiremq.modules.core import Core
from wiremq.modules.destinations.subscription import Subscription
from wiremq.modules.message import Message
from wiremq.server.stores import open_store
from wiremq.stores.api import StoreTransaction
from wiremq.stores.records import StoredMessage

TOPIC = "/topic/t"


@pytest.fixture
def core(tmp_path):
    settings = Settings(
        REGISTRY,
        {
            "DurableTopicSubscriberThreadPool.maxthreads": 1,
            "TopicFileStore.replaymsgamount": 10,
            "Server.datadir": str(tmp_path),
        },
    )
    store = open_store(settings)
    yield Core(settings, FakeRuntime(), store, default_pipelines())
    store.close()


def _bodies(out: Egress) -> list[bytes]:
    return [frame.body for frame in decoder().feed(b"".join(out.take()))]


def _subscribe(core: Core, names: list[str]) -> None:
    """Durable subscriptions whose subscribers are away."""
    core.store.commit(
        [StoreTransaction(subscribes=tuple((("client", n), TOPIC, "") for n in names))]
    )
    core.persistence.load_durable_subscriptions()


def _attach(core: Core, name: str, number: int) -> Egress:
    """The subscriber of ``name`` comes back; its replay starts."""
    topic = core.destinations.resolve(TOPIC)
    out = egress()
    subscription = Subscription(name, number, topic, "auto", out, "1.2", ("client", name))
    topic.subscribe(subscription)
    [info] = [s for s in core.store.subscriptions() if s.name == name]
    topic.registered(subscription, info)
    return out


def _publish(core: Core, bodies: list[str]) -> None:
    """Persistent messages down the pubsub pipeline, as clients send them."""
    batch = [
        Message(f"m-{body}", TOPIC, {"destination": TOPIC, "persistent": "true"}, body.encode())
        for body in bodies
    ]
    core.pipelines.submit("pubsub", batch)
    core.runtime.run_soon()
    core.runtime.advance(0)  # the small processing buffer's batch closes
    core.runtime.run_soon()


def _run(core: Core, worker: str) -> None:
    core.runtime.worker(worker).run()
    core.runtime.run_soon()


def test_replays_deliver_each_backlog_in_order_one_replay_at_a_time(core):
    runtime = core.runtime
    names = ["a", "b", "c"]
    _subscribe(core, names)
    core.store.commit(
        [
            StoreTransaction(
                appends=tuple(StoredMessage(f"m{i}", TOPIC, (), b"%d" % i) for i in range(35))
            )
        ]
    )
    outs = {name: _attach(core, name, number) for number, name in enumerate(names, start=1)}
    most_at_once = 0
    bodies: dict[str, list[bytes]] = {name: [] for name in names}
    replays = core.replays
    for _ in range(200):
        most_at_once = max(most_at_once, len(replays.active))
        _run(core, "store")
        for name in names:  # the clients read what was delivered
            bodies[name] += _bodies(outs[name])
        runtime.advance(0.02)
        if not replays.active and not replays.waiting and not runtime.workers["store"].calls:
            break
    assert most_at_once == 1
    for name in names:
        assert bodies[name] == [b"%d" % i for i in range(35)]
    topic = core.destinations.topics[TOPIC]
    assert all(not s.replaying for s in topic.consumers)
    for _ in range(3):  # the positions acknowledged in auto mode reach the store
        runtime.advance(0.05)
        _run(core, "log")
    assert sorted(s.acked_seq for s in core.store.subscriptions()) == [35] * 3


def _replay_with_commits(core: Core, order: str) -> list[bytes]:
    """Five stored messages to replay; three more are published while the first read is
    on its way. A read sees what was durable when it ran (the commit's result reached
    the event loop): ``order`` is that of the read running, the commit's write reaching
    the event loop and the read's result reaching it."""
    _subscribe(core, ["a"])
    _publish(core, ["0", "1", "2", "3", "4"])
    _run(core, "log")
    out = _attach(core, "a", 1)
    runtime = core.runtime
    _publish(core, ["5", "6", "7"])
    store, writer = runtime.workers["store"], runtime.workers["log"]
    [read] = store.calls
    [commit] = writer.calls
    store.calls.clear()
    writer.calls.clear()
    steps = {"read": read, "commit": commit}
    results = {}
    for step in order.split(","):
        name, _, phase = step.partition(" ")
        call, done, _ = steps[name]
        if phase == "runs":
            results[name] = call()
        else:
            if name == "commit":
                results[name] = call()
            done(results[name])
            runtime.run_soon()
    for _ in range(20):  # whatever reads follow
        runtime.advance(0.02)
        _run(core, "store")
        _run(core, "log")
    return _bodies(out)


@pytest.mark.parametrize(
    "order",
    [
        "read runs,read delivered,commit delivered",
        "read runs,commit delivered,read delivered",
        "commit delivered,read runs,read delivered",
    ],
)
def test_messages_committed_during_a_replay_arrive_once_and_in_order(core, order):
    bodies = _replay_with_commits(core, order)
    assert bodies == [b"%d" % i for i in range(8)]
    [subscription] = core.destinations.topics[TOPIC].consumers
    assert not subscription.replaying
