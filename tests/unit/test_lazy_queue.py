"""A queue makes the parts most queues never use when it first needs them (queue.py's
docstring): an idle queue keeps none of them, and once made they behave as ever.

On the ``Net`` of ``tests/unit/net.py``: a real core on a fake clock, simulated sockets.
"""

from __future__ import annotations

from tests.unit.net import PERSISTENT, Peer, frame
from wiremq.config.groups import WatermarkLimits
from wiremq.modules.destinations.backlog import NO_POSITIONS, NONE_LEFT
from wiremq.modules.destinations.destination import NO_PRODUCERS
from wiremq.modules.domains import P2P
from wiremq.modules.flow.watermarks import Watermark


def _nack(peer: Peer, message) -> None:
    peer.feed(frame("NACK", {"id": message.headers["ack"]}))


def test_an_idle_queue_keeps_no_part_it_does_not_use(make_net):
    net = make_net(persistent=True)
    producer = Peer(net, "producer")
    producer.send("/queue/idle", "waits")
    producer.send("/queue/idle", "stored", PERSISTENT)
    queue = net.queue("/queue/idle")
    assert queue.plain_dispatch is None and queue.selective_dispatch is None
    assert queue.redelivery is None
    backlog = queue.backlog
    assert backlog.left is NONE_LEFT and backlog.given_back is NO_POSITIONS
    assert backlog.withheld is NO_POSITIONS
    producer.send("/queue/another", "waits too")
    shared = net.core.destinations.services.queue_store
    assert backlog.settings is shared and net.queue("/queue/another").backlog.settings is shared
    assert queue.producers == {producer.connection.core_session.reading}
    producer.connection.connection_lost()
    net.settle()
    assert queue.producers is NO_PRODUCERS
    state = queue.state()
    assert state["messages"] == 2 and state["selectors"] == [] and state["message_groups"] == 0
    assert state["exclusive_consumer"] is None and state["redelivery_delayed"] == 0

    consumer = Peer(net, "consumer")
    consumer.subscribe("/queue/idle")
    assert consumer.bodies() == ["waits", "stored"]
    assert queue.plain_dispatch is not None and not queue.selective


def test_a_first_consumer_with_a_selector_finds_what_waited_for_it(make_net):
    net = make_net()
    producer = Peer(net, "producer")
    for n in range(6):
        producer.send("/queue/sel", f"m{n}", {"k": str(n % 2)})
    assert net.queue("/queue/sel").selective_dispatch is None
    odd = Peer(net, "odd")
    odd.subscribe("/queue/sel", selector="k = 1")
    assert odd.bodies() == ["m1", "m3", "m5"]
    everyone = Peer(net, "everyone")
    everyone.subscribe("/queue/sel")
    assert everyone.bodies() == ["m0", "m2", "m4"]
    state = net.queue("/queue/sel").state()
    assert state["selectors"] == ["k = 1"] and state["messages"] == 0


def test_a_first_group_message_on_a_queue_without_consumers_turns_it_selective(make_net):
    net = make_net()
    producer = Peer(net, "producer")
    producer.send("/queue/g", "plain")
    for n in range(3):
        producer.send("/queue/g", f"a{n}", {"JMSXGroupID": "A"})
    queue = net.queue("/queue/g")
    assert queue.selective and queue.selective_dispatch is not None
    assert queue.plain_dispatch is None, "no consumer yet"
    first, second = Peer(net, "first"), Peer(net, "second")
    first.subscribe("/queue/g", ack="client-individual")
    second.subscribe("/queue/g")
    delivered = first.messages + second.messages
    groups = {m.body.decode(): m for m in delivered}
    assert sorted(groups) == ["a0", "a1", "a2", "plain"]
    owners = {id(p) for p in (first, second) for m in p.messages if m.body != b"plain"}
    assert len(owners) == 1, "every message of group A went to one consumer"
    assert groups["a0"].headers.get("JMSXGroupFirstForConsumer") == "true"
    assert queue.state()["message_groups"] == 1


def test_the_first_message_that_comes_back_makes_the_redelivery_state(make_net):
    net = make_net(destinations={"/queue/r": {"maxredeliveries": 1, "redeliverydelay": 1000}})
    producer, consumer, dead = Peer(net, "p"), Peer(net, "c"), Peer(net, "d")
    dead.subscribe("/queue/DMQ")
    consumer.subscribe("/queue/r", ack="client-individual")
    producer.send("/queue/r", "back")
    queue = net.queue("/queue/r")
    assert queue.redelivery is None
    [message] = consumer.messages
    consumer.writer.frames.clear()
    consumer.input.append(frame("NACK", {"id": message.headers["ack"]}))
    consumer.take_input()
    assert queue.state()["redelivery_delayed"] == 1, "waits out its delay"
    assert not queue.unused()
    net.settle()  # the delay passes on the fake clock
    [again] = consumer.messages
    assert again.headers["redelivered"] == "true" and again.headers["x-delivery-count"] == "1"
    assert queue.state()["redelivery_delayed"] == 0
    _nack(consumer, again)
    [moved] = dead.messages
    assert moved.headers["dead-reason"] == "redelivery limit"


def test_an_own_watermark_switched_on_live_counts_what_the_queue_holds_and_stops(make_net):
    net = make_net()
    producer = Peer(net, "producer")
    producer.send("/queue/w", "1")
    producer.send("/queue/other", "x")
    queue = net.queue("/queue/w")
    assert queue.own_volatile is None and queue.own == []
    assert producer.connection.core_session.reading in queue.producers
    net.settings.change(
        {"VolQueueStoreImpl.msghighwatermark": 2, "VolQueueStoreImpl.msglowwatermark": 0}
    )
    watermark = queue.own_volatile
    assert watermark is not None and queue.own == [watermark]
    assert watermark.gauge.messages == 1, "it counts what the queue held"
    assert watermark in queue.gates
    assert [w["name"] for w in queue.state()["watermarks"]][-1] == "VolQueueStore /queue/w"
    producer.send("/queue/w", "2")
    assert producer.reader.calls == ["pause"]
    consumer = Peer(net, "consumer")
    consumer.subscribe("/queue/w")
    assert consumer.bodies() == ["1", "2"]
    assert producer.reader.calls == ["pause", "resume"]


def test_a_gate_added_while_the_server_runs_stops_every_destinations_producers(make_net):
    net = make_net()
    producer = Peer(net, "producer")
    producer.send("/queue/early", "1")
    limits = WatermarkLimits(1, 0, -1, -1)
    gate = Watermark("late gate", limits, lambda: net.core.flow.producers[P2P])
    net.core.flow.add_gate(P2P, gate)
    assert gate in net.queue("/queue/early").gates
    Peer(net, "other").send("/queue/later", "2")
    assert gate in net.queue("/queue/later").gates
    gate.add(1, 1)
    assert producer.reader.calls == ["pause"]
    gate.remove(1, 1)
    assert producer.reader.calls == ["pause", "resume"]
