"""A topic hands the run of messages that arrived together to each subscriber at once
(``Topic.dispatch``, ``Subscription.deliver_run``): each takes as far as its window and its
egress queues allow, what it cannot take waits in the live buffer, and the counts stay
exact. Every run here is one socket read of several SENDs.

On the ``Net`` of ``tests/unit/net.py``: a real core on a fake clock, simulated sockets.
"""

from __future__ import annotations

from tests.defaults import EGRESS_LIMITS as DEFAULT_LIMITS
from tests.unit.net import PERSISTENT, Peer, send_frame
from wiremq.modules.flow.egress_queues import EgressQueue, QueueLimits


def _publish(publisher: Peer, destination: str, bodies: list[str], headers=None) -> None:
    """All of ``bodies`` in one socket read."""
    publisher.feed(b"".join(send_frame(destination, body, headers) for body in bodies))


def test_each_subscriber_takes_a_run_as_far_as_its_window_and_the_rest_waits(make_net):
    net = make_net(persistent=True)
    fast, slow = Peer(net, "fast"), Peer(net, "slow")
    fast.subscribe("/topic/run")
    slow.subscribe("/topic/run", ack="client-individual", consumerQueueEntriesSize="3")
    publisher = Peer(net, "publisher")
    bodies = [f"m{i}" for i in range(10)]
    # persistent and non-persistent alternate: two egress queues within the run
    publisher.feed(
        b"".join(
            send_frame("/topic/run", body, PERSISTENT if i % 2 else None)
            for i, body in enumerate(bodies)
        )
    )
    topic = net.topic("/topic/run")
    assert sorted(fast.bodies()) == bodies
    assert sorted(slow.bodies()) == ["m0", "m1", "m2"]  # written D-1 first, then G-1
    state = topic.state()
    assert state["live_buffer_messages"] == 7 and topic.held("TopicLiveBuffer")[0] == 7
    assert net.core.flow.live.gauge.messages == 7, "the global live buffer counts them too"

    acked = 0
    while acked < len(slow.messages):
        slow.ack(slow.messages[acked])
        acked += 1
    assert sorted(slow.bodies()) == bodies and acked == 10
    assert topic.state()["live_buffer_messages"] == 0
    assert net.core.flow.live.gauge.messages == 0


def test_a_run_that_everyone_takes_never_counts_in_the_live_buffer(make_net):
    """What every subscriber takes at once never waited: a live-buffer watermark below the
    run's size stops no publisher."""
    net = make_net(
        {
            "DestinationManager.topicglobalmsghighwatermark": 3,
            "DestinationManager.topicglobalmsglowwatermark": 1,
        }
    )
    first, second = Peer(net, "first"), Peer(net, "second")
    first.subscribe("/topic/run")
    second.subscribe("/topic/run")
    publisher = Peer(net, "publisher")
    bodies = [f"m{i}" for i in range(20)]
    _publish(publisher, "/topic/run", bodies)
    assert first.bodies() == bodies and second.bodies() == bodies
    assert publisher.reader.calls == []
    assert net.topic("/topic/run").state()["live_buffer_messages"] == 0


def test_a_subscriber_takes_what_its_egress_queue_admits_of_a_run(make_net):
    """Its egress queue's room (``min-msg-burst``, ``max-depth``) is counted across the run:
    it takes what the queue admits, the rest waits for it in order."""
    small = (DEFAULT_LIMITS[EgressQueue.C1],) + tuple(QueueLimits(2, 2) for _ in range(3))
    small += (DEFAULT_LIMITS[EgressQueue.G1],)
    net = make_net()
    fast, slow = Peer(net, "fast"), Peer(net, "slow", limits=small)
    fast.subscribe("/topic/run")
    slow.subscribe("/topic/run")
    slow.writer.window_open = False  # it stops reading
    publisher = Peer(net, "publisher")
    bodies = [f"m{i}" for i in range(8)]
    _publish(publisher, "/topic/run", bodies)
    assert fast.bodies() == bodies
    assert slow.egress.queues.stats()["D-1"]["length_msgs"] == 2
    assert net.topic("/topic/run").state()["live_buffer_messages"] == 6

    slow.open_window()
    assert slow.bodies() == bodies
    assert net.topic("/topic/run").state()["live_buffer_messages"] == 0


def test_messages_no_subscriber_takes_are_discarded_once_each(make_net):
    net = make_net()
    publisher = Peer(net, "publisher")
    _publish(publisher, "/topic/nobody", [f"m{i}" for i in range(5)])
    assert net.topic("/topic/nobody").fates.discarded == 5

    eu, us = Peer(net, "eu"), Peer(net, "us")
    eu.subscribe("/topic/sel", selector="region = 'EU'")
    us.subscribe("/topic/sel", selector="region = 'US'")
    regions = ["EU", "US", "ASIA", "EU", "ASIA", "ASIA"]
    publisher.feed(
        b"".join(
            send_frame("/topic/sel", f"m{i}", {"region": region})
            for i, region in enumerate(regions)
        )
    )
    assert eu.bodies() == ["m0", "m3"] and us.bodies() == ["m1"]
    topic = net.topic("/topic/sel")
    assert topic.fates.discarded == 3, "the three ASIA messages, once each"
    assert topic.state()["live_buffer_messages"] == 0


def test_a_run_an_egress_discards_from_gives_its_window_slots_back(make_net):
    """A ``discard-oldest`` subscriber's egress drops its oldest deliveries as a run comes
    in: the window counts only what still waits in it, so that nothing is held back later
    for slots the discarded deliveries took."""
    net = make_net(destinations={"/topic/x": {"slowsubscriberpolicy": "discard-oldest"}})
    small = tuple(QueueLimits(2, 2) for _ in range(4)) + (DEFAULT_LIMITS[EgressQueue.G1],)
    slow = Peer(net, "slow", limits=small)
    slow.subscribe("/topic/x")
    slow.writer.window_open = False  # it stops reading
    publisher = Peer(net, "publisher")
    _publish(publisher, "/topic/x", [f"m{i}" for i in range(10)])
    _publish(publisher, "/topic/x", [f"n{i}" for i in range(10)])
    (subscription,) = net.topic("/topic/x").consumers
    waiting = slow.egress.queues.stats()["total"]["length_msgs"]
    assert waiting == 2 and subscription.inflight_messages == waiting
    assert subscription.delivered == 20
    assert net.topic("/topic/x").fates.discarded == 18

    slow.open_window()
    assert slow.bodies() == ["n8", "n9"] and slow.writer.discards[0] == 18
    assert subscription.inflight_messages == 0 and subscription.inflight_bytes == 0
