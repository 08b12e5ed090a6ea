"""The sans-io STOMP session: negotiation, validation, receipts, errors, heart-beats."""

import pytest

from tests.fakes import FakeRuntime
from wiremq.modules.egress import Egress, Outbox
from wiremq.modules.stomp.codec import FrameDecoder
from wiremq.modules.stomp.frames import Frame, ProtocolError
from wiremq.modules.stomp.session import SessionSettings, StompSession


class RecordingHandler:
    """The broker side, reduced to a record of what the session asked of it."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.refusal: ProtocolError | None = None  # raised by every request when set
        self.deferred: list | None = None  # when a list, when_idle actions wait in it
        self.closings = 0  # times the session said it is closing

    def _record(self, *call) -> None:
        self.calls.append(call)
        if self.refusal is not None:
            raise self.refusal

    def on_connect(self, frame):
        self._record("connect", frame.command)

    def on_send(self, frame, destination):
        self._record("send", destination)

    def on_subscribe(self, frame, sub_id, destination, ack_mode):
        self._record("subscribe", sub_id, destination, ack_mode)

    def on_unsubscribe(self, frame, sub_id):
        self._record("unsubscribe", sub_id)

    def on_ack(self, frame, nack):
        self._record("nack" if nack else "ack", frame.headers)
        return True  # acknowledged at once: the session sends the receipt

    def on_transaction(self, frame, transaction):
        self._record(frame.command.lower(), transaction)

    def closing(self):
        self.closings += 1

    def when_idle(self, action):
        if self.deferred is None:
            action()
        else:
            self.deferred.append(action)


def raw(command: str, headers: dict[str, str] | None = None, body: bytes = b"") -> bytes:
    """A frame as a client writes it (the test spells any escapes itself)."""
    head = "".join(f"{name}:{value}\n" for name, value in (headers or {}).items())
    return f"{command}\n{head}\n".encode() + body + b"\0"


class Client:
    def __init__(self, settings: SessionSettings | None = None) -> None:
        self.clock = FakeRuntime()
        self.handler = RecordingHandler()
        self.egress = Egress(Outbox())
        self.session = StompSession(
            self.handler, self.egress, self.clock.monotonic, "sess-1", settings
        )

    def send(self, command: str, headers: dict[str, str] | None = None) -> None:
        self.session.data_received(raw(command, headers))

    def output(self) -> list[Frame]:
        decoder = FrameDecoder()
        decoder.version = self.session.version or "1.2"
        return decoder.feed(b"".join(self.egress.take()))

    def connect(self, accept: str | None = "1.2", heart_beat: str | None = None) -> Frame:
        headers = {"accept-version": accept, "heart-beat": heart_beat}
        self.send("CONNECT", {k: v for k, v in headers.items() if v is not None})
        [connected] = self.output()
        assert connected.command == "CONNECTED"
        return connected

    def error(self) -> Frame:
        """The one ERROR frame written, after which the connection is closing."""
        [error] = self.output()
        assert error.command == "ERROR"
        assert self.session.closed
        assert self.egress.close_requested
        return error


def connected(version: str = "1.2", heart_beat: str | None = None) -> Client:
    client = Client()
    client.connect(version, heart_beat)
    return client


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


def test_no_common_version_is_an_error_listing_the_server_versions():
    client = Client()
    client.send("CONNECT", {"accept-version": "2.0,3.1"})
    error = client.error()
    assert error.headers["message"] == "unsupported protocol version"
    assert error.headers["version"] == "1.0,1.1,1.2"
    assert client.handler.calls == []


@pytest.mark.parametrize("command", ["CONNECT", "STOMP"])
def test_connected_headers(command):
    client = Client(SessionSettings(server_name="wiremq-test"))
    client.send(command, {"accept-version": "1.2", "host": "h"})
    [frame] = client.output()
    assert frame.command == "CONNECTED"
    assert frame.headers == {
        "version": "1.2",
        "server": "wiremq-test",
        "session": "sess-1",
        "heart-beat": "0,0",
    }
    assert client.handler.calls == [("connect", command)]


def test_frame_before_connect_is_an_error_and_closes():
    client = Client()
    client.send("SEND", {"destination": "/queue/a"})
    assert client.error().headers["message"] == "not connected"
    assert client.handler.calls == []


def test_frames_sent_with_connect_are_decoded_with_the_negotiated_version():
    client = Client()
    pipelined = raw("CONNECT", {"accept-version": "1.2"}) + raw(
        "SEND", {"destination": "/queue/a\\cb"}
    )
    client.session.data_received(pipelined)
    assert client.handler.calls == [("connect", "CONNECT"), ("send", "/queue/a:b")]


@pytest.mark.parametrize("heart_beat", ["1", "a,b", "1,2,3", ""])
def test_invalid_heart_beat_header_is_an_error(heart_beat):
    client = Client()
    client.send("CONNECT", {"accept-version": "1.2", "heart-beat": heart_beat})
    assert client.error().headers["message"] == "invalid heart-beat header"


def test_non_ascii_digit_heart_beat_is_an_error():
    client = Client()
    client.send("CONNECT", {"accept-version": "1.2", "heart-beat": "²,0"})
    assert client.error().headers["message"] == "invalid heart-beat header"


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
def test_invalid_request_is_an_error_and_closes(version, command, headers, message):
    client = connected(version)
    client.send(command, headers)
    assert client.error().headers["message"] == message
    assert client.handler.calls == [("connect", "CONNECT")]


@pytest.mark.parametrize(
    ("version", "command", "headers", "call"),
    [
        ("1.2", "SEND", {"destination": "/queue/a"}, ("send", "/queue/a")),
        (
            "1.0",
            "SUBSCRIBE",
            {"destination": "/queue/a"},
            ("subscribe", "/queue/a", "/queue/a", "auto"),
        ),
        (
            "1.2",
            "SUBSCRIBE",
            {"destination": "/topic/t", "id": "7", "ack": "client-individual"},
            ("subscribe", "7", "/topic/t", "client-individual"),
        ),
        ("1.0", "UNSUBSCRIBE", {"destination": "/queue/a"}, ("unsubscribe", "/queue/a")),
        ("1.2", "UNSUBSCRIBE", {"id": "7"}, ("unsubscribe", "7")),
        ("1.0", "ACK", {"message-id": "m"}, ("ack", {"message-id": "m"})),
        (
            "1.1",
            "NACK",
            {"message-id": "m", "subscription": "s"},
            ("nack", {"message-id": "m", "subscription": "s"}),
        ),
        ("1.2", "ACK", {"id": "m"}, ("ack", {"id": "m"})),
        ("1.2", "BEGIN", {"transaction": "tx"}, ("begin", "tx")),
        ("1.2", "COMMIT", {"transaction": "tx"}, ("commit", "tx")),
        ("1.2", "ABORT", {"transaction": "tx"}, ("abort", "tx")),
    ],
)
def test_valid_request_reaches_the_handler(version, command, headers, call):
    client = connected(version)
    client.send(command, headers)
    assert client.handler.calls[-1] == call
    assert client.output() == []
    assert not client.session.closed


@pytest.mark.parametrize(
    ("command", "headers"),
    [
        ("SUBSCRIBE", {"destination": "/queue/a", "id": "1"}),
        ("UNSUBSCRIBE", {"id": "1"}),
        ("ACK", {"id": "m"}),
        ("NACK", {"id": "m"}),
        ("BEGIN", {"transaction": "t"}),
        ("COMMIT", {"transaction": "t"}),
        ("ABORT", {"transaction": "t"}),
    ],
)
def test_receipt_is_sent_when_asked(command, headers):
    client = connected("1.2")
    client.send(command, {**headers, "receipt": "r\\c1"})
    assert client.output() == [Frame("RECEIPT", {"receipt-id": "r:1"})]


def test_error_carries_the_receipt_id_of_the_failing_frame():
    client = connected("1.2")
    client.send("SEND", {"receipt": "77"})
    assert client.error().headers["receipt-id"] == "77"


def test_handler_refusal_becomes_an_error():
    client = connected("1.2")
    client.handler.refusal = ProtocolError("unknown destination", "no such place")
    client.send("SEND", {"destination": "/nowhere"})
    error = client.error()
    assert error.headers["message"] == "unknown destination"
    assert error.body == b"no such place"


def test_malformed_bytes_are_an_error():
    client = connected("1.2")
    client.session.data_received(b"SEND\ncontent-length:zz\n\n\0")
    assert client.error().headers["message"] == "malformed frame"


def test_frames_before_a_malformed_one_are_handled_first():
    client = connected("1.2")
    client.session.data_received(
        raw("SEND", {"destination": "/queue/a"}) + b"SEND\ncontent-length:zz\n\n\0"
    )
    assert client.handler.calls[-1] == ("send", "/queue/a")
    assert client.error().headers["message"] == "malformed frame"


def test_error_waits_until_earlier_work_is_done_and_nothing_more_is_read():
    client = connected("1.2")
    client.handler.deferred = []
    client.send("SEND", {})
    client.send("SEND", {"destination": "/queue/a"})
    assert client.output() == []
    assert client.handler.calls == [("connect", "CONNECT")]
    [send_error] = client.handler.deferred
    send_error()
    assert client.error().headers["message"] == "missing destination header"


def test_input_after_close_is_ignored():
    client = connected("1.2")
    client.send("FOO")
    client.error()
    client.send("SEND", {"destination": "/queue/a"})
    assert client.handler.calls == [("connect", "CONNECT")]
    assert client.egress.take() == []


def test_disconnect_sends_its_receipt_and_closes():
    client = connected("1.2")
    client.send("DISCONNECT", {"receipt": "bye"})
    client.send("SEND", {"destination": "/queue/a"})
    assert client.output() == [Frame("RECEIPT", {"receipt-id": "bye"})]
    assert client.session.closed and client.egress.close_requested
    assert client.handler.calls == [("connect", "CONNECT")]
    assert client.handler.closings == 1  # the broker side ends its subscriptions


# -- heart-beats -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("client_heart_beat", "send_interval", "receive_interval", "header"),
    [
        ("0,0", 0.0, 0.0, "0,0"),
        ("5000,20000", 20.0, 20.0, "10000,10000"),  # receive: max(10000, 5000) * grace 2
        ("30000,1000", 10.0, 60.0, "10000,10000"),
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
    assert client.session.check_heartbeats() is None
    assert client.egress.take() == []


def test_server_heart_beats_only_when_idle():
    client = connected("1.2", "0,1000")  # the server sends every 10 s
    start = client.clock.now
    heart_beats = []
    deadline = client.session.check_heartbeats()
    while deadline is not None and deadline <= start + 40:
        client.clock.now = deadline
        deadline = client.session.check_heartbeats()
        if client.egress.take() == [b"\n"]:
            heart_beats.append(client.clock.now - start)
        if client.clock.now == start + 15:  # a RECEIPT right after this check
            client.send("BEGIN", {"transaction": "t", "receipt": "r"})
            client.egress.take()
    assert heart_beats == [10, 25, 35]  # none at 20: the RECEIPT was a sign of life


def test_server_is_never_silent_longer_than_the_send_interval():
    client = connected("1.2", "0,1000")  # the server sends every 10 s
    writes = [client.clock.now]  # CONNECTED
    deadline = client.session.check_heartbeats()
    client.clock.now += 0.5
    client.send("BEGIN", {"transaction": "t", "receipt": "r"})
    writes.append(client.clock.now)
    client.egress.take()
    while deadline is not None and deadline < writes[0] + 40:
        client.clock.now = deadline
        deadline = client.session.check_heartbeats()
        if client.egress.take():
            writes.append(client.clock.now)
    gaps = [later - earlier for earlier, later in zip(writes, writes[1:], strict=False)]
    assert max(gaps) <= 10.0


def test_silent_client_is_disconnected_after_the_grace_period():
    client = connected("1.2", "1000,0")  # tolerated silence: 10 s * grace 2
    start = client.clock.now
    assert client.session.check_heartbeats() == start + 20
    client.clock.now = start + 19.9
    assert client.session.check_heartbeats() == start + 20
    assert not client.session.closed
    client.clock.now = start + 20
    assert client.session.check_heartbeats() is None
    assert client.error().headers["message"] == "heart-beat timeout"
    assert client.session.check_heartbeats() is None


def test_client_that_heart_beats_stays_connected():
    client = connected("1.2", "1000,0")
    for _ in range(10):
        client.clock.now += 15
        client.session.data_received(b"\n")
        assert client.session.check_heartbeats() == client.clock.now + 20
    assert not client.session.closed
    assert client.egress.take() == []
