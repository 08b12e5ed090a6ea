"""The sans-io STOMP session: negotiation, validation into events, replies, heart-beats."""

import pytest

from tests.defaults import LIMITS, decoder
from wiremq.modules.stomp.events import (
    Abort,
    Acknowledge,
    BadInput,
    Begin,
    Commit,
    Connect,
    Connected,
    Disconnect,
    Error,
    Heartbeat,
    Receipt,
    Recover,
    Recovered,
    Send,
    Subscribe,
    TransactionError,
    Unsubscribe,
)
from wiremq.modules.stomp.frames import Frame
from wiremq.modules.stomp.session import SessionSettings, StompSession

DEFAULTS = SessionSettings(10000, 10000, 2.0, LIMITS)  # heart-beat floors of 10 s


def raw(command: str, headers: dict[str, str] | None = None, body: bytes = b"") -> bytes:
    """A frame as a client writes it (the test spells any escapes itself)."""
    head = "".join(f"{name}:{value}\n" for name, value in (headers or {}).items())
    return f"{command}\n{head}\n".encode() + body + b"\0"


class Client:
    def __init__(self, settings: SessionSettings = DEFAULTS) -> None:
        self.now = 1000.0
        self.session = StompSession(settings, "sess-1", self.now)

    def send(self, command: str, headers: dict[str, str] | None = None) -> list:
        return self.session.receive_data(raw(command, headers), self.now)

    def connect(self, accept: str | None = "1.2", heart_beat: str | None = None) -> Frame:
        headers = {"accept-version": accept, "heart-beat": heart_beat}
        [event] = self.send("CONNECT", {k: v for k, v in headers.items() if v is not None})
        assert isinstance(event, Connect)
        return self.reply(Connected())

    def reply(self, reply) -> Frame:
        [frame] = decoder(self.session.version or "1.2").feed(self.session.send(reply))
        return frame


def connected(version: str = "1.2", heart_beat: str | None = None) -> Client:
    client = Client()
    client.connect(version, heart_beat)
    return client


def bad(events: list) -> str:
    """The message of the BadInput that ends ``events``."""
    assert isinstance(events[-1], BadInput), events
    return events[-1].error.message


# -- connecting ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accept", "version"),
    [
        (None, "1.0"),
        ("1.0", "1.0"),
        ("1.0,1.1", "1.1"),
        ("1.2,1.0,1.1", "1.2"),
        ("1.1, 1.2", "1.2"),
        ("1.1,1.3", "1.1"),
    ],
)
def test_version_negotiation_picks_the_highest_common_version(accept, version):
    client = Client()
    assert client.connect(accept).headers["version"] == version
    assert client.session.version == version


def test_no_common_version_is_bad_input_and_the_error_lists_the_server_versions():
    client = Client()
    events = client.send("CONNECT", {"accept-version": "2.0,3.1"})
    assert bad(events) == "unsupported protocol version"
    error = client.reply(Error("unsupported protocol version", "", None))
    assert error.command == "ERROR"
    assert error.headers["version"] == "1.0,1.1,1.2"


@pytest.mark.parametrize("command", ["CONNECT", "STOMP"])
def test_connected_headers(command):
    client = Client()
    [event] = client.send(command, {"accept-version": "1.2", "host": "h"})
    assert event == Connect({"accept-version": "1.2", "host": "h"})
    assert client.reply(Connected()) == Frame(
        "CONNECTED",
        {"version": "1.2", "server": "wiremq", "session": "sess-1", "heart-beat": "0,0"},
    )


def test_frame_before_connect_is_bad_input():
    client = Client()
    assert bad(client.send("SEND", {"destination": "/queue/a"})) == "not connected"
    assert client.send("CONNECT", {"accept-version": "1.2"}) == []  # nothing more is read


def test_frames_sent_with_connect_are_decoded_with_the_negotiated_version():
    client = Client()
    pipelined = raw("CONNECT", {"accept-version": "1.2"}) + raw(
        "SEND", {"destination": "/queue/a\\cb"}
    )
    events = client.session.receive_data(pipelined, client.now)
    assert [type(e) for e in events] == [Connect, Send]
    assert events[1].destination == "/queue/a:b"


@pytest.mark.parametrize("heart_beat", ["1", "a,b", "1,2,3", "", "²,0"])
def test_invalid_heart_beat_header_is_bad_input(heart_beat):
    client = Client()
    events = client.send("CONNECT", {"accept-version": "1.2", "heart-beat": heart_beat})
    assert bad(events) == "invalid heart-beat header"


# -- validating requests ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "command", "headers", "message"),
    [
        ("1.2", "FOO", {}, "unknown command"),
        ("1.2", "SEND", {}, "missing destination header"),
        ("1.2", "SEND", {"destination": ""}, "missing destination header"),
        ("1.1", "SUBSCRIBE", {"destination": "/queue/a"}, "missing id header"),
        ("1.2", "SUBSCRIBE", {"destination": "/queue/a"}, "missing id header"),
        (
            "1.2",
            "SUBSCRIBE",
            {"destination": "/queue/a", "id": "1", "ack": "x"},
            "invalid ack mode",
        ),
        ("1.2", "UNSUBSCRIBE", {"destination": "/queue/a"}, "missing id header"),
        ("1.0", "UNSUBSCRIBE", {}, "missing id header"),
        ("1.0", "NACK", {"message-id": "m"}, "unknown command"),
        ("1.0", "ACK", {}, "missing message-id header"),
        ("1.1", "ACK", {"message-id": "m"}, "missing subscription header"),
        ("1.1", "NACK", {"id": "m", "subscription": "s"}, "missing message-id header"),
        ("1.2", "ACK", {"message-id": "m", "subscription": "s"}, "missing id header"),
        ("1.2", "BEGIN", {}, "missing transaction header"),
    ],
)
def test_invalid_request_is_bad_input_and_nothing_more_is_read(version, command, headers, message):
    client = connected(version)
    assert bad(client.send(command, {**headers, "receipt": "77"})) == message
    assert client.send("SEND", {"destination": "/queue/a"}) == []


def test_bad_input_carries_the_receipt_of_the_failing_frame():
    client = connected("1.2")
    [event] = client.send("SEND", {"receipt": "77"})
    assert event.error.receipt_id == "77"


H = {"receipt": "r"}


@pytest.mark.parametrize(
    ("version", "command", "headers", "event"),
    [
        (
            "1.2",
            "SEND",
            {"destination": "/queue/a"},
            Send("/queue/a", {"destination": "/queue/a"}, b""),
        ),
        (
            "1.0",
            "SUBSCRIBE",
            {"destination": "/queue/a"},
            Subscribe("/queue/a", "/queue/a", "auto", {"destination": "/queue/a"}),
        ),
        (
            "1.2",
            "SUBSCRIBE",
            {"destination": "/topic/t", "id": "7", "ack": "client-individual"},
            Subscribe(
                "7",
                "/topic/t",
                "client-individual",
                {"destination": "/topic/t", "id": "7", "ack": "client-individual"},
            ),
        ),
        ("1.0", "UNSUBSCRIBE", {"destination": "/q"}, Unsubscribe("/q", {"destination": "/q"})),
        ("1.2", "UNSUBSCRIBE", {"id": "7"}, Unsubscribe("7", {"id": "7"})),
        ("1.0", "ACK", {"message-id": "m"}, Acknowledge(False, "m", None, {"message-id": "m"})),
        (
            "1.1",
            "NACK",
            {"message-id": "m", "subscription": "s"},
            Acknowledge(True, "m", "s", {"message-id": "m", "subscription": "s"}),
        ),
        ("1.2", "ACK", {"id": "m@3"}, Acknowledge(False, "m", "3", {"id": "m@3"})),
        ("1.2", "BEGIN", {"transaction": "tx"}, Begin("tx", {"transaction": "tx"})),
        ("1.2", "COMMIT", {"transaction": "tx"}, Commit("tx", {"transaction": "tx"})),
        ("1.2", "ABORT", {"transaction": "tx"}, Abort("tx", {"transaction": "tx"})),
        ("1.2", "DISCONNECT", H, Disconnect(H)),
    ],
)
def test_valid_request_becomes_its_event(version, command, headers, event):
    client = connected(version)
    assert client.send(command, headers) == [event]
    assert not client.session.closed


def test_nothing_is_read_after_disconnect():
    client = connected("1.2")
    events = client.session.receive_data(
        raw("DISCONNECT") + raw("SEND", {"destination": "/queue/a"}), client.now
    )
    assert [type(e) for e in events] == [Disconnect]
    assert client.send("SEND", {"destination": "/queue/a"}) == []


def test_malformed_bytes_are_bad_input():
    client = connected("1.2")
    events = client.session.receive_data(b"SEND\ncontent-length:zz\n\n\0", client.now)
    assert bad(events) == "malformed frame"


def test_frames_before_a_malformed_one_come_first():
    client = connected("1.2")
    events = client.session.receive_data(
        raw("SEND", {"destination": "/queue/a"}) + b"SEND\ncontent-length:zz\n\n\0", client.now
    )
    assert isinstance(events[0], Send)
    assert bad(events) == "malformed frame"


# -- replies ---------------------------------------------------------------------------


def test_receipt_ids_are_escaped_for_the_version():
    client = connected("1.2")
    assert client.reply(Receipt("r:1")) == Frame("RECEIPT", {"receipt-id": "r:1"})
    assert client.session.send(Receipt("r:1")) == b"RECEIPT\nreceipt-id:r\\c1\n\n\0"


def test_nothing_is_sent_after_an_error():
    client = connected("1.2")
    error = client.reply(Error("unknown destination", "no such place", "9"))
    assert error.headers["message"] == "unknown destination"
    assert error.headers["receipt-id"] == "9"
    assert error.body == b"no such place"
    assert client.session.closed
    assert client.session.send(Receipt("late")) == b""
    assert client.send("SEND", {"destination": "/queue/a"}) == []


def test_a_discarded_transactions_error_names_it_and_the_session_goes_on():
    client = connected("1.2")
    notice = client.reply(TransactionError("t:1", "transaction discarded", "too big"))
    assert notice.command == "ERROR" and notice.headers["transaction"] == "t:1"
    assert notice.headers["message"] == "transaction discarded" and notice.body == b"too big"
    assert not client.session.closed
    assert client.reply(Receipt("after")).headers["receipt-id"] == "after"


def test_recover_needs_a_receipt_and_its_answer_lists_the_prepared_xids():
    client = connected("1.2")
    [event] = client.send("RECOVER", {"receipt": "r"})
    assert isinstance(event, Recover)
    answer = client.reply(Recovered("r", ["1:a:b", "1:c:d"]))
    assert answer == Frame("RECEIPT", {"receipt-id": "r", "xa-count": "2", "xids": "1:a:b,1:c:d"})
    assert bad(connected("1.2").send("RECOVER")) == "missing receipt header"


# -- heart-beats -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("client_heart_beat", "send_interval", "receive_interval", "header"),
    [
        ("0,0", 0.0, 0.0, "0,0"),
        ("5000,20000", 20.0, 20.0, "20000,10000"),  # receive: max(10000, 5000) * grace 2
        ("30000,1000", 10.0, 60.0, "10000,30000"),  # the client's, down to the floors
        ("0,1000", 10.0, 0.0, "10000,0"),
        ("1000,0", 0.0, 20.0, "0,10000"),
    ],
)
def test_heart_beat_negotiation(client_heart_beat, send_interval, receive_interval, header):
    client = Client()
    assert client.connect("1.2", client_heart_beat).headers["heart-beat"] == header
    assert client.session.send_interval == send_interval
    assert client.session.receive_interval == receive_interval


@pytest.mark.parametrize("heart_beat", [None, "0,0"])
def test_no_heart_beat_checks_when_heart_beats_are_off(heart_beat):
    client = connected("1.2", heart_beat)
    assert client.session.tick(client.now, False) == (b"", None, None)


def test_server_heart_beats_only_when_idle():
    client = connected("1.2", "0,1000")  # the server sends every 10 s
    start = client.now
    heart_beats = []
    tick = client.session.tick(client.now, True)  # CONNECTED was written
    while tick.next_at is not None and tick.next_at <= start + 40:
        client.now = tick.next_at
        wrote = client.now == start + 20  # a RECEIPT went out since the check at 15
        tick = client.session.tick(client.now, wrote)
        if tick.send == client.session.send(Heartbeat()):
            heart_beats.append(client.now - start)
    assert heart_beats == [10, 25, 35]  # none at 20: the RECEIPT was a sign of life


def test_silent_client_is_disconnected_after_the_grace_period():
    client = connected("1.2", "1000,0")  # tolerated silence: 10 s * grace 2
    start = client.now
    assert client.session.tick(start, False).next_at == start + 20
    assert client.session.tick(start + 19.9, False).next_at == start + 20
    timed_out = client.session.tick(start + 20, False).timed_out
    assert timed_out is not None and timed_out.message == "heart-beat timeout"


def test_silence_while_the_server_does_not_read_the_client_is_not_the_clients():
    client = connected("1.2", "1000,0")
    start = client.now
    client.session.reading_stopped(True, start)
    assert client.session.tick(start + 100, False).timed_out is None
    client.session.reading_stopped(False, start + 100)
    assert client.session.tick(start + 119, False).timed_out is None


def test_client_that_heart_beats_stays_connected():
    client = connected("1.2", "1000,0")
    for _ in range(10):
        client.now += 15
        assert client.session.receive_data(b"\n", client.now) == []
        assert client.session.tick(client.now, False).next_at == client.now + 20
