"""Bounds on what one client holds: subscriptions and transactions per connection.

On the ``Net`` of ``tests/unit/net.py``: a real core on a fake clock, simulated sockets.
"""

from __future__ import annotations

from tests.unit.net import Peer, frame
from wiremq.modules.flow.unfinished import UnfinishedFrames


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


class Client:
    """A connection as the bound on unfinished frames sees it: read or not."""

    def __init__(self) -> None:
        self.stops: set[object] = set()

    def stop_reading(self, reason: object) -> None:
        self.stops.add(reason)

    def start_reading(self, reason: object) -> None:
        self.stops.discard(reason)


def test_past_the_unfinished_bound_big_holders_stop_and_the_finisher_and_small_go_on():
    frames = UnfinishedFrames(100, max_connections=10)
    big, bigger, small = Client(), Client(), Client()
    frames.held(big, 60)
    frames.held(small, 5)
    frames.held(bigger, 70)  # over the bound: 135 held
    frames.held(big, 61)
    frames.held(small, 6)
    assert big.stops and not bigger.stops, "the one holding the most finishes its frame"
    assert not small.stops, "a connection holding less than its share goes on"
    frames.held(bigger, 0)  # it finished: 67 held, under the bound
    assert not big.stops


def test_one_finisher_at_a_time_goes_on_past_the_bound_until_its_frame_is_done():
    frames = UnfinishedFrames(100, max_connections=10)
    clients = [Client() for _ in range(3)]
    frames.held(clients[0], 50)
    frames.held(clients[1], 60)  # 110 held: the one holding the most finishes its frame
    frames.held(clients[2], 70)  # holding more, but not the finisher
    frames.held(clients[0], 51)  # each judged at its next read
    frames.held(clients[1], 90)
    assert [bool(c.stops) for c in clients] == [True, False, True]
    frames.held(clients[1], 0)  # it finished; 121 still held: the next finisher goes on
    assert [bool(c.stops) for c in clients] == [True, False, False]
    frames.forget(clients[2])  # gone: 51 held, under the bound
    assert frames.total == 51
    assert not clients[0].stops


def test_connections_that_start_a_frame_once_the_bound_is_passed_share_what_is_left():
    """Found as a flaky integration test: three connections passed the bound, then five
    more each grew to the share of those holding any (the bound over 4, 5, ... holders),
    holding far more than the bound plus one frame in all. A connection starting a frame
    past the bound gets what the bound leaves, or its floor (the bound over the most
    connections) if that is more."""
    frames = UnfinishedFrames(800, max_connections=100)  # a floor of 8 each
    early = [Client() for _ in range(3)]
    for step in range(1, 31):  # each grows to 300 in reads of 10: 900 held
        for client in early:
            if not client.stops:
                frames.held(client, step * 10)
    late = [Client() for _ in range(5)]
    held = dict.fromkeys(late, 0)
    for _ in range(100):  # each reads 10 at a time while it is read
        for client in late:
            if not client.stops:
                held[client] += 10
                frames.held(client, held[client])
    finisher_frame, read = 300, 10
    assert frames.peak <= 800 + finisher_frame + read * 8 + 8 * 8, frames.peak
    assert all(client.stops for client in late), "past the bound, they wait"
