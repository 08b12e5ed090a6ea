"""A plain queue with one consumer hands it each priority level's run at once
(``queue_plain._run_to``, ``Subscription.deliver_run``): it takes as far as its window
and its egress queues allow, what it cannot take waits in the queue in order, expired
messages met on the way leave, and the counts stay exact. Every run here is one socket
read of several SENDs.

On the ``Net`` of ``tests/unit/net.py``: a real core on a fake clock, simulated sockets.
"""

from __future__ import annotations

from tests.defaults import EGRESS_LIMITS as DEFAULT_LIMITS
from tests.unit.net import PERSISTENT, Peer, send_frame
from wiremq.modules.flow.egress_queues import EgressQueue, QueueLimits


def _publish(publisher: Peer, destination: str, bodies: list[str], headers=None) -> None:
    """All of ``bodies`` in one socket read."""
    publisher.feed(b"".join(send_frame(destination, body, headers) for body in bodies))


def test_a_lone_consumer_takes_a_run_as_far_as_its_window_and_the_rest_waits(make_net):
    net = make_net()
    consumer = Peer(net, "consumer")
    consumer.subscribe("/queue/run", ack="client-individual", consumerQueueEntriesSize="3")
    publisher = Peer(net, "publisher")
    bodies = [f"m{i}" for i in range(10)]
    _publish(publisher, "/queue/run", bodies)
    queue = net.queue("/queue/run")
    assert consumer.bodies() == ["m0", "m1", "m2"]
    assert [m.body.decode() for m in queue.waiting()] == bodies[3:]
    assert queue.held("VolQueueStore") == (7, 7 * len(b"m0"))  # the delivered left memory
    assert queue.state()["unacked"] == 3

    acked = 0
    while acked < len(consumer.messages):
        consumer.ack(consumer.messages[acked])
        acked += 1
    assert consumer.bodies() == bodies and acked == 10
    assert queue.waiting() == [] and queue.held("VolQueueStore") == (0, 0)
    assert queue.fates.acknowledged == 10


def test_a_run_keeps_the_queues_order_over_both_delivery_modes(make_net):
    """A run that holds persistent messages and then non-persistent ones: those after a
    persistent one go in G-1 behind it, so the client reads them in the queue's order (the
    D queues are written first)."""
    net = make_net(persistent=True)
    publisher = Peer(net, "publisher")
    _publish(publisher, "/queue/mixed", ["p0", "p1"], PERSISTENT)
    _publish(publisher, "/queue/mixed", ["n0", "n1"])
    _publish(publisher, "/queue/mixed", ["p2"], PERSISTENT)
    _publish(publisher, "/queue/mixed", ["n2"])
    queue = net.queue("/queue/mixed")
    assert [m.body for m in queue.waiting()] == [b"p0", b"p1", b"n0", b"n1", b"p2", b"n2"]
    consumer = Peer(net, "consumer")
    consumer.subscribe("/queue/mixed")  # the whole list is one run
    assert consumer.bodies() == ["p0", "p1", "n0", "n1", "p2", "n2"]
    state = queue.state()
    assert state["messages"] == 0 and state["live_buffer_bytes"] == 0


def test_a_lone_consumer_takes_what_its_egress_queue_admits_of_a_run(make_net):
    """Its egress queue's room (``min-msg-burst``, ``max-depth``) is counted across the run:
    it takes what the egress admits, the rest waits in the queue until it reads again."""
    small = (DEFAULT_LIMITS[EgressQueue.C1],) + tuple(QueueLimits(2, 2) for _ in range(3))
    small += (DEFAULT_LIMITS[EgressQueue.G1],)
    net = make_net()
    consumer = Peer(net, "consumer", limits=small)
    consumer.subscribe("/queue/run")
    consumer.writer.window_open = False  # it stops reading
    publisher = Peer(net, "publisher")
    bodies = [f"m{i}" for i in range(8)]
    _publish(publisher, "/queue/run", bodies)
    queue = net.queue("/queue/run")
    assert consumer.egress.queues.stats()["D-1"]["length_msgs"] == 2
    assert len(queue.waiting()) == 6
    (subscription,) = queue.consumers
    assert subscription.waiting, "skipped for not being ready: woken when it is"

    consumer.open_window()
    assert consumer.bodies() == bodies
    assert queue.waiting() == [] and queue.held("VolQueueStore") == (0, 0)


def test_expired_messages_within_a_run_leave_and_the_rest_is_delivered(make_net):
    net = make_net()
    consumer = Peer(net, "consumer")
    consumer.subscribe("/queue/exp", ack="client-individual", consumerQueueEntriesSize="1")
    publisher = Peer(net, "publisher")
    publisher.send("/queue/exp", "held")  # fills the window: the next wait in the queue
    soon = {"expires": str(net.runtime.now_ms() + 1000)}
    publisher.feed(
        send_frame("/queue/exp", "a"),
        send_frame("/queue/exp", "old", soon),
        send_frame("/queue/exp", "b"),
        send_frame("/queue/exp", "old", soon),
        send_frame("/queue/exp", "c"),
    )
    queue = net.queue("/queue/exp")
    assert len(queue.waiting()) == 5
    net.runtime.advance(2.0)  # both "old" are expired now, still listed

    acked = 0
    while acked < len(consumer.messages):
        consumer.ack(consumer.messages[acked])
        acked += 1
    assert consumer.bodies() == ["held", "a", "b", "c"]
    assert queue.fates.expired == 2 and queue.fates.acknowledged == 4
    assert queue.waiting() == [] and queue.held("VolQueueStore") == (0, 0)


def test_a_lone_selective_consumer_takes_what_it_selects_of_a_run_and_the_rest_waits(make_net):
    net = make_net()
    consumer = Peer(net, "eu")
    consumer.subscribe("/queue/sel", selector="region = 'EU'")
    publisher = Peer(net, "publisher")
    regions = ["EU", "US", "EU", "EU", "ASIA", "EU", "US"]
    publisher.feed(
        b"".join(
            send_frame("/queue/sel", f"m{i}", {"region": region})
            for i, region in enumerate(regions)
        )
    )
    queue = net.queue("/queue/sel")
    assert consumer.bodies() == ["m0", "m2", "m3", "m5"]
    assert [m.body for m in queue.waiting()] == [b"m1", b"m4", b"m6"]
    assert queue.held("VolQueueStore") == (3, 3 * len(b"m0"))

    anyone = Peer(net, "anyone")
    anyone.subscribe("/queue/sel")
    assert anyone.bodies() == ["m1", "m4", "m6"]
    assert queue.waiting() == [] and queue.held("VolQueueStore") == (0, 0)


def test_a_lone_selective_consumer_stops_at_its_window_and_takes_the_rest_in_order(make_net):
    """What it cannot take of a run is listed for it; a later run waits behind that."""
    net = make_net()
    consumer = Peer(net, "eu")
    consumer.subscribe(
        "/queue/sel",
        selector="region = 'EU'",
        ack="client-individual",
        consumerQueueEntriesSize="2",
    )
    publisher = Peer(net, "publisher")
    eu = {"region": "EU"}
    _publish(publisher, "/queue/sel", [f"a{i}" for i in range(5)], eu)
    assert consumer.bodies() == ["a0", "a1"]
    _publish(publisher, "/queue/sel", [f"b{i}" for i in range(5)], eu)
    assert consumer.bodies() == ["a0", "a1"]
    queue = net.queue("/queue/sel")
    assert len(queue.waiting()) == 8

    acked = 0
    while acked < len(consumer.messages):
        consumer.ack(consumer.messages[acked])
        acked += 1
    assert consumer.bodies() == [f"a{i}" for i in range(5)] + [f"b{i}" for i in range(5)]
    assert queue.waiting() == [] and queue.fates.acknowledged == 10
