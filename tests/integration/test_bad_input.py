"""Every bad frame gets an ERROR saying what was wrong; the connection closes; others go on."""

from __future__ import annotations

import pytest

from tests.integration.clients import RawClient, connect

CONNECT = b"CONNECT\naccept-version:1.2\nhost:x\n\n\0"
BIG = 64 * 1024

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
        CONNECT + b"SEND\ndestination:/queue/a\ncontent-length:99999999\n\n",
        "frame too large",
    ),
    "body over the limit without content-length": (
        CONNECT + b"SEND\ndestination:/queue/a\n\n" + b"x" * (BIG + 10),
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
