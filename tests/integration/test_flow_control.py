"""Flow control over TCP: producers really block at watermarks and resume, windows, spool checks.

A producer here is a raw socket written from a thread as fast as it takes
data (``Flood``); once the server stops reading it, its sends stop completing
as soon as the kernel's buffers are full: a stall of its ``sent`` counter is
the proof that it blocks, and the server's ``flow_state()`` says why. The
helpers are shared with ``test_flow_subscribers.py``.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import call_in_reactor
from tests.defaults import LIMITS
from tests.integration.clients import TIMEOUT, RawClient, connect, fill, until
from wiremq.modules.events import EVENTS
from wiremq.modules.stomp.codec import FrameDecoder
from wiremq.modules.stomp.frames import Frame

READ_CHUNK = 65536  # what the server reads at once: the most it takes after deciding to stop
LEAN_PIPELINE = (
    '<wiremq><Pipeline domain="p2p"><module name="admission"/><module name="transaction"/>'
    '<module name="storage"/><module name="distributing"/></Pipeline><Pipeline domain="pubsub">'
    '<module name="admission"/><module name="transaction"/><module name="storage"/>'
    '<module name="distributing"/></Pipeline></wiremq>'
)


# -- helpers ------------------------------------------------------------------------------


def send_frame(destination: str, body: str, **headers: str) -> bytes:
    """A SEND frame as a raw client writes it."""
    lines = "".join(f"{name}:{value}\n" for name, value in headers.items())
    return f"SEND\ndestination:{destination}\n{lines}\n{body}\0".encode()


def flow_state(reactor: object, server: Any) -> dict[str, Any]:
    """The server's one flow-control query, run on the reactor thread."""
    return call_in_reactor(reactor, server.flow_state)  # type: ignore[return-value]


def client_state(state: dict[str, Any], session: str) -> dict[str, Any] | None:
    return next((c for c in state["clients"] if c["session"] == session), None)


def watermark_state(state: dict[str, Any], name: str) -> dict[str, Any]:
    """A watermark by name, global or per destination."""
    everywhere = [*state["watermarks"]]
    for destination in (*state["queues"], *state["topics"]):
        everywhere.extend(destination["watermarks"])
    return next(w for w in everywhere if w["name"] == name)


def number(body: str | bytes) -> int:
    """The sequence number a Flood put at the start of a body."""
    return int(body[:6])


class Flood:
    """A producer on a raw socket, sending numbered SENDs from a thread as fast as it can.

    ``sent`` counts the SENDs the socket took whole; while the server does not read
    the socket, ``sendall`` blocks and ``sent`` stands still. The thread stops at
    ``limit``, which may be changed while it runs.
    """

    def __init__(
        self,
        port: int,
        destination: str,
        limit: int = 20_000,
        body: int = 1000,
        headers: Callable[[int], dict[str, str]] = lambda i: {},
        heart_beat: str = "0,0",
    ) -> None:
        self.client = RawClient(port)
        self.client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
        self.session = self.client.connect(heart_beat=heart_beat).headers["session"]
        self.client.sock.settimeout(60)
        self.destination = destination
        self.limit = limit
        self.sent = 0
        self.error: OSError | None = None
        self._pad = "x" * body
        self._headers = headers
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def frame(self, i: int) -> bytes:
        return send_frame(self.destination, f"{i:06d}{self._pad}", **self._headers(i))

    def _run(self) -> None:
        try:
            while self.sent < self.limit:
                self.client.sock.sendall(self.frame(self.sent))
                self.sent += 1
        except OSError as error:
            self.error = error

    def stalled(self, quiet: float = 0.3, timeout: float = TIMEOUT) -> bool:
        """Wait until no SEND completes for ``quiet`` seconds; False if it finished first."""
        deadline = time.monotonic() + timeout
        last, since = -1, time.monotonic()
        while time.monotonic() < deadline and self.thread.is_alive():
            now, sent = time.monotonic(), self.sent
            if sent != last:
                last, since = sent, now
            elif now - since >= quiet:
                return True
            time.sleep(0.02)
        return False

    def finish(self, timeout: float = TIMEOUT) -> int:
        """Wait for the thread to send its last SEND; returns how many it sent."""
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"the producer is stuck after {self.sent} SENDs"
        assert self.error is None, f"the producer failed: {self.error}"
        return self.sent

    def close(self) -> None:
        self.client.close()


class SlowClient(RawClient):
    """A raw client whose socket takes little before its TCP window closes; it reads
    only when told to, so the server's writes to it back up."""

    def __init__(self, port: int) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(TIMEOUT)
        sock.connect(("127.0.0.1", port))
        self.sock = sock
        self.decoder = FrameDecoder(LIMITS)
        self.decoder.version = "1.2"
        self.frames: list[Frame] = []
        self.raw = b""
        self.closed = False
        self.session = self.connect().headers["session"]

    def _read(self, deadline: float) -> None:
        before = len(self.raw)
        super()._read(deadline)
        self.raw = self.raw[before:]  # keep memory flat: frames are what tests look at

    def subscribe(self, destination: str, sub_id: str = "1", **headers: str) -> None:
        lines = "".join(f"{k}:{v}\n" for k, v in headers.items())
        self.send(
            f"SUBSCRIBE\nid:{sub_id}\ndestination:{destination}\n{lines}receipt:s{sub_id}\n\n\0".encode()
        )
        receipt = self.next_frame()
        assert receipt.headers.get("receipt-id") == f"s{sub_id}", receipt

    def read_until(
        self, condition: Callable[[list[Frame]], bool], timeout: float = TIMEOUT
    ) -> bool:
        """Read (keeping every frame in ``frames``) until ``condition(frames)`` or closed."""
        deadline = time.monotonic() + timeout
        while not condition(self.frames) and not self.closed and time.monotonic() < deadline:
            self._read(deadline)
        return bool(condition(self.frames))

    def messages(self) -> list[Frame]:
        return [f for f in self.frames if f.command == "MESSAGE"]


def closing_after(factory: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    """Make clients with ``factory``; close their sockets when the test ends, before its
    server is stopped (a blocked producer thread then ends too)."""
    made: list[Any] = []

    def make(*args: Any, **kwargs: Any) -> Any:
        client = factory(*args, **kwargs)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def recording_events() -> Iterator[list[dict[str, Any]]]:
    """Every event on the server's event stream while it runs (info events included,
    whatever the log level)."""
    seen: list[dict[str, Any]] = []
    stop = EVENTS.subscribe(seen.append)
    yield seen
    stop()


# -- producers stopped at watermarks, not dropped -------------------------------------------


@dataclass
class Scope:
    """One watermark configuration for the flood test."""

    overrides: dict[str, str]
    watermark: str  # its name in flow_state
    unit: str  # "bytes" or "messages"
    high: int
    slack: int  # what may pass the high watermark: what one read brings
    stops_everyone: bool  # a global watermark stops every producer of the domain
    persistent: bool = False
    config: str | None = None


VOLATILE_GLOBAL = {
    "VolQueueStoreImpl.globalbytehighwatermark": "200000",
    "VolQueueStoreImpl.globalbytelowwatermark": "100000",
}
SCOPES = {
    "volatile-global": Scope(VOLATILE_GLOBAL, "VolQueueStore", "bytes", 200_000, READ_CHUNK, True),
    "volatile-destination": Scope(
        {
            "VolQueueStoreImpl.bytehighwatermark": "200000",
            "VolQueueStoreImpl.bytelowwatermark": "100000",
        },
        "VolQueueStore /queue/flood",
        "bytes",
        200_000,
        READ_CHUNK,
        False,
    ),
    "persistent-global": Scope(
        {
            "PersQueueFileStore.globalmsghighwatermark": "150",
            "PersQueueFileStore.globalmsglowwatermark": "75",
        },
        "PersQueueStore",
        "messages",
        150,
        100,  # one read of 1 kB messages
        True,
        persistent=True,
    ),
    "without-thread-buffer": Scope(
        VOLATILE_GLOBAL, "VolQueueStore", "bytes", 200_000, READ_CHUNK, True, config=LEAN_PIPELINE
    ),
}


@pytest.mark.parametrize("scope", SCOPES.values(), ids=SCOPES.keys())
def test_a_flooding_producer_blocks_at_the_watermark_and_resumes_when_drained(
    reactor, start_server, floods, scope
):
    server = start_server(scope.config, **scope.overrides)
    other, other_recorder = connect(server.port)
    other.send("/queue/other", "0", receipt="o0")  # a producer of the domain already
    assert other_recorder.wait_until(lambda: "o0" in other_recorder.receipts)
    persistent = {"persistent": "true"} if scope.persistent else {}
    flood = floods(server.port, "/queue/flood", headers=lambda i: persistent)

    def producer() -> dict[str, Any]:
        found = client_state(flow_state(reactor, server), flood.session)
        assert found is not None
        return found

    assert until(lambda: not producer()["reading"]), f"never stopped ({flood.sent} sent)"
    assert flood.stalled(), "the server stopped reading but the SENDs still complete"
    stalled_at = flood.sent
    state = flow_state(reactor, server)
    watermark = watermark_state(state, scope.watermark)
    assert watermark["tripped"] and watermark["trips"] == 1
    assert scope.high <= watermark[scope.unit] <= scope.high + scope.slack
    assert client_state(state, flood.session)["stopped_by"] == [f"<Watermark {scope.watermark}>"]

    for i in range(1, 11):  # another producer, on another queue
        other.send("/queue/other", str(i), receipt=f"o{i}")
    other_went_on = other_recorder.wait_until(
        lambda: "o10" in other_recorder.receipts, timeout=0.5 if scope.stops_everyone else TIMEOUT
    )
    assert other_went_on is not scope.stops_everyone

    flood.limit = stalled_at + 300  # once resumed, a few more
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/flood", id="1")
    assert until(lambda: producer()["reading"], timeout=2), "not resumed once drained"
    total = flood.finish()
    assert total == stalled_at + 300
    messages = recorder.wait_for_messages(total)
    assert [number(m.body) for m in messages] == list(range(total)), "each once, in order"
    assert not recorder.wait_until(lambda: len(recorder.messages) > total, timeout=0.2)
    assert other_recorder.wait_until(lambda: "o10" in other_recorder.receipts)
    state = flow_state(reactor, server)
    assert not watermark_state(state, scope.watermark)["tripped"]
    assert client_state(state, flood.session)["reading"]


def test_a_heart_beating_producer_survives_being_stopped(reactor, start_server, floods):
    server = start_server(**VOLATILE_GLOBAL, **{"StompListener.heartbeatreceive": "200"})
    flood = floods(server.port, "/queue/flood", heart_beat="200,0")  # silence allowed: 0.4 s
    assert flood.stalled()
    time.sleep(0.6)  # stopped longer than its grace period
    flood.limit = flood.sent + 10
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/flood", id="1")
    total = flood.finish(timeout=3)
    messages = recorder.wait_for_messages(total, timeout=3)
    assert [number(m.body) for m in messages] == list(range(total))


def _persistent_send(client: RawClient, destination: str, receipt: str, body: str = "m") -> Frame:
    client.send(send_frame(destination, body, persistent="true", receipt=receipt))
    return client.next_frame(timeout=1)


STORE_AT_3 = {"PersQueueFileStore.msghighwatermark": "3", "PersQueueFileStore.msglowwatermark": "1"}


def _stopped_at_the_store_watermark(server: Any) -> tuple[RawClient, str]:
    """A producer that filled /queue/p to its PersQueueStore watermark (3), its fourth
    persistent SEND waiting unread."""
    client = RawClient(server.port)
    session = client.connect().headers["session"]
    for i in range(3):
        assert _persistent_send(client, "/queue/p", f"r{i}", str(i)).command == "RECEIPT"
    client.send(send_frame("/queue/p", "3", persistent="true", receipt="r3"))
    return client, session


def test_a_persistent_producer_is_stopped_at_its_queues_store_watermark(reactor, start_server):
    server = start_server(**STORE_AT_3)
    client, session = _stopped_at_the_store_watermark(server)
    with pytest.raises(AssertionError, match="no frame arrived"):
        client.next_frame(timeout=0.3)  # its SEND is not read: no receipt
    state = flow_state(reactor, server)
    assert client_state(state, session)["stopped_by"] == ["<Watermark PersQueueStore /queue/p>"]
    watermark = watermark_state(state, "PersQueueStore /queue/p")
    assert watermark["tripped"] and watermark["messages"] == 3
    assert server.store.count("/queue/p")[0] == 3


def test_a_persistent_producer_stopped_at_a_store_watermark_resumes_once_consumed(
    reactor, start_server
):
    server = start_server(**STORE_AT_3)
    client, session = _stopped_at_the_store_watermark(server)
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/p", id="1")
    recorder.wait_for_messages(3)
    assert until(lambda: client_state(flow_state(reactor, server), session)["reading"], timeout=1.5)
    assert client.next_frame(timeout=2).headers["receipt-id"] == "r3"
    assert [m.body for m in recorder.wait_for_messages(4)] == ["0", "1", "2", "3"]


# -- whenfull=fail ----------------------------------------------------------------------------

WHENFULL = '<wiremq><Destination name="/queue/full" whenfull="fail"/></wiremq>'


def test_whenfull_fail_refuses_a_new_producers_persistent_send_naming_its_receipt(
    reactor, start_server
):
    server = start_server(WHENFULL, **STORE_AT_3)
    fill(server.port, "/queue/full", ["1", "2", "3"], persistent="true")
    client = RawClient(server.port)
    client.connect()
    error = _persistent_send(client, "/queue/full", "r-full")
    assert error.command == "ERROR" and error.headers["receipt-id"] == "r-full"
    assert error.headers["message"] == "message not accepted"
    assert b"destination full" in error.body
    assert client.wait_closed()
    assert flow_state(reactor, server)["spool"]["refused"] == {"destination full": 1}


def test_whenfull_fail_refuses_the_filling_producers_next_send_instead_of_blocking(start_server):
    server = start_server(WHENFULL, **STORE_AT_3)
    client = RawClient(server.port)
    client.connect()
    for i in range(3):
        assert _persistent_send(client, "/queue/full", f"r{i}").command == "RECEIPT"
    error = _persistent_send(client, "/queue/full", "r3")
    assert error.command == "ERROR" and error.headers["receipt-id"] == "r3"


# -- spool checks -----------------------------------------------------------------------------


@dataclass
class SpoolCase:
    config: str
    overrides: dict[str, str]
    accepted: list[tuple[str, dict[str, str]]]  # persistent messages that pass first
    refused: tuple[str, dict[str, str]]
    reason: str


def _destination(**attributes: str) -> str:
    text = " ".join(f'{k}="{v}"' for k, v in attributes.items())
    return f'<wiremq><Destination name="/queue/spool" {text}/></wiremq>'


SPOOL_CASES = {
    "maxmsgsize": SpoolCase(  # counted as stored: body and headers
        _destination(maxmsgsize="100"), {}, [("x" * 50, {})], ("x" * 100, {}), "message too large"
    ),
    "spoolquota": SpoolCase(
        _destination(spoolquota="150"),
        {},
        [("x" * 40, {})],
        ("x" * 120, {}),
        "destination spool quota exceeded",
    ),
    "maxspoolusage": SpoolCase(
        "<wiremq/>",
        {"MessageSpool.maxspoolusage": "150"},
        [("x" * 40, {})],
        ("x" * 120, {}),
        "message spool full",
    ),
    "lowpriorityrejectlimit": SpoolCase(
        _destination(lowpriorityrejectlimit="2"),
        {},
        [("a", {}), ("b", {"priority": "3"}), ("c", {"priority": "4"}), ("d", {"priority": "9"})],
        ("e", {"priority": "3"}),
        "low-priority reject limit",
    ),
}


@pytest.mark.parametrize("case", SPOOL_CASES.values(), ids=SPOOL_CASES.keys())
def test_a_persistent_message_that_fails_a_spool_check_gets_an_error_naming_its_receipt(
    reactor, start_server, case
):
    server = start_server(case.config, **case.overrides)
    client = RawClient(server.port)
    client.connect()
    body, headers = case.refused
    client.send(send_frame("/queue/spool", body, **headers, receipt="volatile"))
    assert client.next_frame().headers["receipt-id"] == "volatile", "checks are for persistent"
    for i, (accepted, accepted_headers) in enumerate(case.accepted):
        persistent = {**accepted_headers, "persistent": "true", "receipt": f"ok{i}"}
        client.send(send_frame("/queue/spool", accepted, **persistent))
        assert client.next_frame().headers.get("receipt-id") == f"ok{i}"
    client.send(send_frame("/queue/spool", body, **headers, persistent="true", receipt="refused"))
    error = client.next_frame()
    assert error.command == "ERROR"
    assert error.headers["receipt-id"] == "refused"
    assert error.headers["message"] == "message not accepted"
    assert error.body.decode().startswith(case.reason)
    assert client.wait_closed()
    state = flow_state(reactor, server)
    assert state["spool"]["refused"] == {case.reason: 1}
    assert server.store.count("/queue/spool")[0] == len(case.accepted)


USAGE_SCOPES = {
    "destination": ('<wiremq><Destination name="/queue/usage" spoolquota="3000"/></wiremq>', {}),
    "message spool": (None, {"MessageSpool.maxspoolusage": "3000"}),
}


def _usage(events: list[dict[str, Any]], kind: str, scope: str) -> list[dict[str, Any]]:
    return [e for e in list(events) if e["event"] == kind and e.get("scope") == scope]


def _spool_until_usage_high(port: int, events: list[dict[str, Any]], scope: str) -> int:
    """Send persistent 100-byte messages until the usage event; returns how many were sent."""
    producer, recorder = connect(port)
    sent = 0
    while not _usage(events, "spool.usage_high", scope):
        assert sent < 30, "no usage event below the quota"
        producer.send("/queue/usage", "x" * 100, headers={"persistent": "true"}, receipt=str(sent))
        sent += 1
        assert recorder.wait_until(lambda s=sent: len(recorder.receipts) == s)
    producer.send("/queue/usage", "x" * 100, headers={"persistent": "true"}, receipt="more")
    assert recorder.wait_until(lambda: "more" in recorder.receipts)
    return sent + 1


@pytest.mark.parametrize("name", USAGE_SCOPES)
def test_a_spool_usage_event_at_80_percent_of_a_quota(start_server, events, name):
    config, overrides = USAGE_SCOPES[name]
    server = start_server(config, **overrides)
    scope = "/queue/usage" if name == "destination" else name
    _spool_until_usage_high(server.port, events, scope)
    (high,) = _usage(events, "spool.usage_high", scope)  # once: no flapping above it
    assert high["quota"] == 3000 and 2400 <= high["used"] < 2400 + 200
    assert not _usage(events, "spool.usage_normal", scope)


def test_a_spool_usage_event_when_usage_falls_back_to_60_percent(start_server, events):
    config, overrides = USAGE_SCOPES["destination"]
    server = start_server(config, **overrides)
    sent = _spool_until_usage_high(server.port, events, "/queue/usage")
    consumer, consumed = connect(server.port)
    consumer.subscribe("/queue/usage", id="1")
    consumed.wait_for_messages(sent)
    assert until(lambda: _usage(events, "spool.usage_normal", "/queue/usage"), timeout=1.5)
    (normal,) = _usage(events, "spool.usage_normal", "/queue/usage")
    assert normal["used"] <= 1800


# -- consumer windows -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header", ["consumerQueueEntriesSize", "activemq.prefetchSize", "prefetch-count", None]
)
def test_a_client_individual_consumer_never_has_more_than_its_window_unacknowledged(
    reactor, start_server, header
):
    default = '<wiremq><Destination name="/queue/win" consumerQueueEntriesSize="3"/></wiremq>'
    server = start_server(None if header else default)
    fill(server.port, "/queue/win", [f"m{i:02d}" for i in range(15)])
    consumer, recorder = connect(server.port)
    consumer.subscribe(
        "/queue/win", id="1", ack="client-individual", headers={header: "3"} if header else {}
    )
    recorder.wait_for_messages(3)
    assert not recorder.wait_until(lambda: len(recorder.messages) > 3, timeout=0.2)
    (subscription,) = flow_state(reactor, server)["clients"][-1]["subscriptions"]
    assert subscription["window_messages"] == 3 and subscription["ready"] is False
    for acked in range(15):
        consumer.ack(recorder.messages[acked].headers["ack"])
        recorder.wait_for_messages(min(15, acked + 4))
        (subscription,) = flow_state(reactor, server)["clients"][-1]["subscriptions"]
        assert subscription["inflight_messages"] <= 3
        assert len(recorder.messages) - (acked + 1) <= 3
    assert recorder.bodies() == [f"m{i:02d}" for i in range(15)]


def test_a_consumer_with_a_full_window_is_skipped_for_another(start_server):
    server = start_server()
    stuck, stuck_recorder = connect(server.port)
    stuck.subscribe(
        "/queue/skip",
        id="1",
        ack="client-individual",
        headers={"consumerQueueEntriesSize": "2", "receipt": "s"},
    )
    assert stuck_recorder.wait_until(lambda: stuck_recorder.receipts)
    taker, taker_recorder = connect(server.port)
    taker.subscribe("/queue/skip", id="1", headers={"receipt": "s"})
    assert taker_recorder.wait_until(lambda: taker_recorder.receipts)
    fill(server.port, "/queue/skip", [f"{i:02d}" for i in range(20)])
    taker_recorder.wait_for_messages(18)
    stuck_recorder.wait_for_messages(2)
    assert not stuck_recorder.wait_until(lambda: len(stuck_recorder.messages) > 2, timeout=0.2)
    everything = sorted(stuck_recorder.bodies() + taker_recorder.bodies())
    assert everything == [f"{i:02d}" for i in range(20)]
    assert taker_recorder.bodies() == sorted(taker_recorder.bodies())


@pytest.mark.parametrize("header", ["consumerQueueEntriesBytes", "prefetch-bytes"])
def test_a_window_in_bytes(start_server, header):
    server = start_server()
    fill(server.port, "/queue/bytes", [str(i) * 100 for i in range(6)])
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/bytes", id="1", ack="client-individual", headers={header: "250"})
    recorder.wait_for_messages(3)  # 0, 100 and 200 bytes in flight were below 250
    assert not recorder.wait_until(lambda: len(recorder.messages) > 3, timeout=0.2)
    consumer.ack(recorder.messages[0].headers["ack"])
    recorder.wait_for_messages(4)
    assert not recorder.wait_until(lambda: len(recorder.messages) > 4, timeout=0.2)


@pytest.mark.parametrize(
    "header",
    [
        "consumerQueueEntriesSize",
        "activemq.prefetchSize",
        "prefetch-count",
        "consumerQueueEntriesBytes",
        "prefetch-bytes",
    ],
)
@pytest.mark.parametrize("value", ["0", "-5", "ten", "1.5"])
def test_an_invalid_window_header_gets_an_error(start_server, header, value):
    server = start_server()
    client = RawClient(server.port)
    client.connect()
    client.send(
        f"SUBSCRIBE\nid:1\ndestination:/queue/w\n{header}:{value}\nreceipt:s\n\n\0".encode()
    )
    error = client.next_frame()
    assert error.command == "ERROR"
    assert error.headers["message"] == f"invalid {header} header"
    assert error.headers["receipt-id"] == "s"


def test_the_server_wide_limit_on_delivered_unacknowledged_messages(reactor, start_server):
    server = start_server(**{"MessageSpool.maxdeliveredunacked": "6"})
    for name in ("/queue/u1", "/queue/u2"):
        fill(server.port, name, [f"{name[-2:]}-{i}" for i in range(10)])
    pairs = [connect(server.port), connect(server.port)]
    for (consumer, _), name in zip(pairs, ("/queue/u1", "/queue/u2"), strict=True):
        consumer.subscribe(name, id="1", ack="client-individual")

    def delivered() -> int:
        return sum(len(recorder.messages) for _, recorder in pairs)

    assert until(lambda: delivered() == 6)
    assert not until(lambda: delivered() > 6, timeout=0.3)
    state = flow_state(reactor, server)
    assert state["delivered_unacked"] == 6 and state["delivered_unacked_limit"] == 6
    acked = [0, 0]
    while sum(acked) < 20:
        i = 0 if acked[0] < len(pairs[0][1].messages) else 1
        consumer, recorder = pairs[i]
        assert acked[i] < len(recorder.messages), "nothing to acknowledge: delivery stalled"
        consumer.ack(recorder.messages[acked[i]].headers["ack"])
        acked[i] += 1
        done = sum(acked)
        assert until(lambda done=done: delivered() >= min(20, done + 6))
        assert delivered() - sum(acked) <= 6
    assert until(lambda: flow_state(reactor, server)["delivered_unacked"] == 0)


# -- the thread/buffer module ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("destination", "group"), [("/queue/pq", "P2PPrioQueue"), ("/topic/pq", "PubSubPrioQueue")]
)
def test_a_small_thread_buffer_stops_and_resumes_producers_losing_nothing(
    reactor, start_server, destination, group
):
    server = start_server(**{f"{group}.maxnummessages": "4"})
    consumer, recorder = connect(server.port)
    consumer.subscribe(destination, id="1", headers={"receipt": "s"})
    assert recorder.wait_until(lambda: recorder.receipts)
    producer = RawClient(server.port)
    session = producer.connect().headers["session"]
    producer.send(b"".join(send_frame(destination, f"{i:06d}") for i in range(500)))
    producer.send(send_frame(destination, f"{500:06d}", receipt="last"))
    assert producer.next_frame().headers["receipt-id"] == "last"
    messages = recorder.wait_for_messages(501)
    assert [number(m.body) for m in messages] == list(range(501))
    state = flow_state(reactor, server)
    watermark = watermark_state(state, group)
    assert watermark["trips"] >= 1 and not watermark["tripped"]
    assert client_state(state, session)["reading"]


def test_without_the_thread_buffer_module_traffic_under_load_still_flows(start_server, floods):
    server = start_server(LEAN_PIPELINE)
    queue_consumer, queue_recorder = connect(server.port)
    queue_consumer.subscribe("/queue/lean", id="1", headers={"receipt": "s"})
    subscribers = [connect(server.port) for _ in range(2)]
    for subscriber, recorder in [*subscribers, (queue_consumer, queue_recorder)]:
        subscriber.subscribe("/topic/lean", id="2", headers={"receipt": "t"})
        assert recorder.wait_until(lambda r=recorder: "t" in r.receipts)
    to_queue = floods(server.port, "/queue/lean", limit=2000, body=200)
    to_topic = floods(server.port, "/topic/lean", limit=2000, body=200)
    assert to_queue.finish() == to_topic.finish() == 2000
    queue_recorder.wait_for_messages(4000)
    in_queue = [
        number(m.body) for m in queue_recorder.messages if "queue" in m.headers["destination"]
    ]
    assert in_queue == list(range(2000))
    for _, recorder in subscribers:
        assert [number(m.body) for m in recorder.wait_for_messages(2000)] == list(range(2000))
