"""Connecting: versions, CONNECTED headers, heart-beats, receipts, DISCONNECT, escaping."""

from __future__ import annotations

import time

import pytest

from tests.conftest import call_in_reactor
from tests.integration.clients import RawClient, connect


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_stomp_py_clients_of_every_version_exchange_messages(server, version):
    connection, recorder = connect(server.port, version)
    kwargs = {} if version == "1.0" else {"id": "s1"}
    connection.subscribe("/queue/versions", ack="auto", **kwargs)
    connection.send("/queue/versions", f"hello {version}", receipt="r1")
    messages = recorder.wait_for_messages(1)
    assert messages[0].body == f"hello {version}"
    assert recorder.wait_until(lambda: "r1" in recorder.receipts)
    connection.disconnect()


@pytest.mark.parametrize(
    ("offered", "expected"),
    [("1.0", "1.0"), ("1.1", "1.1"), ("1.2", "1.2"), ("1.0,1.1,1.2", "1.2"), ("1.1,1.0", "1.1")],
)
def test_version_negotiation_picks_the_highest_common_version(server, offered, expected):
    client = RawClient(server.port)
    frame = client.connect(offered)
    assert frame.headers["version"] == expected
    assert frame.headers["server"].startswith("wiremq")
    assert frame.headers["session"]
    assert frame.headers["heart-beat"] == "0,0"


def test_stomp_frame_connects_and_no_accept_version_means_1_0(server):
    client = RawClient(server.port)
    client.send(b"STOMP\nhost:x\naccept-version:1.2\n\n\0")
    assert client.next_frame().headers["version"] == "1.2"
    old = RawClient(server.port)
    old.send(b"CONNECT\nlogin:a\npasscode:b\n\n\0")
    assert old.next_frame().headers["version"] == "1.0"


def test_no_common_version_gets_error_with_supported_versions(server):
    client = RawClient(server.port)
    client.send(b"CONNECT\naccept-version:2.0,3.1\nhost:x\n\n\0")
    frame = client.next_frame()
    assert frame.command == "ERROR"
    assert frame.headers["version"] == "1.0,1.1,1.2"
    assert "version" in frame.headers["message"]
    assert client.wait_closed()


def test_server_sends_heart_beats_when_idle(start_server):
    server = start_server(**{"StompListener.heartbeatsend": "100"})
    client = RawClient(server.port)
    connected = client.connect(heart_beat="0,100")
    assert connected.headers["heart-beat"].split(",")[0] == "100"
    before = len(client.raw)
    deadline = time.monotonic() + 2
    while client.raw[before:].count(b"\n") < 3 and time.monotonic() < deadline:
        client._read(deadline)
    assert client.raw[before:].count(b"\n") >= 3, "expected at least three heart-beats in 2 s"
    assert not client.frames


@pytest.mark.parametrize(
    ("asked", "answered"),
    [
        ("1000,1000", "1000,1000"),
        ("3000,5000", "5000,3000"),  # the server sends every 5 s, hears from it every 3 s
        ("100,200", "1000,1000"),  # below the floor (StompListener.heartbeatsend/receive)
        ("0,1000", "1000,0"),
    ],
)
def test_connected_answers_the_clients_heart_beats_down_to_the_floor(server, asked, answered):
    client = RawClient(server.port)
    assert client.connect(heart_beat=asked).headers["heart-beat"] == answered


def test_heart_beats_arrive_at_the_negotiated_rate(server):
    client = RawClient(server.port)
    client.connect(heart_beat="1000,1000")
    start, arrivals = time.monotonic(), []
    seen = len(client.raw)
    while time.monotonic() - start < 3.6:
        client.send(b"\n")  # the client's own heart-beats keep it connected
        client._read(time.monotonic() + 0.25)
        arrivals += [time.monotonic() - start] * client.raw[seen:].count(b"\n")
        seen = len(client.raw)
    assert not client.frames and not client.closed
    assert 2 <= len(arrivals) <= 4, arrivals  # one a second (10 s before: none)
    gaps = [later - earlier for earlier, later in zip(arrivals, arrivals[1:], strict=False)]
    assert all(gap > 0.7 for gap in gaps), arrivals


def test_a_silent_client_is_dropped_after_the_negotiated_interval_times_grace(server):
    client = RawClient(server.port)
    assert client.connect(heart_beat="1000,0").headers["heart-beat"] == "0,1000"
    connected = time.monotonic()
    frame = client.next_frame(timeout=10)
    silent_for = time.monotonic() - connected
    assert frame.headers["message"] == "heart-beat timeout"
    assert client.wait_closed()
    assert 1.9 < silent_for < 6, silent_for  # 1 s x heartbeatgrace 2 (20 s before)


def test_a_connection_whose_heart_beat_check_raises_is_closed_not_left_unchecked(
    reactor, start_server, events
):
    server = start_server(**{"StompListener.heartbeatsend": "100"})
    client = RawClient(server.port)
    session = client.connect(heart_beat="0,100").headers["session"]

    def broken_tick(now: float) -> float | None:
        raise RuntimeError("a bad heart-beat check")

    def break_it() -> None:
        (protocol,) = [c for c in server.connections if c.client.session.session_id == session]
        protocol.client.tick = broken_tick

    call_in_reactor(reactor, break_it)
    assert client.wait_closed(), "the connection was left open without heart-beat checks"
    failed = [e for e in list(events) if e["event"] == "heartbeat.failed"]
    assert [e["session"] for e in failed] == [session]


def test_silent_client_is_disconnected_after_its_grace_period(start_server):
    server = start_server(
        **{"StompListener.heartbeatreceive": "100", "StompListener.heartbeatgrace": "2"}
    )
    silent = RawClient(server.port)
    connected = silent.connect(heart_beat="100,0")
    assert connected.headers["heart-beat"].split(",")[1] == "100"
    started = time.monotonic()
    frame = silent.next_frame(timeout=5)
    assert frame.command == "ERROR"
    assert frame.headers["message"] == "heart-beat timeout"
    assert silent.wait_closed()
    assert 0.15 < time.monotonic() - started < 3


def test_client_that_heart_beats_stays_connected(start_server):
    server = start_server(
        **{"StompListener.heartbeatreceive": "100", "StompListener.heartbeatgrace": "2"}
    )
    client = RawClient(server.port)
    client.connect(heart_beat="100,0")
    for _ in range(8):
        time.sleep(0.05)
        client.send(b"\n")
    client.send(b"SUBSCRIBE\nid:1\ndestination:/topic/hb\nreceipt:alive\n\n\0")
    frame = client.next_frame()
    assert (frame.command, frame.headers.get("receipt-id")) == ("RECEIPT", "alive")


def test_receipts_on_every_frame_that_asks(server):
    client = RawClient(server.port)
    client.connect()
    frames = [
        b"SUBSCRIBE\nid:1\ndestination:/queue/rc\nack:client\nreceipt:sub\n\n\0",
        b"SEND\ndestination:/queue/rc\nreceipt:send\n\nx\0",
    ]
    for frame in frames:
        client.send(frame)
    seen = {}
    while len(seen) < 3:
        frame = client.next_frame()
        seen[frame.headers.get("receipt-id") or frame.command] = frame
    ack_id = seen["MESSAGE"].headers["ack"]
    client.send(
        b"BEGIN\ntransaction:t\nreceipt:begin\n\n\0"
        b"COMMIT\ntransaction:t\nreceipt:commit\n\n\0"
        b"BEGIN\ntransaction:u\nreceipt:begin2\n\n\0"
        b"ABORT\ntransaction:u\nreceipt:abort\n\n\0"
        + f"ACK\nid:{ack_id}\nreceipt:ack\n\n\0".encode()
        + b"UNSUBSCRIBE\nid:1\nreceipt:unsub\n\n\0"
        b"DISCONNECT\nreceipt:bye\n\n\0"
    )
    receipts = [client.next_frame().headers["receipt-id"] for _ in range(7)]
    assert receipts == ["begin", "commit", "begin2", "abort", "ack", "unsub", "bye"]
    assert client.wait_closed()


def test_disconnect_receipt_comes_after_earlier_sends_are_processed(server):
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/dc", id="1")
    client = RawClient(server.port)
    client.connect()
    sends = b"".join(
        f"SEND\ndestination:/queue/dc\nreceipt:m{i}\n\n{i}\0".encode() for i in range(50)
    )
    client.send(sends + b"DISCONNECT\nreceipt:bye\n\n\0")
    receipts = [client.next_frame().headers["receipt-id"] for _ in range(51)]
    assert receipts == [f"m{i}" for i in range(50)] + ["bye"]
    assert client.wait_closed()
    assert recorder.wait_for_messages(50)


@pytest.mark.parametrize(
    ("version", "wire_value"),
    [("1.2", b"a\\cb\\nc\\\\d\\re"), ("1.1", b"a\\cb\\nc\\\\d\re")],
)
def test_header_escaping_round_trips_per_version(server, version, wire_value):
    consumer = RawClient(server.port)
    consumer.connect(version)
    consumer.send(b"SUBSCRIBE\nid:1\ndestination:/queue/esc\nreceipt:s\n\n\0")
    assert consumer.next_frame().command == "RECEIPT"
    producer = RawClient(server.port)
    producer.connect("1.2")
    producer.send(b"SEND\ndestination:/queue/esc\nweird:a\\cb\\nc\\\\d\\re\n\nbody\0")
    message = consumer.next_frame()
    assert b"weird:" + wire_value + b"\n" in consumer.raw
    if version == "1.2":
        assert message.headers["weird"] == "a:b\nc\\d\re"


def test_1_0_headers_are_not_unescaped(server):
    consumer, recorder = connect(server.port, "1.0")
    consumer.subscribe("/queue/esc10", ack="auto")
    client = RawClient(server.port)
    client.connect("1.0")
    client.send(b"SEND\ndestination:/queue/esc10\npath:C:\\temp\n\nx\0")
    assert recorder.wait_for_messages(1)[0].headers["path"] == "C:\\temp"


def test_binary_body_with_nul_bytes_and_repeated_headers(server):
    consumer = RawClient(server.port)
    consumer.connect()
    consumer.send(b"SUBSCRIBE\nid:1\ndestination:/queue/bin\nreceipt:s\n\n\0")
    consumer.next_frame()
    body = bytes(range(256)) * 4 + b"\0\0"
    producer = RawClient(server.port)
    producer.connect()
    producer.send(
        b"SEND\ndestination:/queue/bin\ncolour:red\ncolour:blue\ncontent-length:"
        + str(len(body)).encode()
        + b"\n\n"
        + body
        + b"\0"
    )
    message = consumer.next_frame()
    assert message.body == body
    assert message.headers["colour"] == "red"
    assert int(message.headers["content-length"]) == len(body)
