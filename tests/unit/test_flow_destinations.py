"""Flow control inside the server, deterministically: watermarks, windows, topic policies.

On the ``Net`` of ``tests/unit/net.py``: a real core on a fake clock, simulated sockets.
"""

from __future__ import annotations

import pytest

from tests.defaults import EGRESS_LIMITS as DEFAULT_LIMITS
from tests.unit.net import PERSISTENT, Net, Peer, send_frame
from wiremq.modules.domains import P2P, domain_of
from wiremq.modules.flow.egress_queues import EgressQueue, QueueLimits
from wiremq.modules.pipeline.prioqueue import PrioQueueModule


def _volatile_count(net: Net, name: str) -> int:
    return net.core.volatile.counter(name).messages


# -- watermarks that stop producers ---------------------------------------------------------


def test_a_global_watermark_stops_every_queue_producer_until_its_low_watermark(make_net):
    net = make_net(
        {
            "VolQueueStoreImpl.globalmsghighwatermark": 6,
            "VolQueueStoreImpl.globalmsglowwatermark": 3,
        }
    )
    a, b, publisher = Peer(net, "a"), Peer(net, "b"), Peer(net, "publisher")
    publisher.send("/topic/news", "t0")
    for i in range(4):
        a.send("/queue/a", f"a{i}")
    b.send("/queue/b", "b0")
    assert a.reader.calls == b.reader.calls == []
    b.send("/queue/b", "b1")  # the sixth message in the VolQueueStore
    assert net.core.flow.volatile.tripped
    assert a.reader.calls == ["pause"] and b.reader.calls == ["pause"]
    b.send("/queue/b", "held")  # the server does not read it
    assert _volatile_count(net, "/queue/b") == 2 and list(b.input)
    publisher.send("/topic/news", "t1")  # another domain's producers go on
    assert publisher.reader.calls == [] and not publisher.input

    consumer = Peer(net, "consumer")
    consumer.subscribe("/queue/a", ack="client-individual", consumerQueueEntriesSize="2")
    assert consumer.bodies() == ["a0", "a1"]
    assert a.reader.calls == ["pause"], "4 messages left: above the low watermark (3)"
    consumer.ack(consumer.messages[0])
    assert consumer.bodies() == ["a0", "a1", "a2"]
    assert a.reader.calls == ["pause", "resume"] and b.reader.calls == ["pause", "resume"]
    assert not b.input and _volatile_count(net, "/queue/b") == 3, "the held SEND was read"
    assert net.core.flow.volatile.trips == 1


def test_a_destination_watermark_stops_only_that_destinations_producers(make_net):
    net = make_net(
        {"VolQueueStoreImpl.msghighwatermark": 3, "VolQueueStoreImpl.msglowwatermark": 1}
    )
    a, b = Peer(net, "a"), Peer(net, "b")
    for i in range(3):
        a.send("/queue/a", f"a{i}")
    b.send("/queue/b", "b0")
    assert a.reader.calls == ["pause"] and b.reader.calls == []
    late = Peer(net, "late")
    late.send("/queue/a", "late0")  # a new sender while tripped: read, then stopped
    late.send("/queue/a", "late1")
    assert late.reader.calls == ["pause"] and list(late.input)
    assert _volatile_count(net, "/queue/a") == 4
    other = Peer(net, "other")
    other.send("/queue/b", "b1")  # /queue/b holds 2: below its high watermark
    assert other.reader.calls == [] and not net.core.flow.volatile.tripped

    consumer = Peer(net, "consumer")
    consumer.subscribe("/queue/a")
    assert consumer.bodies() == ["a0", "a1", "a2", "late0", "late1"]
    assert a.reader.calls == late.reader.calls == ["pause", "resume"]


def test_a_producer_stopped_by_two_watermarks_resumes_only_when_both_have_cleared(make_net):
    net = make_net(
        {
            "VolQueueStoreImpl.globalmsghighwatermark": 6,
            "VolQueueStoreImpl.globalmsglowwatermark": 2,
            "VolQueueStoreImpl.msghighwatermark": 3,
            "VolQueueStoreImpl.msglowwatermark": 1,
        }
    )
    a, b = Peer(net, "a"), Peer(net, "b")
    for i in range(3):
        a.send("/queue/a", f"a{i}")  # /queue/a's own watermark trips
    for i in range(3):
        b.send("/queue/b", f"b{i}")  # then the global one (6 in all)
    assert a.reader.calls == ["pause"] and b.reader.calls == ["pause"]
    assert len(a.connection.core_session.reading.stops) == 2
    drain_a = Peer(net, "drain-a")
    drain_a.subscribe("/queue/a", ack="client-individual", consumerQueueEntriesSize="2")
    assert not net.queue("/queue/a").own_volatile.tripped  # 1 left: cleared
    assert net.core.flow.volatile.tripped  # 4 in all: not yet at 2
    assert a.reader.calls == ["pause"]
    drain_b = Peer(net, "drain-b")
    drain_b.subscribe("/queue/b")
    assert a.reader.calls == b.reader.calls == ["pause", "resume"]


def test_a_stopped_producer_that_goes_away_is_forgotten(make_net):
    net = make_net(
        {"VolQueueStoreImpl.msghighwatermark": 2, "VolQueueStoreImpl.msglowwatermark": 0}
    )
    gone = Peer(net, "gone")
    gone.send("/queue/g", "1")
    gone.send("/queue/g", "2")
    watermark = net.queue("/queue/g").own_volatile
    assert watermark.stopped == {gone.connection.core_session.reading}
    gone.connection.connection_lost()
    assert watermark.stopped == set()
    assert gone.connection.core_session.reading not in net.core.flow.producers[P2P]
    Peer(net, "consumer").subscribe("/queue/g")
    assert gone.reader.calls == ["pause"], "a closed connection is not resumed"


@pytest.mark.parametrize(
    ("values", "enabled"),
    [
        ({}, False),  # per-destination watermarks are off by default
        ({"VolQueueStoreImpl.msghighwatermark": 5, "VolQueueStoreImpl.msglowwatermark": 2}, True),
        ({"VolQueueStoreImpl.bytehighwatermark": 9, "VolQueueStoreImpl.bytelowwatermark": 0}, True),
    ],
)
def test_minus_one_switches_a_watermark_off(make_net, values, enabled):
    net = make_net(values)
    Peer(net, "p").send("/queue/x", "m")
    assert (net.queue("/queue/x").own_volatile is not None) is enabled


# -- consumer windows -----------------------------------------------------------------------


def test_a_consumer_with_a_full_window_is_skipped_for_the_others(make_net):
    net = make_net()
    producer = Peer(net, "producer")
    for i in range(10):
        producer.send("/queue/w", f"m{i}")
    x, y = Peer(net, "x"), Peer(net, "y")
    x.subscribe("/queue/w", ack="client-individual", consumerQueueEntriesSize="2")
    y.subscribe("/queue/w", ack="client-individual", consumerQueueEntriesSize="3")
    assert x.bodies() == ["m0", "m1"] and y.bodies() == ["m2", "m3", "m4"]
    assert net.queue("/queue/w").state()["ready_consumers"] == 0
    acked = {x: 0, y: 0}
    while len(x.messages) + len(y.messages) < 10:
        consumer = x if acked[x] < len(x.messages) else y
        consumer.ack(consumer.messages[acked[consumer]])
        acked[consumer] += 1
        for peer, window in ((x, 2), (y, 3)):
            subscription = peer.connection.core_session.subscriptions.by_id["1"]
            assert subscription.inflight_messages <= window
            assert len(peer.messages) - acked[peer] == subscription.inflight_messages
    bodies = x.bodies() + y.bodies()
    assert sorted(bodies, key=lambda b: int(b[1:])) == [f"m{i}" for i in range(10)]
    assert len(set(bodies)) == 10, "each message delivered exactly once"


@pytest.mark.parametrize("header", ["consumerQueueEntriesBytes", "prefetch-bytes", None])
def test_a_window_in_bytes_hands_over_whole_messages_while_not_full(make_net, header):
    destinations = {} if header else {"/queue/b": {"consumerQueueEntriesBytes": 250}}
    net = make_net(destinations=destinations)
    producer = Peer(net, "producer")
    for i in range(6):
        producer.send("/queue/b", f"{i}" * 100)
    consumer = Peer(net, "consumer")
    consumer.subscribe("/queue/b", ack="client-individual", **({header: "250"} if header else {}))
    assert len(consumer.messages) == 3  # 0, 100, 200 bytes in flight were below 250
    consumer.ack(consumer.messages[0])
    assert len(consumer.messages) == 4


def test_in_auto_mode_the_window_counts_frames_not_yet_written(make_net):
    net = make_net()
    consumer = Peer(net, "consumer")
    consumer.writer.window_open = False
    consumer.subscribe("/queue/auto", consumerQueueEntriesSize="3")
    producer = Peer(net, "producer")
    for i in range(6):
        producer.send("/queue/auto", f"m{i}")
    subscription = consumer.connection.core_session.subscriptions.by_id["1"]
    assert subscription.inflight_messages == 3 and not subscription.ready
    assert consumer.egress.queues.stats()["D-1"]["length_msgs"] == 3
    assert _volatile_count(net, "/queue/auto") == 3
    consumer.open_window()
    assert consumer.bodies() == [f"m{i}" for i in range(6)]
    assert subscription.inflight_messages == 0 and subscription.ready


@pytest.mark.parametrize(
    ("values", "count"),
    [({"MessageSpool.maxdeliveredunacked": 4}, 4), ({"MessageSpool.maxdeliveredunacked": -1}, 10)],
)
def test_the_server_wide_delivered_unacknowledged_limit(make_net, values, count):
    net = make_net(values)
    producer = Peer(net, "producer")
    for name in ("/queue/u1", "/queue/u2"):
        for i in range(5):
            producer.send(name, f"{name[-2:]}-{i}")
    consumers = [Peer(net, "c1"), Peer(net, "c2")]
    consumers[0].subscribe("/queue/u1", ack="client-individual")
    consumers[1].subscribe("/queue/u2", ack="client-individual")
    delivered = sum(len(c.messages) for c in consumers)
    assert delivered == count and net.core.unacked.count == count
    acked = [0, 0]
    while acked != [5, 5]:
        i = next(i for i in (0, 1) if acked[i] < len(consumers[i].messages))
        consumers[i].ack(consumers[i].messages[acked[i]])
        acked[i] += 1
        assert net.core.unacked.count <= count
    assert sorted(b for c in consumers for b in c.bodies()) == sorted(
        f"{q}-{i}" for q in ("u1", "u2") for i in range(5)
    )
    assert net.core.unacked.count == 0


# -- the topic live buffer and slow-subscriber policies -------------------------------------


@pytest.mark.parametrize("scope", ["topicglobal", "topic"])
def test_block_keeps_messages_for_a_slow_subscriber_and_stops_publishers(make_net, scope):
    """Under ``block`` (the default), what a slow subscriber cannot take waits in the live
    buffer; at its high watermark the publishers concerned stop, until the low one."""
    net = make_net(
        {
            f"DestinationManager.{scope}msghighwatermark": 5,
            f"DestinationManager.{scope}msglowwatermark": 2,
        }
    )
    fast, slow = Peer(net, "fast"), Peer(net, "slow")
    fast.subscribe("/topic/t")
    slow.subscribe("/topic/t", ack="client-individual", consumerQueueEntriesSize="2")
    publisher, other = Peer(net, "publisher"), Peer(net, "other")
    for i in range(7):
        publisher.send("/topic/t", f"m{i}")
    topic = net.topic("/topic/t")
    assert topic.state()["live_buffer_messages"] == 5  # m2..m6: the slow one has m0, m1
    assert publisher.reader.calls == ["pause"]
    publisher.send("/topic/t", "m7")  # waits in the socket
    assert fast.bodies() == [f"m{i}" for i in range(7)] and slow.bodies() == ["m0", "m1"]
    other.send("/topic/elsewhere", "x")
    assert other.reader.calls == (["pause"] if scope == "topicglobal" else [])

    slow.ack(slow.messages[0])
    slow.ack(slow.messages[1])
    assert publisher.reader.calls == ["pause"], "3 buffered: not yet at the low watermark"
    slow.ack(slow.messages[2])
    assert publisher.reader.calls == ["pause", "resume"]
    acked = 3
    while acked < len(slow.messages):
        slow.ack(slow.messages[acked])
        acked += 1
    everything = [f"m{i}" for i in range(8)]
    assert fast.bodies() == everything and slow.bodies() == everything
    assert topic.state()["live_buffer_messages"] == 0


def test_discard_oldest_drops_a_slow_subscribers_oldest_direct_messages_only(make_net):
    net = make_net(
        destinations={"/topic/x": {"slowsubscriberpolicy": "discard-oldest"}}, persistent=True
    )
    small = tuple(QueueLimits(2, 2) for _ in range(4)) + (DEFAULT_LIMITS[EgressQueue.G1],)
    fast, slow = Peer(net, "fast"), Peer(net, "slow", limits=small)
    fast.subscribe("/topic/x")
    slow.subscribe("/topic/x")
    slow.writer.window_open = False  # it stops reading
    publisher = Peer(net, "publisher")
    persistent = {4, 9, 14, 19}
    for i in range(20):
        publisher.send("/topic/x", str(i), PERSISTENT if i in persistent else None)
    assert publisher.reader.calls == [], "the publisher never waits for the slow subscriber"
    assert fast.bodies() == [str(i) for i in range(20)]
    assert net.topic("/topic/x").state()["live_buffer_messages"] == 0

    slow.open_window()
    got = [int(b) for b in slow.bodies()]
    assert len(got) < 20
    assert [i for i in got if i in persistent] == sorted(persistent), "persistent: all kept"
    direct = [i for i in got if i not in persistent]
    assert direct == sorted(direct) and direct[-1] == 18, "the oldest ones were dropped"
    assert slow.writer.discards[0] > 0, "the first message after the discards says so"
    assert sum(slow.writer.discards) == 20 - len(got)
    assert slow.egress.queues.stats()["total"]["discards_msgs"] == 20 - len(got)


LIVE_BUFFER_AT_3 = {
    "DestinationManager.topicglobalmsghighwatermark": 3,
    "DestinationManager.topicglobalmsglowwatermark": 1,
}


def test_disconnect_drops_the_slow_subscriber_with_an_error_and_others_go_on(make_net):
    """Under ``disconnect``, a subscriber that holds the live buffer past its high
    watermark is disconnected, instead of the publishers being stopped for it."""
    net = make_net(LIVE_BUFFER_AT_3, {"/topic/d": {"slowsubscriberpolicy": "disconnect"}})
    fast, slow = Peer(net, "fast"), Peer(net, "slow")
    fast.subscribe("/topic/d")
    slow.subscribe("/topic/d", ack="client-individual", consumerQueueEntriesSize="2")
    publisher = Peer(net, "publisher")
    for i in range(3):
        publisher.send("/topic/d", f"m{i}")
    assert net.core.flow.slow_disconnects == 0, "one message behind: below the watermark"
    for i in range(3, 8):
        publisher.send("/topic/d", f"m{i}")
    assert slow.bodies() == ["m0", "m1"]
    assert slow.writer.frames[-1].command == "ERROR"
    assert slow.writer.frames[-1].headers["message"] == "slow subscriber"
    assert slow.writer.closed and net.core.flow.slow_disconnects == 1
    topic = net.topic("/topic/d")
    assert [s.slow_drop for s in topic.consumers] == [fast.connection.core_session.subscriptions]
    assert fast.bodies() == [f"m{i}" for i in range(8)]
    assert publisher.reader.reading and not publisher.input, "the publisher goes on"
    assert topic.state()["live_buffer_messages"] == 0


def test_nothing_follows_the_error_of_a_disconnected_slow_subscriber(make_net):
    """STOMP: the connection is closed right after an ERROR. Deliveries still waiting in
    the slow subscriber's egress when it is disconnected must not follow its ERROR."""
    net = make_net(LIVE_BUFFER_AT_3, {"/topic/d": {"slowsubscriberpolicy": "disconnect"}})
    slow = Peer(net, "slow")
    slow.subscribe("/topic/d", ack="client-individual", consumerQueueEntriesSize="2")
    publisher = Peer(net, "publisher")
    publisher.feed(b"".join(send_frame("/topic/d", f"m{i}") for i in range(6)))  # one read
    assert net.core.flow.slow_disconnects == 1 and slow.writer.closed
    assert slow.writer.frames[-1].command == "ERROR", [f.command for f in slow.writer.frames]


def test_disconnect_spares_a_subscriber_that_keeps_up_while_another_topic_fills_the_buffer(
    make_net,
):
    net = make_net(LIVE_BUFFER_AT_3, {"/topic/d": {"slowsubscriberpolicy": "disconnect"}})
    stuck = Peer(net, "stuck")  # on a `block` topic: it holds three messages back
    stuck.subscribe("/topic/b", ack="client-individual", consumerQueueEntriesSize="1")
    other = Peer(net, "other")
    for i in range(4):
        other.send("/topic/b", f"b{i}")
    assert net.core.flow.live.tripped
    keeper = Peer(net, "keeper")  # its TCP window is open: it reads everything at once
    keeper.subscribe("/topic/d", consumerQueueEntriesSize="2")
    publisher = Peer(net, "publisher")
    publisher.feed(b"".join(send_frame("/topic/d", f"m{i}") for i in range(5)))  # one read
    assert keeper.errors == [] and net.core.flow.slow_disconnects == 0
    assert keeper.bodies() == [f"m{i}" for i in range(5)]


def test_disconnect_spares_a_subscriber_that_keeps_up_with_a_burst(make_net):
    net = make_net(destinations={"/topic/d": {"slowsubscriberpolicy": "disconnect"}})
    subscriber = Peer(net, "subscriber")
    subscriber.subscribe("/topic/d", consumerQueueEntriesSize="2")  # its TCP window is open
    publisher = Peer(net, "publisher")
    publisher.feed(b"".join(send_frame("/topic/d", f"m{i}") for i in range(5)))  # one read
    assert subscriber.errors == []
    assert subscriber.bodies() == [f"m{i}" for i in range(5)]


def test_a_discard_oldest_subscriber_never_exceeds_its_window_or_the_unacked_limit(make_net):
    net = make_net(
        {"MessageSpool.maxdeliveredunacked": 5},
        {"/topic/x": {"slowsubscriberpolicy": "discard-oldest"}},
    )
    subscriber = Peer(net, "subscriber")
    subscriber.subscribe("/topic/x", ack="client-individual", consumerQueueEntriesSize="3")
    publisher = Peer(net, "publisher")
    for i in range(10):
        publisher.send("/topic/x", f"m{i}")
    subscription = subscriber.connection.core_session.subscriptions.by_id["1"]
    assert len(subscription.unacked) <= 3
    assert net.core.unacked.count <= 5


def test_a_discard_oldest_subscriber_at_its_window_loses_a_whole_reads_run_once_each(make_net):
    """One read of ten: the subscriber takes its window's three, the seven after are
    discarded one after another in the same dispatch, each counted once."""
    net = make_net({}, {"/topic/x": {"slowsubscriberpolicy": "discard-oldest"}})
    subscriber = Peer(net, "subscriber")
    subscriber.subscribe("/topic/x", ack="client-individual", consumerQueueEntriesSize="3")
    publisher = Peer(net, "publisher")
    publisher.feed(b"".join(send_frame("/topic/x", f"m{i}") for i in range(10)))  # one read
    assert subscriber.bodies() == ["m0", "m1", "m2"]
    state = net.topic("/topic/x").state()
    assert (state["delivered"], state["discarded"], state["live_buffer_messages"]) == (3, 7, 0)


# -- the thread/buffer module ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("destination", "group", "limit"),
    [
        ("/queue/pq", "P2PPrioQueue", "maxnummessages"),
        ("/topic/pq", "PubSubPrioQueue", "maxnummessages"),
        ("/queue/pq", "P2PPrioQueue", "maxnumbytes"),
    ],
)
def test_a_full_thread_buffer_stops_its_producers_until_it_has_handed_its_batch_on(
    make_net, destination, group, limit
):
    net = make_net({f"{group}.{limit}": 3 if limit == "maxnummessages" else 150})
    consumer = Peer(net, "consumer")
    consumer.subscribe(destination)
    producer = Peer(net, "producer")
    producer.feed(b"".join(send_frame(destination, f"{i}" * 60) for i in range(5)))  # one read
    chain = net.core.pipelines.chains[net.core.destinations.resolve(destination).domain]
    (module,) = [m for m in chain.modules if isinstance(m, PrioQueueModule)]
    assert module.watermark.trips == 1
    assert producer.reader.calls == ["pause", "resume"]
    assert consumer.bodies() == [f"{i}" * 60 for i in range(5)]


def _prioqueue(net: Net, destination: str) -> PrioQueueModule:
    chain = net.core.pipelines.chains[domain_of(destination)]
    (module,) = [m for m in chain.modules if isinstance(m, PrioQueueModule)]
    return module


def test_a_batch_that_cannot_fill_the_thread_buffer_goes_on_within_its_read(make_net):
    net = make_net()
    producer = Peer(net, "producer")
    producer.input.append(send_frame("/queue/pq", "now"))
    assert producer.take_input()  # the read alone: nothing it asked to run soon has run
    assert _volatile_count(net, "/queue/pq") == 1
    watermark = _prioqueue(net, "/queue/pq").watermark
    assert (watermark.gauge.messages, watermark.trips) == (0, 0)


def test_a_batch_waits_behind_what_the_thread_buffer_holds(make_net):
    net = make_net({"P2PPrioQueue.maxnummessages": 3})
    consumer = Peer(net, "consumer")
    consumer.subscribe("/queue/pq")
    producer = Peer(net, "producer")
    held = [send_frame("/queue/pq", f"a{i}") for i in range(5)]  # held: they reach the mark
    # the topic's SEND ends the queue's run: the last SEND is a batch of its own, which fits
    rest = [send_frame("/topic/elsewhere", "t"), send_frame("/queue/pq", "a5")]
    producer.feed(b"".join(held + rest))  # one read
    assert consumer.bodies() == [f"a{i}" for i in range(6)]
    assert _prioqueue(net, "/queue/pq").watermark.trips == 1


# -- egress priority ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("destination", "written"),
    [
        ("/topic/prio", ["r", "d3", "d2", "d1", "g1"]),
        # a queue's order holds over both delivery modes: what the queue handed over after
        # a persistent message still waiting goes in G-1 behind it
        ("/queue/prio", ["r", "d1", "g1", "d3", "d2"]),
    ],
)
def test_egress_drains_control_frames_then_classes_of_service_then_persistent(
    make_net, destination, written
):
    net = make_net(persistent=True)
    consumer = Peer(net, "consumer")
    consumer.subscribe(destination)
    consumer.writer.window_open = False
    producer = Peer(net, "producer")
    producer.send(destination, "d1")
    producer.send(destination, "g1", PERSISTENT)
    producer.send(destination, "d3", {"class-of-service": "3"})
    producer.send(destination, "d2", {"class-of-service": "2"})
    consumer.subscribe("/queue/other", sub_id="2", receipt="r")
    consumer.open_window()
    order = [
        f.headers["receipt-id"] if f.command == "RECEIPT" else f.body.decode()
        for f in consumer.writer.frames
    ]
    assert order == written


@pytest.mark.parametrize("value", ["0", "4", "high", ""])
def test_an_invalid_class_of_service_gets_an_error(make_net, value):
    net = make_net()
    producer = Peer(net, "producer")
    producer.send("/queue/cos", "m", {"class-of-service": value, "receipt": "r1"})
    (error,) = producer.errors
    assert error.headers["message"] == "invalid class-of-service header"
    assert error.headers["receipt-id"] == "r1"
    assert _volatile_count(net, "/queue/cos") == 0


# -- persistent stores: watermarks, whenfull, spool checks -----------------------------------


def _receipts(peer: Peer) -> list[str]:
    return [f.headers["receipt-id"] for f in peer.writer.frames if f.command == "RECEIPT"]


def test_a_persistent_store_watermark_blocks_its_producer_until_drained(make_net):
    net = make_net(
        {"PersQueueFileStore.msghighwatermark": 2, "PersQueueFileStore.msglowwatermark": 0},
        persistent=True,
    )
    producer = Peer(net, "producer")
    for i in range(3):
        producer.send("/queue/p", str(i), {**PERSISTENT, "receipt": f"r{i}"})
    assert _receipts(producer) == ["r0", "r1"] and producer.reader.calls == ["pause"]
    assert net.core.store.count("/queue/p")[0] == 2
    consumer = Peer(net, "consumer")
    consumer.subscribe("/queue/p")
    assert producer.reader.calls == ["pause", "resume"]
    assert _receipts(producer) == ["r0", "r1", "r2"]
    assert consumer.bodies() == ["0", "1", "2"]


def test_a_store_watermark_counts_messages_waiting_for_their_commit(make_net):
    net = make_net(
        {"PersQueueFileStore.msghighwatermark": 3, "PersQueueFileStore.msglowwatermark": 1},
        persistent=True,
    )
    net.workers_held = True  # the store is slow: commits lag behind reading
    producer = Peer(net, "producer")
    for i in range(10):
        producer.send("/queue/lagging", str(i), PERSISTENT)
    net.workers_held = False
    net.settle()
    assert producer.reader.calls == ["pause"]
    assert net.core.store.count("/queue/lagging")[0] <= 3


def test_a_topic_store_watermark_stops_publishers_until_durable_subscribers_acknowledge(
    make_net,
):
    net = make_net(
        {"TopicFileStore.msghighwatermark": 3, "TopicFileStore.msglowwatermark": 1},
        persistent=True,
    )
    durable = Peer(net, "durable")
    durable.subscribe("/topic/kept", ack="client", durable="true")
    publisher = Peer(net, "publisher")
    for i in range(4):
        publisher.send("/topic/kept", str(i), {**PERSISTENT, "receipt": f"r{i}"})
    assert net.core.store.count("/topic/kept")[0] == 3 and publisher.reader.calls == ["pause"]
    assert _receipts(publisher) == ["r0", "r1", "r2"]
    durable.ack(durable.messages[-1])  # cumulative: all three
    assert publisher.reader.calls == ["pause", "resume"]
    assert _receipts(publisher) == ["r0", "r1", "r2", "r3"]
    assert durable.bodies() == ["0", "1", "2", "3"]


def test_whenfull_fail_refuses_a_persistent_send_with_an_error_instead_of_blocking(make_net):
    net = make_net(
        {"PersQueueFileStore.msghighwatermark": 2, "PersQueueFileStore.msglowwatermark": 1},
        {"/queue/f": {"whenfull": "fail"}},
        persistent=True,
    )
    producer = Peer(net, "producer")
    for i in range(3):
        producer.send("/queue/f", str(i), {**PERSISTENT, "receipt": f"r{i}"})
    assert producer.reader.calls == []
    (error,) = producer.errors
    assert error.headers["receipt-id"] == "r2"
    assert b"destination full" in error.body


@pytest.mark.parametrize(
    ("values", "destinations"),
    [
        ({}, {"/queue/quota": {"spoolquota": 150}}),
        ({"MessageSpool.maxspoolusage": 150}, {}),
    ],
)
def test_a_spool_quota_holds_for_sends_pipelined_in_one_read(make_net, values, destinations):
    net = make_net(values, destinations, persistent=True)
    producer = Peer(net, "producer")
    producer.feed(
        b"".join(
            send_frame("/queue/quota", "x" * 60, {**PERSISTENT, "receipt": f"r{i}"})
            for i in range(4)
        )
    )
    assert net.core.store.totals("/queue/")[1] <= 150
    (error,) = producer.errors
    assert error.headers["message"] == "message not accepted"


def test_a_producer_stopped_by_a_watermark_is_not_timed_out_for_its_silence(make_net):
    net = make_net(
        {
            "VolQueueStoreImpl.msghighwatermark": 1,
            "VolQueueStoreImpl.msglowwatermark": 0,
            "StompListener.heartbeatreceive": 1000,
        }
    )
    producer = Peer(net, "producer", heart_beat="1000,0")
    producer.send("/queue/hb", "1")
    producer.send("/queue/hb", "2")  # waits: the producer is stopped
    assert producer.reader.calls == ["pause"]
    net.runtime.advance(10)  # the client's heart-beats wait in the socket meanwhile
    producer.connection.tick(net.clock())
    net.settle()
    assert producer.errors == [] and producer.connection.session.reading
    consumer = Peer(net, "consumer")
    consumer.subscribe("/queue/hb")
    assert consumer.bodies() == ["1", "2"]


# -- one query for every flow-control state -------------------------------------------------


def test_flow_state_shows_tripped_watermarks_stopped_producers_and_ready_consumers(make_net):
    net = make_net(
        {"VolQueueStoreImpl.msghighwatermark": 2, "VolQueueStoreImpl.msglowwatermark": 1}
    )
    producer = Peer(net, "producer")
    producer.send("/queue/full", "1")
    producer.send("/queue/full", "2")
    consumer, other = Peer(net, "consumer"), Peer(net, "other")
    other.send("/queue/busy", "a")  # below /queue/busy's own watermark
    consumer.subscribe("/queue/busy", ack="client-individual", consumerQueueEntriesSize="1")
    state = net.core.flow_state()
    clients = {c["peer"]: c for c in state["clients"]}
    assert clients["producer"]["reading"] is False
    assert clients["producer"]["stopped_by"] == ["<Watermark VolQueueStore /queue/full>"]
    assert clients["consumer"]["reading"] is True and clients["consumer"]["stopped_by"] == []
    (subscription,) = clients["consumer"]["subscriptions"]
    assert subscription["ready"] is False and subscription["inflight_messages"] == 1
    assert clients["consumer"]["egress"]["D-1"]["delivered_msgs"] == 1
    assert set(clients["consumer"]["egress"]) == {"C-1", "D-3", "D-2", "D-1", "G-1", "total"}
    queues = {q["name"]: q for q in state["queues"]}
    assert queues["/queue/busy"]["ready_consumers"] == 0
    tripped = {w["name"] for q in state["queues"] for w in q["watermarks"] if w["tripped"]}
    assert tripped == {"VolQueueStore /queue/full"}
    assert {w["name"] for w in state["watermarks"]} >= {"VolQueueStore", "TopicLiveBuffer"}
