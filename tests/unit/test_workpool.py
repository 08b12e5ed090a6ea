"""The work pools bound a burst of large messages: on a whole core with simulated sockets,
consumers that do not read hold at most maxthreads x maxprocessoriterations encoded large
frames per pool, and everything is delivered, in order, once they read."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from tests.unit.net import Net, Peer, frame, send_frame

KIB = 1024
LARGE = 200 * KIB  # over MemWatch.messagethreshold
QUEUES = 6
PER_QUEUE = 4


def _encoded_large_frames(peers: list[Peer]) -> int:
    """Large MESSAGE frames waiting in the consumers' egress queues."""
    return sum(
        1
        for peer in peers
        for queue in peer.egress.queues._queues
        for entry in queue.entries
        if len(entry.tail) > LARGE
    )


def _burst(net: Net, consumers: list[Peer], destination: str) -> tuple[int, int]:
    """Send the burst with every consumer's window closed; (most encoded large frames seen
    at once in the egresses, peak traced bytes above what was traced before)."""
    producer = Peer(net, "producer")
    body = "x" * LARGE
    gc.collect()
    tracemalloc.start()
    most = 0
    for n in range(PER_QUEUE):
        for q in range(QUEUES):
            producer.send(destination.format(q=q), f"{q}:{n}:{body}")
            most = max(most, _encoded_large_frames(consumers))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return most, peak


@pytest.mark.parametrize(
    ("threads", "iterations"), [(2, 1), (4, 2), (1000, 1000)], ids=["2x1", "4x2", "unbounded"]
)
def test_a_burst_of_large_queue_messages_is_bounded_by_the_queue_pool(
    make_net, threads, iterations
):
    net = make_net(
        {
            "QueueThreadPool.maxthreads": threads,
            "QueueThreadPool.maxprocessoriterations": iterations,
            "VolQueueStoreImpl.globalbytehighwatermark": 64 * 1024 * KIB,
            "VolQueueStoreImpl.globalbytelowwatermark": 32 * 1024 * KIB,
        }
    )
    consumers = []
    for q in range(QUEUES):
        consumer = Peer(net, f"consumer-{q}")
        consumer.writer.window_open = False  # it does not read
        consumer.subscribe(f"/queue/large-{q}")
        consumers.append(consumer)
    most, peak = _burst(net, consumers, "/queue/large-{q}")
    pool = net.core.pools.queues
    bound = min(threads * iterations, QUEUES * PER_QUEUE)
    assert most == bound and pool.peak == bound
    # The messages themselves are held once each (in the queues), the frames at most
    # ``bound`` times: a burst takes what the pool allows, not a copy of every message.
    messages = QUEUES * PER_QUEUE * LARGE
    assert peak < messages + bound * LARGE + messages // 4
    for consumer in consumers:
        consumer.open_window()
    for q, consumer in enumerate(consumers):
        assert [b.split(":")[:2] for b in consumer.bodies()] == [
            [str(q), str(n)] for n in range(PER_QUEUE)
        ]
    assert pool.in_progress == 0 and pool.active == {}


def test_the_topic_pool_bounds_large_deliveries_to_subscribers_that_do_not_read(make_net):
    net = make_net({"TopicThreadPool.maxthreads": 1, "TopicThreadPool.maxprocessoriterations": 3})
    subscribers = []
    for n in range(4):
        subscriber = Peer(net, f"subscriber-{n}")
        subscriber.writer.window_open = False
        subscriber.subscribe("/topic/large")
        subscribers.append(subscriber)
    producer = Peer(net, "producer")
    for n in range(5):
        producer.send("/topic/large", f"{n}:" + "y" * LARGE)
        assert _encoded_large_frames(subscribers) <= 3
    assert net.core.pools.topics.peak == 3
    for subscriber in subscribers:
        subscriber.open_window()
    for subscriber in subscribers:
        assert [b.split(":")[0] for b in subscriber.bodies()] == ["0", "1", "2", "3", "4"]


def test_small_messages_never_ask_the_pool(make_net):
    net = make_net({"QueueThreadPool.maxthreads": 1, "QueueThreadPool.maxprocessoriterations": 1})
    consumer = Peer(net, "consumer")
    consumer.writer.window_open = False
    consumer.subscribe("/queue/small")
    producer = Peer(net, "producer")
    producer.feed(*(send_frame("/queue/small", f"m{n}") for n in range(50)))
    assert net.core.pools.queues.waits == 0
    consumer.open_window()
    assert consumer.bodies() == [f"m{n}" for n in range(50)]


def test_a_subscription_ending_frees_its_large_deliveries(make_net):
    net = make_net({"QueueThreadPool.maxthreads": 1, "QueueThreadPool.maxprocessoriterations": 1})
    first = Peer(net, "first")
    first.writer.window_open = False
    first.subscribe("/queue/l", "a")
    producer = Peer(net, "producer")
    producer.send("/queue/l", "1:" + "z" * LARGE)
    producer.send("/queue/l", "2:" + "z" * LARGE)
    assert net.core.pools.queues.in_progress == 1
    first.feed(frame("UNSUBSCRIBE", {"id": "a"}))
    assert net.core.pools.queues.in_progress == 0
    second = Peer(net, "second")
    second.subscribe("/queue/l", "b")
    assert [b.split(":")[0] for b in second.bodies()] == ["1", "2"]
