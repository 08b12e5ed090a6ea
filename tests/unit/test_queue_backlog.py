"""A queue's backlog in the store: read back in order, nothing committed while a read is
on its way is left behind (reads and commits run on different workers), and a read that
fails is tried again (as a durable subscriber's replay is).

On the ``Net`` of ``tests/unit/net.py``, with the store's workers run by hand.
"""

from __future__ import annotations

import pytest

from tests.unit.net import PERSISTENT, Peer, frame
from wiremq.stores.errors import StoreError

LIVE_BUFFER = {"DestinationManager.persqueuebytehighwatermark": 100}
PADDING = "." * 20  # bodies of 22-24 bytes: four fit in the live buffer


def _bodies(peer: Peer) -> list[str]:
    return [body.rstrip(".") for body in peer.bodies()]


def test_a_message_committed_while_a_backlog_read_runs_is_not_left_behind(make_net):
    net = make_net(LIVE_BUFFER, persistent=True)
    producer = Peer(net, "producer")
    for i in range(6):  # m0-m3 stay in memory, m4 and m5 only in the store
        producer.send("/queue/b", f"m{i}{PADDING}", PERSISTENT)
    queue = net.queue("/queue/b")
    assert queue.backlog_start() is not None
    net.workers_held = True
    consumer = Peer(net, "consumer")
    consumer.subscribe("/queue/b", ack="client-individual", consumerQueueEntriesSize="4")
    assert _bodies(consumer) == ["m0", "m1", "m2", "m3"]  # the live buffer is empty now
    reads = net.core.runtime.workers["store"].calls
    [(read, read_done, _)] = reads  # the read of m4 and m5, not run yet
    reads.clear()
    batch = read()  # it runs now, before the next commit, and finds the end of the queue
    assert batch.at_end
    producer.send("/queue/b", f"late{PADDING}", PERSISTENT)
    net.core.runtime.workers["log"].run()  # "late" is committed and left in the store
    net.settle()
    read_done(batch)  # the read's result comes in after the commit's
    net.workers_held = False
    delivered = _bodies(consumer)
    for _ in range(4):
        messages = list(consumer.messages)
        consumer.writer.frames.clear()
        for message in messages:
            consumer.ack(message)
        delivered += _bodies(consumer)
    assert delivered == ["m0", "m1", "m2", "m3", "m4", "m5", "late"]
    assert net.core.store.count("/queue/b")[0] == 0


RETRY = {"PersQueueFileStore.readretryinterval": 2.0, "TopicFileStore.readretryinterval": 3.0}


def _failing_first_read(net, monkeypatch) -> list[float]:
    """The store's first read fails (a store out of reach); when each read was tried."""
    store = net.core.store
    real = store.read
    tried: list[float] = []

    def read(*args, **kwargs):
        tried.append(net.clock())
        if len(tried) == 1:
            raise StoreError("the store is out of reach")
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "read", read)
    return tried


def _drain(consumer: Peer) -> list[str]:
    """Acknowledge each message as it comes until no more come."""
    delivered: list[str] = []
    while consumer.messages:
        delivered += _bodies(consumer)
        messages = list(consumer.messages)
        consumer.writer.frames.clear()
        for message in messages:
            consumer.ack(message)
    return delivered


def test_a_backlog_read_that_failed_is_tried_again_and_nothing_is_skipped(make_net, monkeypatch):
    net = make_net({**LIVE_BUFFER, **RETRY}, persistent=True)
    producer = Peer(net, "producer")
    for i in range(8):  # m0-m3 stay in memory, m4-m7 only in the store
        producer.send("/queue/b", f"m{i}{PADDING}", PERSISTENT)
    tried = _failing_first_read(net, monkeypatch)
    consumer = Peer(net, "consumer")
    consumer.subscribe("/queue/b", ack="client-individual", consumerQueueEntriesSize="4")
    assert _drain(consumer) == [f"m{i}" for i in range(8)]
    assert len(tried) >= 2 and tried[1] - tried[0] == pytest.approx(2.0)
    assert net.core.store.count("/queue/b")[0] == 0


def test_a_durable_replay_whose_read_failed_is_tried_again(make_net, monkeypatch):
    net = make_net(RETRY, persistent=True)
    durable = {"activemq.subscriptionName": "d"}
    subscriber = Peer(net, "subscriber", login={"client-id": "c"})
    subscriber.subscribe("/topic/t", **durable)
    subscriber.feed(frame("DISCONNECT", {}))
    producer = Peer(net, "producer")
    for i in range(5):
        producer.send("/topic/t", f"t{i}", PERSISTENT)
    tried = _failing_first_read(net, monkeypatch)
    back = Peer(net, "back", login={"client-id": "c"})
    back.subscribe("/topic/t", ack="client-individual", **durable)
    assert _drain(back) == [f"t{i}" for i in range(5)]
    assert len(tried) >= 2 and tried[1] - tried[0] == pytest.approx(3.0)
