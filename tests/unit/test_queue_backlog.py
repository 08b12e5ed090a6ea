"""A queue's backlog in the store: read back in order, and nothing committed while a read
is on its way is left behind (reads and commits run on different workers).

On the ``Net`` of ``tests/unit/net.py``, with the store's workers run by hand.
"""

from __future__ import annotations

from tests.unit.net import PERSISTENT, Peer

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
