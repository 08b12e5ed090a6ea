"""Bounds on what one client holds: subscriptions and transactions per connection.

On the ``Net`` of ``tests/unit/net.py``: a real core on a fake clock, simulated sockets.
"""

from __future__ import annotations

from tests.unit.net import Peer, frame


def test_a_subscribe_past_the_limit_gets_an_error_naming_its_receipt(make_net):
    net = make_net({"StompListener.maxsubscriptions": 3})
    peer = Peer(net, "client")
    for n in range(3):
        peer.subscribe(f"/queue/s{n}", sub_id=str(n))
    peer.feed(frame("SUBSCRIBE", {"id": "3", "destination": "/queue/s3", "receipt": "r"}))
    [error] = peer.errors
    assert error.headers["message"] == "too many subscriptions"
    assert error.headers["receipt-id"] == "r"
    assert "3" in error.body.decode()
    assert peer.writer.closed
    assert not net.queue("/queue/s0").consumers, "the connection's subscriptions ended"


def test_unsubscribing_makes_room_under_the_subscription_limit(make_net):
    net = make_net({"StompListener.maxsubscriptions": 2})
    peer = Peer(net, "client")
    for n in range(10):
        peer.subscribe("/queue/room", sub_id=str(n))
        peer.subscribe("/topic/room", sub_id=f"t{n}")
        peer.feed(frame("UNSUBSCRIBE", {"id": str(n)}), frame("UNSUBSCRIBE", {"id": f"t{n}"}))
    assert not peer.errors
    assert not net.queue("/queue/room").consumers
    assert not net.topic("/topic/room").consumers


def test_a_begin_past_the_limit_gets_an_error_and_earlier_transactions_are_dropped(make_net):
    net = make_net({"StompListener.maxtransactions": 2})
    consumer = Peer(net, "consumer")
    consumer.subscribe("/queue/tx")
    peer = Peer(net, "client")
    peer.feed(
        frame("BEGIN", {"transaction": "a"}),
        frame("BEGIN", {"transaction": "b"}),
        frame("SEND", {"destination": "/queue/tx", "transaction": "a"}, b"held"),
        frame("BEGIN", {"transaction": "c", "receipt": "r"}),
        frame("COMMIT", {"transaction": "a"}),
    )
    [error] = peer.errors
    assert error.headers["message"] == "too many transactions"
    assert error.headers["receipt-id"] == "r"
    assert peer.writer.closed
    assert consumer.bodies() == [], "nothing of an uncommitted transaction is delivered"
    assert net.core.transactions.count(peer.connection) == 0


def test_ending_transactions_makes_room_under_the_transaction_limit(make_net):
    net = make_net({"StompListener.maxtransactions": 1})
    peer = Peer(net, "client")
    for n in range(5):
        for end in ("COMMIT", "ABORT"):
            name = f"{end}-{n}"
            peer.feed(frame("BEGIN", {"transaction": name}), frame(end, {"transaction": name}))
    assert not peer.errors
