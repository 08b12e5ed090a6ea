"""Every bad frame gets an ERROR saying what was wrong; the connection closes; others go on."""

from __future__ import annotations

import time

import pytest

from tests.integration.clients import RawClient, connect

CONNECT = b"CONNECT\naccept-version:1.2\nhost:x\n\n\0"
BIG = 64 * 1024
MIB = 1024 * 1024

CASES = {
    "malformed header": (
        CONNECT + b"SEND\ndestination:/queue/a\nno colon here\n\nx\0",
        "malformed frame",
    ),
    "unknown command": (CONNECT + b"FROB\n\n\0", "unknown command"),
    "missing destination": (CONNECT + b"SEND\nreceipt:r\n\nbody\0", "missing destination header"),
    "subscribe without id": (
        CONNECT + b"SUBSCRIBE\ndestination:/queue/a\n\n\0",
        "missing id header",
    ),
    "ack of unknown message": (CONNECT + b"ACK\nid:nope@1\n\n\0", "unknown message"),
    "frame before connect": (b"SEND\ndestination:/queue/a\n\nx\0", "not connected"),
    "body over the limit": (
        CONNECT
        + b"SEND\ndestination:/queue/a\ncontent-length:%d\n\n" % (BIG + 10)
        + b"x" * (BIG + 10)
        + b"\0",
        "frame too large",
    ),
    "body over the limit without content-length": (
        CONNECT + b"SEND\ndestination:/queue/a\n\n" + b"x" * (BIG + 10) + b"\0",
        "frame too large",
    ),
    "header over the limit": (
        CONNECT + b"SEND\ndestination:/queue/a\nh:" + b"v" * (BIG + 10) + b"\n\n\0",
        "header too long",
    ),
    "too many headers": (
        CONNECT
        + b"SEND\ndestination:/queue/a\n"
        + b"".join(b"h%d:v\n" % i for i in range(200))
        + b"\n\0",
        "too many headers",
    ),
    "bad content-length": (
        CONNECT + b"SEND\ndestination:/queue/a\ncontent-length:ten\n\nx\0",
        "malformed frame",
    ),
    "invalid escape": (
        CONNECT + b"SEND\ndestination:/queue/a\nh:\\t\n\nx\0",
        "undefined escape sequence in header",
    ),
    "bad destination": (CONNECT + b"SEND\ndestination:/elsewhere/a\n\nx\0", "unknown destination"),
    "wildcard destination": (
        CONNECT + b"SEND\ndestination:/queue/a.*\n\nx\0",
        "invalid destination",
    ),
    "invalid ack mode": (
        CONNECT + b"SUBSCRIBE\nid:1\ndestination:/queue/a\nack:maybe\n\n\0",
        "invalid ack mode",
    ),
    "duplicate subscription": (
        CONNECT
        + b"SUBSCRIBE\nid:1\ndestination:/queue/a\n\n\0SUBSCRIBE\nid:1\ndestination:/queue/b\n\n\0",
        "duplicate subscription",
    ),
    "unknown subscription": (CONNECT + b"UNSUBSCRIBE\nid:9\n\n\0", "unknown subscription"),
    "unknown transaction": (CONNECT + b"COMMIT\ntransaction:t9\n\n\0", "unknown transaction"),
    "bad heart-beat": (
        b"CONNECT\naccept-version:1.2\nheart-beat:often\n\n\0",
        "invalid heart-beat header",
    ),
}


@pytest.fixture
def limited_server(start_server):
    return start_server(
        **{
            "StompListener.maxbodysize": str(BIG),
            "StompListener.maxheaderlength": str(BIG),
            "StompListener.maxheaders": "100",
        }
    )


@pytest.mark.parametrize("case", list(CASES))
def test_bad_frame_gets_error_and_close_and_others_carry_on(limited_server, case):
    data, expected_message = CASES[case]
    bystander, recorder = connect(limited_server.port)
    bystander.subscribe("/queue/ok", id="1", headers={"receipt": "s"})
    assert recorder.wait_until(lambda: "s" in recorder.receipts)

    bad = RawClient(limited_server.port)
    bad.send(data)
    frames = []
    while True:
        frame = bad.next_frame()
        frames.append(frame)
        if frame.command == "ERROR":
            break
    assert frame.headers["message"] == expected_message
    assert frame.body, "the ERROR body explains the problem"
    assert bad.wait_closed(), "the server closes the connection after an ERROR"

    other, _ = connect(limited_server.port)
    other.send("/queue/ok", "still fine")
    assert recorder.wait_for_messages(1)[0].body == "still fine"


def test_abrupt_disconnect_mid_frame_harms_nobody(server):
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/abrupt", id="1", headers={"receipt": "s"})
    assert recorder.wait_until(lambda: "s" in recorder.receipts)
    for _ in range(5):
        rude = RawClient(server.port)
        rude.send(CONNECT + b"SEND\ndestination:/queue/abrupt\ncontent-length:100\n\nhalf")
        rude.close()
    producer, _ = connect(server.port)
    producer.send("/queue/abrupt", "whole")
    assert [m.body for m in recorder.wait_for_messages(1)] == ["whole"]


def test_good_frames_before_a_bad_one_in_the_same_packet_are_processed(server):
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/mixed", id="1", headers={"receipt": "s"})
    assert recorder.wait_until(lambda: "s" in recorder.receipts)
    client = RawClient(server.port)
    client.send(
        CONNECT
        + b"SEND\ndestination:/queue/mixed\nreceipt:good\n\nfirst\0"
        + b"SEND\ndestination:/queue/mixed\nbroken header\n\nsecond\0"
    )
    frames = [client.next_frame() for _ in range(3)]
    assert [f.command for f in frames] == ["CONNECTED", "RECEIPT", "ERROR"]
    assert frames[2].headers["message"] == "malformed frame"
    assert [m.body for m in recorder.wait_for_messages(1)] == ["first"]


def test_frames_after_disconnect_are_ignored(server):
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/after-bye", id="1", headers={"receipt": "s"})
    assert recorder.wait_until(lambda: "s" in recorder.receipts)
    client = RawClient(server.port)
    client.send(
        CONNECT
        + b"SEND\ndestination:/queue/after-bye\n\nbefore\0"
        + b"DISCONNECT\nreceipt:bye\n\n\0"
        + b"SEND\ndestination:/queue/after-bye\n\nafter\0"
    )
    assert client.next_frame().command == "CONNECTED"
    assert client.next_frame().headers["receipt-id"] == "bye"
    assert client.wait_closed()
    producer, _ = connect(server.port)
    producer.send("/queue/after-bye", "marker")
    assert [m.body for m in recorder.wait_for_messages(2)] == ["before", "marker"]


def _send_oversized(port: int, head: bytes, body_size: int) -> tuple[OSError | None, RawClient]:
    """Send a SEND whose body is over the limit, all of it, as a client that writes its whole
    frame before it reads; the error its write met (None: it could write it all)."""
    client = RawClient(port)
    client.connect()
    try:
        client.send(head + b"x" * body_size + b"\0")
    except OSError as error:
        return error, client
    return None, client


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "no content-length"])
def test_a_client_sending_a_frame_over_the_limit_finishes_its_write_and_reads_the_error(
    server, declared
):
    """16 MiB with the default maxbodysize (10 MiB): the server refused the frame and closed
    while the client was still writing it, so its write failed (EPIPE or ECONNRESET) and
    the ERROR was lost with the connection's reset. The server now reads and throws away
    the rest of the refused frame before it closes."""
    size = 16 * MIB
    head = b"SEND\ndestination:/queue/too-big\nreceipt:big\n"
    head += b"content-length:%d\n\n" % size if declared else b"\n"
    error, client = _send_oversized(server.port, head, size)
    assert error is None, f"the client's write failed: {error!r}"
    frame = client.next_frame()
    assert frame.command == "ERROR" and frame.headers["message"] == "frame too large"
    assert client.wait_closed()
    client.close()


def test_stomp_py_sending_a_message_over_the_limit_reports_the_error(server):
    """stomp.py's send of 16 MiB returns and its listener is told the server's ERROR (it
    raised a broken pipe, and the ERROR never reached the listener)."""
    producer, recorder = connect(server.port)
    producer.send("/queue/too-big", "x" * (16 * MIB))  # raised BrokenPipeError
    assert recorder.wait_until(lambda: bool(recorder.errors))
    assert recorder.errors[0].headers["message"] == "frame too large"


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "no content-length"])
def test_a_client_that_stops_sending_a_refused_frame_is_closed_after_discardtime(
    start_server, declared
):
    """The rest of a refused frame is waited for only ``discardtime``; its ERROR is sent at
    once."""
    server = start_server(
        **{"StompListener.maxbodysize": "100", "StompListener.discardtime": "0.5"}
    )
    client = RawClient(server.port)
    client.connect()
    length = b"content-length:1000\n" if declared else b""
    client.send(b"SEND\ndestination:/queue/a\n" + length + b"\n" + b"x" * 500)
    started = time.monotonic()
    assert client.next_frame().headers["message"] == "frame too large"
    assert client.wait_closed()
    assert 0.4 < time.monotonic() - started < 5


def test_a_refused_frame_longer_than_discardbytes_is_cut_off(start_server):
    """Past ``discardbytes`` of the refused frame the connection closes without waiting for
    the rest: the ERROR was written first."""
    server = start_server(
        **{"StompListener.maxbodysize": "100", "StompListener.discardbytes": str(64 * 1024)}
    )
    client = RawClient(server.port)
    client.connect()
    client.send(b"SEND\ndestination:/queue/a\ncontent-length:100000000\n\n")
    assert client.next_frame().headers["message"] == "frame too large"
    client.send(b"x" * (128 * 1024))  # within the socket buffers: the write goes through
    assert client.wait_closed(timeout=5)
