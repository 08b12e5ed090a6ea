"""Bounds on what clients control: subscriptions, connections, deadlines, bytes held.

Each test reproduces a way one client could make the server slow or grow without
bound, against an in-process server with real sockets.
"""

from __future__ import annotations

import socket
import threading
import time

from tests.conftest import call_in_reactor
from tests.integration.clients import RawClient, until

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


def _refused(client: RawClient) -> str:
    """The ERROR message a client got in answer to its CONNECT; the server closed it."""
    client.send(b"CONNECT\naccept-version:1.2\nhost:x\nreceipt:hello\n\n\0")
    frame = client.next_frame()
    assert frame.command == "ERROR", frame
    assert client.wait_closed()
    return frame.headers["message"]


def test_connections_past_the_limit_per_address_get_an_error_answering_connect(start_server):
    server = start_server(
        **{"StompListener.maxconnectionsperaddress": "2", "StompListener.maxconnections": "10"}
    )
    first, second = RawClient(server.port), RawClient(server.port)
    first.connect()
    second.connect()
    assert _refused(RawClient(server.port)) == "too many connections"
    elsewhere = RawClient(server.port, source="127.0.0.2")
    elsewhere.connect()  # another address has room
    first.close()
    assert until(lambda: len(server.connections) == 2)
    RawClient(server.port).connect()  # a closed connection makes room


def test_connections_past_the_total_limit_get_an_error_answering_connect(start_server):
    server = start_server(**{"StompListener.maxconnections": "2"})
    clients = [RawClient(server.port), RawClient(server.port, source="127.0.0.2")]
    for client in clients:
        client.connect()
    assert _refused(RawClient(server.port, source="127.0.0.3")) == "too many connections"


def test_connections_that_have_not_sent_connect_do_not_count_against_the_limit(start_server):
    """150 sockets open before any of them sends CONNECT, ``maxconnections`` 100: the first
    100 CONNECTs are accepted and the other 50 refused. (Sockets were counted, not
    connections: only 84 got CONNECTED, and which depended on when the refused ones
    closed.)"""
    server = start_server(**{"StompListener.maxconnections": "100"})
    sockets = [RawClient(server.port, source=f"127.0.0.{1 + n % 50}") for n in range(150)]
    assert until(lambda: len(server.connections) == 150)
    answers = []
    for client in sockets:
        client.send(b"CONNECT\naccept-version:1.2\nhost:x\n\n\0")
        frame = client.next_frame()
        answers.append(frame.command if frame.command == "CONNECTED" else frame.headers["message"])
    assert answers == ["CONNECTED"] * 100 + ["too many connections"] * 50
    for client in sockets:
        client.close()


def test_a_connection_that_never_sends_connect_is_closed_with_an_error(start_server):
    server = start_server(**{"StompListener.connecttimeout": "0.5"})
    silent = RawClient(server.port)
    frame = silent.next_frame()
    assert frame.command == "ERROR"
    assert frame.headers["message"] == "connect timeout"
    assert silent.wait_closed()
    assert until(lambda: not server.connections)


def test_a_connected_client_outlives_the_connect_deadline(start_server):
    server = start_server(**{"StompListener.connecttimeout": "0.5"})
    client = RawClient(server.port)
    client.connect()  # no heart-beats
    assert not client.wait_closed(timeout=2.0), "a connected client is not closed"
    assert not client.frames
    client.send(b"SUBSCRIBE\nid:1\ndestination:/queue/alive\nreceipt:r\n\n\0")
    assert client.next_frame().headers["receipt-id"] == "r"


def test_an_unfinished_connect_frame_is_bounded_small(start_server):
    server = start_server(**{"StompListener.maxconnectsize": "1024"})
    client = RawClient(server.port)
    client.send(b"CONNECT\naccept-version:1.2\nlogin:" + b"x" * 2000)
    frame = client.next_frame()
    assert frame.command == "ERROR"
    assert frame.headers["message"] == "connect frame too large"
    assert client.wait_closed()


def test_every_accepted_connection_has_tcp_keepalive(server, reactor):
    clients = [RawClient(server.port), RawClient(server.port)]
    clients[0].connect()  # the other has not even sent CONNECT

    def keepalive() -> list[int]:
        return [
            c.transport.getHandle().getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
            for c in server.connections
        ]

    assert until(lambda: len(server.connections) == 2)
    assert call_in_reactor(reactor, keepalive) == [1, 1]


def _send_blocking(client: RawClient, data: bytes) -> None:
    """Send everything, however long the server leaves the client blocked in its send."""
    view = memoryview(data)
    while view:
        try:
            view = view[client.sock.send(view[:65536]) :]
        except TimeoutError:
            continue


RECEIPTED_SENDS = 200_000
CONTROL_DEPTH = 100  # work units: a RECEIPT is one


def test_a_client_that_never_reads_its_receipts_is_not_read_until_it_does(start_server, reactor):
    """200,000 SENDs with receipts from a client that reads nothing: the receipts queued
    for it stay within the control queue's depth plus what one read asked for (the
    server stops reading it), and once it reads it gets every receipt."""
    server = start_server(**{"ClientEgress.maxdepth": str(CONTROL_DEPTH)})
    client = RawClient(server.port)
    client.connect()
    padding = "p" * 64  # long receipt ids: the socket buffers cannot hold them all
    sends = [
        b"SEND\ndestination:/topic/void\nreceipt:%s-%d\n\n\0" % (padding.encode(), n)
        for n in range(RECEIPTED_SENDS)
    ]
    sender = threading.Thread(target=_send_blocking, args=(client, b"".join(sends)), daemon=True)
    sender.start()
    [connection] = server.connections
    one_read = 65536 // min(len(s) for s in sends) + 1
    bound = CONTROL_DEPTH + one_read

    def control_work() -> tuple[bool, int]:  # (reading stopped, C-1 high-water mark)
        stopped = bool(connection.client.core_session.reading.stops)
        return stopped, connection.egress.queues.stats()["C-1"]["hwm_work"]

    def settled() -> bool:
        stopped, high = call_in_reactor(reactor, control_work)
        return stopped or high > bound

    assert until(settled, timeout=30)
    time.sleep(1.0)  # what was read before reading stopped is answered meanwhile
    stopped, high = call_in_reactor(reactor, control_work)
    assert high <= bound, f"{high} RECEIPTs queued for a client that does not read"
    assert stopped, "the server stops reading a client that does not read"
    assert sender.is_alive(), "the client is blocked in its send"

    receipts = set()
    while len(receipts) < RECEIPTED_SENDS:
        frame = client.next_frame(timeout=30)
        assert frame.command == "RECEIPT", frame
        receipts.add(frame.headers["receipt-id"])
    assert receipts == {f"{padding}-{n}" for n in range(RECEIPTED_SENDS)}
    sender.join(10)
    assert not sender.is_alive()


MIB = 1024 * 1024


def test_unfinished_frames_hold_a_bounded_total_and_all_finish(start_server):
    """Eight clients each send 3 MiB of a frame and hold back its last byte: 24 MiB held
    at once without a bound. With 8 MiB as the bound, the server holds at most that plus
    one frame plus one read and one floor per client; when they send the rest, every frame
    finishes."""
    body = 3 * MIB
    server = start_server(
        **{
            "StompListener.maxbodysize": str(4 * MIB),
            "StompListener.maxunfinishedbytes": str(8 * MIB),
        }
    )
    unfinished = server.core.connection_services.unfinished
    clients = [RawClient(server.port) for _ in range(8)]
    for client in clients:
        client.connect()
    go_on = threading.Event()

    def send(client: RawClient, n: int) -> None:
        head = b"SEND\ndestination:/topic/big\ncontent-length:%d\nreceipt:%d\n\n" % (body, n)
        _send_blocking(client, head + b"x" * (body - 1))
        go_on.wait()
        _send_blocking(client, b"x\0")

    senders = [
        threading.Thread(target=send, args=(client, n), daemon=True)
        for n, client in enumerate(clients)
    ]
    for sender in senders:
        sender.start()
    assert until(lambda: unfinished.total > 8 * MIB)
    time.sleep(2.0)  # long enough for every client to send what it can
    floors = len(clients) * unfinished.floor  # what each may hold whatever the others do
    assert unfinished.peak <= 8 * MIB + 4 * MIB + len(clients) * 65536 + floors, unfinished.peak
    go_on.set()
    for n, client in enumerate(clients):
        assert client.next_frame(timeout=30).headers["receipt-id"] == str(n)
    assert until(lambda: unfinished.total == 0)


def test_the_server_sweeps_unused_destinations_away(start_server):
    server = start_server(**{"DestinationManager.idletimetolive": "0.5"})
    client = RawClient(server.port)
    client.connect()
    client.send(b"SEND\ndestination:/topic/passing\nreceipt:r\n\nnobody listens\0")
    assert client.next_frame().headers["receipt-id"] == "r"
    assert "/topic/passing" in server.core.destinations.topics
    assert until(lambda: "/topic/passing" not in server.core.destinations.topics, timeout=5)
