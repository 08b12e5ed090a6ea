"""A persistent SEND's RECEIPT sent by the log's sync thread the moment its record is
synced (``server/writer.SocketAnswer``, ``modules/pipeline/storage.early_answers``): once,
whole, never interleaved with what the event loop writes, and only where nothing after
the store can refuse the message. A real server, raw sockets and stomp.py."""

from __future__ import annotations

import mmap
from pathlib import Path

from tests.conftest import call_in_reactor
from tests.integration.clients import RawClient, connect, until
from tests.integration.test_pipeline_config import PLUGINS, _config

LATE = 1.0  # long enough for a receipt sent twice to show (it would follow within ms)


def logged(server, data: bytes) -> bool:
    """Whether ``data`` is in the server's write-ahead log files (a message's body is
    written there as it is)."""
    for segment in (Path(server.server.datadir) / "wal").glob("*.wal"):
        with segment.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as m:
            if m.find(data) >= 0:
                return True
    return False


def sent_at_the_sync(reactor, server) -> int:
    """How many receipts the server's sync thread has sent."""
    statistics = call_in_reactor(reactor, server.core.persistence.statistics)
    return int(statistics["store"]["receipts sent at the sync"])


def test_each_receipt_comes_once_from_the_sync_thread_and_after_the_log_has_the_message(
    reactor, server
):
    client = RawClient(server.port)
    client.connect()
    before = sent_at_the_sync(reactor, server)
    for i in range(30):
        body = f"early message {i}"
        client.send(
            f"SEND\ndestination:/queue/early\npersistent:true\nreceipt:r{i}\n\n{body}\0".encode()
        )
        receipt = client.next_frame()
        assert (receipt.command, receipt.headers["receipt-id"]) == ("RECEIPT", f"r{i}")
        assert logged(server, body.encode())
    assert sent_at_the_sync(reactor, server) - before == 30
    client.send(b"DISCONNECT\nreceipt:bye\n\n\0")
    last = client.next_frame()
    assert (last.command, last.headers["receipt-id"]) == ("RECEIPT", "bye")
    assert client.wait_closed(LATE)
    assert client.frames == [], "a receipt came twice"


def test_a_client_that_consumes_where_it_produces_gets_every_frame_whole(reactor, server):
    """Its deliveries are written by the event loop, its receipts by the sync thread: the
    loop holds its writes while a receipt is in the thread's hands. Each SEND waits for
    its receipt (a commit carrying several receipts answers them through the loop), and
    each receipt is followed by the delivery of its own message."""
    client = RawClient(server.port)
    client.connect()
    client.send(b"SUBSCRIBE\nid:1\ndestination:/queue/mixed\nack:auto\nreceipt:sub\n\n\0")
    assert client.next_frame().headers["receipt-id"] == "sub"
    count = 300
    receipts: list[str] = []
    bodies: list[bytes] = []
    for i in range(count):
        client.send(
            f"SEND\ndestination:/queue/mixed\npersistent:true\nreceipt:r{i}\n\n{i:05d}\0".encode()
        )
        while len(receipts) <= i:
            frame = client.next_frame()  # a malformed (interleaved) frame fails here
            if frame.command == "RECEIPT":
                receipts.append(frame.headers["receipt-id"])
            else:
                assert frame.command == "MESSAGE", frame
                bodies.append(frame.body)
    while len(bodies) < count:
        frame = client.next_frame()
        if frame.command == "RECEIPT":
            receipts.append(frame.headers["receipt-id"])
        else:
            assert frame.command == "MESSAGE", frame
            bodies.append(frame.body)
    assert receipts == [f"r{i}" for i in range(count)]
    assert bodies == [f"{i:05d}".encode() for i in range(count)]
    assert sent_at_the_sync(reactor, server) > 0
    assert not until(lambda: client.frames or client._read(0.05) or client.frames, timeout=LATE)


def test_a_module_after_the_store_that_may_refuse_keeps_the_receipt_until_it_passes(
    reactor, start_server
):
    """Only the distributing module may follow the store for a receipt to go at the sync:
    a message refused after it is stored gets an ERROR, never a RECEIPT first."""
    refusing = f"{PLUGINS}:RefusingModule"
    chain = ["admission", "transaction", "storage", refusing, "distributing"]
    server = start_server(_config(chain, chain))
    client = RawClient(server.port)
    client.connect()
    client.send(b"SEND\ndestination:/queue/guarded\npersistent:true\nreceipt:ok\n\nfine\0")
    assert client.next_frame().headers["receipt-id"] == "ok"
    client.send(b"SEND\ndestination:/queue/guarded\npersistent:true\nreceipt:no\n\nrefuse me\0")
    error = client.next_frame()
    assert error.command == "ERROR" and error.headers["receipt-id"] == "no"
    assert sent_at_the_sync(reactor, server) == 0


def test_stomp_py_producers_and_a_consumer_see_every_message_once(server):
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/many", id="1", ack="auto")
    producers = [connect(server.port) for _ in range(4)]
    for n, (producer, _) in enumerate(producers):
        for i in range(50):
            producer.send(
                "/queue/many", f"{n}-{i}", headers={"persistent": "true", "receipt": f"{n}-{i}"}
            )
    for n, (_, listener) in enumerate(producers):
        assert listener.wait_until(lambda listener=listener: len(listener.receipts) == 50)
        assert sorted(listener.receipts) == sorted(f"{n}-{i}" for i in range(50))
    messages = recorder.wait_for_messages(200)
    assert sorted(m.body for m in messages) == sorted(
        f"{n}-{i}" for n in range(4) for i in range(50)
    )
    assert not recorder.wait_until(lambda: len(recorder.messages) > 200, timeout=LATE)
