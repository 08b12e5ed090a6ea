"""Bounds on what clients control: subscriptions, connections, deadlines, bytes held.

Each test reproduces a way one client could make the server slow or grow without
bound, against an in-process server with real sockets.
"""

from __future__ import annotations

import time

from tests.integration.clients import RawClient

SUBSCRIPTIONS = 20_000


def _subscribe_frames(count: int) -> bytes:
    """Half the subscriptions on one queue, half on a topic each: both shapes at once."""
    return b"".join(
        b"SUBSCRIBE\nid:%d\ndestination:%s\n\n\0"
        % (n, b"/queue/many" if n % 2 else b"/topic/many-%d" % n)
        for n in range(count)
    )


def test_subscribe_and_unsubscribe_cost_does_not_grow_with_subscriptions(start_server):
    """20,000 SUBSCRIBEs then 20,000 UNSUBSCRIBEs on one connection: with a cost per
    request that grew with the subscriptions held (it did: 10,000 took 2.3 s, 40,000
    29 s) this takes minutes; in constant time, seconds. Meanwhile a new client is
    answered."""
    server = start_server(**{"StompListener.maxsubscriptions": str(SUBSCRIPTIONS + 1)})
    client = RawClient(server.port)
    client.connect()
    started = time.monotonic()
    last = b"SUBSCRIBE\nid:x\ndestination:/queue/x\nreceipt:subscribed\n\n\0"
    client.send(_subscribe_frames(SUBSCRIPTIONS) + last)
    newcomer = RawClient(server.port)
    newcomer.connect()  # answered while the subscriptions are being made
    assert client.next_frame(timeout=60).headers["receipt-id"] == "subscribed"
    unsubscribes = b"".join(b"UNSUBSCRIBE\nid:%d\n\n\0" % n for n in range(SUBSCRIPTIONS))
    client.send(unsubscribes + b"UNSUBSCRIBE\nid:x\nreceipt:unsubscribed\n\n\0")
    assert client.next_frame(timeout=60).headers["receipt-id"] == "unsubscribed"
    elapsed = time.monotonic() - started
    assert elapsed < 20, f"{SUBSCRIPTIONS} subscriptions made and ended in {elapsed:.1f} s"
    assert not server.core.destinations.queues["/queue/many"].consumers
