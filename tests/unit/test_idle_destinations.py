"""Destinations nobody uses are removed after DestinationManager.idletimetolive, so that
names that come and go do not grow memory; nothing a destination holds is lost by it.

On the ``Net`` of ``tests/unit/net.py``: a real core on a fake clock, simulated sockets.
"""

from __future__ import annotations

from tests.unit.net import PERSISTENT, Peer, frame, send_frame

IDLE = 5.0
NAMES = 5000


def _sweep_after(net, seconds: float) -> None:
    """One pass of the idle sweep: a slice at a time, as ``Periodic`` runs it."""
    net.runtime.advance(seconds)
    while net.core.destinations.sweep_idle():
        pass


def test_destinations_used_once_and_emptied_are_removed_and_busy_ones_stay(make_net):
    net = make_net({"DestinationManager.idletimetolive": IDLE}, persistent=True)
    producer, consumer = Peer(net, "producer"), Peer(net, "consumer")
    names = [f"/queue/once-{n}" for n in range(NAMES)]
    producer.feed(*(send_frame(name, "once") for name in names))
    for n, name in enumerate(names):
        consumer.subscribe(name, sub_id=str(n))
        consumer.feed(frame("UNSUBSCRIBE", {"id": str(n)}))
    assert len(consumer.messages) == NAMES, "each queue was emptied"

    producer.send("/queue/kept-message", "waits")
    consumer.subscribe("/queue/kept-consumer", sub_id="q")
    consumer.subscribe("/topic/kept-subscriber", sub_id="t")
    durable = Peer(net, "durable")
    durable.subscribe("/topic/kept-durable", sub_id="d", persistent="true")
    durable.connection.connection_lost()  # its durable subscription outlives it

    _sweep_after(net, IDLE / 2)
    assert set(names) <= set(net.core.destinations.queues), "not removed before the period"
    _sweep_after(net, IDLE)
    queues, topics = net.core.destinations.queues, net.core.destinations.topics
    assert not set(names) & set(queues)
    assert set(queues) == {"/queue/kept-message", "/queue/kept-consumer"}
    assert set(topics) == {"/topic/kept-subscriber", "/topic/kept-durable"}
    assert not net.core.volatile._counts.keys() - set(queues), "their message stores went too"

    consumer.subscribe("/queue/kept-message", sub_id="late")
    assert consumer.bodies()[-1] == "waits"


def test_a_message_on_its_way_to_a_removed_queue_reaches_the_queue_made_again(make_net):
    net = make_net({"DestinationManager.idletimetolive": IDLE}, persistent=True)
    producer = Peer(net, "producer")
    net.workers_held = True  # the store is slow: the message waits for its commit
    producer.feed(send_frame("/queue/comeback", "in flight", {**PERSISTENT, "receipt": "r"}))
    _sweep_after(net, IDLE * 2)
    assert "/queue/comeback" not in net.core.destinations.queues
    net.workers_held = False
    net.settle()
    assert [f.headers["receipt-id"] for f in producer.writer.frames] == ["r"]
    consumer = Peer(net, "consumer")
    consumer.subscribe("/queue/comeback")
    assert consumer.bodies() == ["in flight"]


def test_a_producer_is_forgotten_where_it_sent_and_removed_destinations_are_let_go(make_net):
    """The registry knows where each producer sends (``DestinationServices.sending``), so
    that a disconnect does not walk every destination; a removed destination leaves it."""
    net = make_net({"DestinationManager.idletimetolive": IDLE})
    producer, consumer = Peer(net, "producer"), Peer(net, "consumer")
    consumer.subscribe("/queue/kept", sub_id="k")
    producer.send("/queue/kept", "one")
    producer.send("/topic/gone", "nobody listens")
    sending = net.core.destinations.services.sending
    (connection,) = sending  # the producer's connection, the only one that sent
    assert {d.name for d in sending[connection]} == {"/queue/kept", "/topic/gone"}
    _sweep_after(net, IDLE * 2)
    assert "/topic/gone" not in net.core.destinations.topics
    assert {d.name for d in sending[connection]} == {"/queue/kept"}, "the removed one let go"
    producer.connection.connection_lost()
    assert connection not in sending
    assert not net.core.destinations.queues["/queue/kept"].producers
