"""Slow consumers over TCP: topic policies, egress priority, slowness and its events.

A slow subscriber is a ``SlowClient``: a raw socket with a small receive buffer
that reads nothing until the test says so, so the server's writes to it back
up into its egress queues. Publishers are ``Flood`` threads (see
``test_flow_control.py``).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.conftest import call_in_reactor
from tests.integration.clients import TIMEOUT, RawClient, connect, until
from tests.integration.test_flow_control import (
    READ_CHUNK,
    Flood,
    client_state,
    flow_state,
    number,
    watermark_state,
)
from wiremq.modules.stomp.frames import Frame

TOPIC_WATERMARKS = {
    "DestinationManager.topicglobalbytehighwatermark": "50000",
    "DestinationManager.topicglobalbytelowwatermark": "25000",
}


def _policy(topic: str, policy: str) -> str:
    return f'<wiremq><Destination name="{topic}" slowsubscriberpolicy="{policy}"/></wiremq>'


def _subscribed(port: int, destination: str, **headers: str):
    connection, recorder = connect(port)
    connection.subscribe(destination, id="1", headers={**headers, "receipt": "s"})
    assert recorder.wait_until(lambda: "s" in recorder.receipts)
    return connection, recorder


def _subscription(state: dict[str, Any], session: str) -> dict[str, Any]:
    client = client_state(state, session)
    assert client is not None, f"{session} is not connected"
    (subscription,) = client["subscriptions"]
    return subscription


def stopped_by_the_live_buffer(reactor: object, server: Any, flood: Flood) -> dict[str, Any]:
    """Wait until the topic live buffer's watermark stops ``flood``'s publisher (its socket
    not read, its SENDs no longer completing); the flow state then."""

    def publisher() -> dict[str, Any]:
        found = client_state(flow_state(reactor, server), flood.session)
        assert found is not None
        return found

    assert until(lambda: not publisher()["reading"]), f"never stopped ({flood.sent} sent)"
    assert flood.stalled(), "the server stopped reading but the SENDs still complete"
    state = flow_state(reactor, server)
    assert client_state(state, flood.session)["stopped_by"] == ["<Watermark TopicLiveBuffer>"]
    return state


def _after_error(frames: list[Frame]) -> list[Frame]:
    """Frames a client received after an ERROR: there must be none."""
    commands = [f.command for f in frames]
    return frames[commands.index("ERROR") + 1 :] if "ERROR" in commands else []


# -- block: the live buffer holds, the publisher stops -------------------------------------


@pytest.mark.parametrize("window", ["consumerQueueEntriesSize", "activemq.prefetchSize"])
def test_block_stops_the_publisher_within_the_live_buffer_until_the_slow_one_reads(
    reactor, start_server, floods, slow_clients, window
):
    server = start_server(**TOPIC_WATERMARKS)
    slow = slow_clients(server.port)
    slow.subscribe("/topic/block", **{window: "5"})
    fast, recorder = _subscribed(server.port, "/topic/block")
    flood = floods(server.port, "/topic/block")
    state = stopped_by_the_live_buffer(reactor, server, flood)
    live = watermark_state(state, "TopicLiveBuffer")
    assert live["tripped"] and 25_000 < live["bytes"] <= 50_000 + READ_CHUNK
    (topic,) = state["topics"]
    assert topic["live_buffer_bytes"] == live["bytes"] and topic["ready_subscribers"] == 1
    assert _subscription(state, slow.session)["ready"] is False
    assert _subscription(state, slow.session)["window_messages"] == 5

    flood.limit = flood.sent + 300  # once resumed, a few more
    assert slow.read_until(lambda frames: len(frames) >= flood.limit, timeout=15)
    total = flood.finish()
    assert total == flood.limit
    assert [number(m.body) for m in slow.messages()] == list(range(total))
    assert [number(m.body) for m in recorder.wait_for_messages(total)] == list(range(total))
    state = flow_state(reactor, server)
    assert not watermark_state(state, "TopicLiveBuffer")["tripped"]
    assert client_state(state, flood.session)["reading"]


# -- discard-oldest: nobody waits for the slow one -------------------------------------------


def test_discard_oldest_lets_the_others_go_at_full_speed_and_keeps_persistent_messages(
    reactor, start_server, floods, slow_clients
):
    server = start_server(
        _policy("/topic/x", "discard-oldest"),
        **{"ClientEgress.maxdepth": "200"},
        **TOPIC_WATERMARKS,
    )
    slow = slow_clients(server.port)
    slow.subscribe("/topic/x")
    fast = [_subscribed(server.port, "/topic/x") for _ in range(2)]
    persistent = set(range(0, 1500, 50))
    flood = floods(
        server.port,
        "/topic/x",
        limit=1500,
        body=4000,
        headers=lambda i: {"persistent": "true"} if i in persistent else {},
    )
    assert flood.finish() == 1500, "the publisher never waits"
    for _, recorder in fast:  # each delivery mode in order (G-1 and D-1 are not ordered)
        got = [number(m.body) for m in recorder.wait_for_messages(1500)]
        assert [i for i in got if i in persistent] == sorted(persistent)
        assert [i for i in got if i not in persistent] == sorted(set(range(1500)) - persistent)
    state = flow_state(reactor, server)
    assert all(w["trips"] == 0 for w in state["watermarks"]), "nothing was stopped"
    discards = client_state(state, slow.session)["egress"]["D-1"]["discards_msgs"]
    assert discards > 0, "the slow subscriber's direct queue discarded nothing"

    assert slow.read_until(
        lambda frames: (
            {number(f.body) for f in frames if f.command == "MESSAGE"} >= persistent
            and any(number(f.body) == 1499 for f in frames if f.command == "MESSAGE")
        )
    )
    got = [number(m.body) for m in slow.messages()]
    assert [i for i in got if i in persistent] == sorted(persistent), "persistent: never dropped"
    direct = [i for i in got if i not in persistent]
    assert direct == sorted(direct) and len(got) == len(set(got))
    indicated = [int(m.headers["discarded"]) for m in slow.messages() if "discarded" in m.headers]
    assert indicated and sum(indicated) == discards == 1500 - len(got)


# -- disconnect ---------------------------------------------------------------------------


def test_disconnect_drops_a_subscriber_that_does_not_acknowledge_with_an_error(
    reactor, start_server, floods
):
    server = start_server(_policy("/topic/d", "disconnect"), **TOPIC_WATERMARKS)
    slow = RawClient(server.port)  # it reads everything at once, and acknowledges nothing
    session = slow.connect().headers["session"]
    slow.send(
        b"SUBSCRIBE\nid:1\ndestination:/topic/d\nack:client-individual\n"
        b"consumerQueueEntriesSize:5\nreceipt:s\n\n\0"
    )
    assert slow.next_frame().headers["receipt-id"] == "s"
    fast, recorder = _subscribed(server.port, "/topic/d")
    publisher, published = connect(server.port)
    for i in range(5):  # its window's worth, taken (and not acknowledged)
        publisher.send("/topic/d", f"first{i}")
    first = [slow.next_frame() for _ in range(5)]
    assert [f.body for f in first] == [f"first{i}".encode() for i in range(5)]
    flood = floods(server.port, "/topic/d", limit=1000, body=100)  # 100 kB: past 50 kB
    assert slow.wait_closed(), "the slow subscriber is still connected"
    assert flood.finish() == 1000
    flooded = [m.body for m in recorder.wait_for_messages(1005)[5:]]
    assert [number(body) for body in flooded] == list(range(1000))
    (error,) = slow.frames  # nothing more was delivered to it: the ERROR, then the close
    assert error.command == "ERROR" and error.headers["message"] == "slow subscriber"
    state = flow_state(reactor, server)
    assert state["slow_disconnects"] == 1 and client_state(state, session) is None


def test_disconnect_drops_a_subscriber_that_does_not_read_without_waiting_for_it(
    reactor, start_server, floods, slow_clients
):
    server = start_server(_policy("/topic/d", "disconnect"))
    slow = slow_clients(server.port)
    slow.subscribe("/topic/d", consumerQueueEntriesSize="5")
    fast, recorder = _subscribed(server.port, "/topic/d")
    # The kernel's buffers on loopback take megabytes from a client that does not read
    # before its window closes (2-3 MB seen): the flood (12 MB) must outgrow them, and
    # then the live buffer's watermark.
    flood = floods(server.port, "/topic/d", limit=3000, body=4000)
    assert until(lambda: client_state(flow_state(reactor, server), slow.session) is None), (
        "the slow subscriber is kept until it reads"
    )
    assert flood.finish() == 3000
    assert [number(m.body) for m in recorder.wait_for_messages(3000)] == list(range(3000))
    assert flow_state(reactor, server)["slow_disconnects"] == 1
    assert slow.wait_closed()
    assert _after_error(slow.frames) == []


def test_disconnect_spares_a_subscriber_that_keeps_up(start_server):
    server = start_server(_policy("/topic/d", "disconnect"))
    subscriber, recorder = _subscribed(server.port, "/topic/d", consumerQueueEntriesSize="5")
    publisher, published = connect(server.port)
    for i in range(50):
        publisher.send("/topic/d", f"{i:06d}", receipt=str(i) if i == 49 else None)
    assert published.wait_until(lambda: "49" in published.receipts)
    assert recorder.wait_until(lambda: len(recorder.messages) == 50 or recorder.errors, 3)
    assert not recorder.errors and len(recorder.messages) == 50


# -- egress priority ------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["1", "2", "3"])
def test_class_of_service_1_to_3_is_accepted_and_passed_on(start_server, value):
    server = start_server()
    consumer, recorder = _subscribed(server.port, "/queue/cos")
    producer, produced = connect(server.port)
    producer.send("/queue/cos", "m", headers={"class-of-service": value}, receipt="r")
    assert produced.wait_until(lambda: "r" in produced.receipts)
    (message,) = recorder.wait_for_messages(1)
    assert message.headers["class-of-service"] == value


@pytest.mark.parametrize("value", ["0", "4", "urgent"])
def test_an_invalid_class_of_service_gets_an_error(start_server, value):
    server = start_server()
    producer, recorder = connect(server.port)
    producer.send("/queue/cos", "m", headers={"class-of-service": value}, receipt="r")
    assert recorder.wait_until(lambda: recorder.errors)
    error = recorder.errors[0]
    assert error.headers["message"] == "invalid class-of-service header"
    assert error.headers["receipt-id"] == "r"


def test_a_slow_readers_receipt_and_urgent_messages_overtake_its_backlog(
    reactor, start_server, floods, slow_clients
):
    """Strict priority: C-1 (RECEIPT) before D-3 before the D-1 backlog before G-1."""
    server = start_server()
    slow = slow_clients(server.port)
    slow.subscribe("/queue/bulk")
    slow.subscribe("/topic/urgent", sub_id="2")
    flood = floods(server.port, "/queue/bulk", limit=3000)
    assert flood.finish() == 3000

    def egress() -> dict[str, dict[str, int]]:
        return client_state(flow_state(reactor, server), slow.session)["egress"]

    assert until(lambda: egress()["D-1"]["length_msgs"] >= 100), "its egress never backed up"
    written = [-1]

    def settled() -> bool:  # the kernel's buffers take nothing more: nothing is written
        before, written[0] = written[0], egress()["total"]["delivered_msgs"]
        return before == written[0]

    assert until(settled, every=0.3)
    state = flow_state(reactor, server)
    (socket,) = [s for s in state["sockets"] if s["session"] == slow.session]
    assert socket["blocked"] is True and state["egress_load_factor"] > 0
    waiting = egress()["D-1"]["length_msgs"]
    publisher, published = connect(server.port)
    publisher.send("/topic/urgent", "persistent", headers={"persistent": "true"}, receipt="g")
    publisher.send("/topic/urgent", "urgent", headers={"class-of-service": "3"}, receipt="d")
    assert published.wait_until(lambda: {"g", "d"} <= set(published.receipts))
    slow.send(b"SUBSCRIBE\nid:3\ndestination:/queue/nothing\nreceipt:ping\n\n\0")
    assert until(lambda: egress()["C-1"]["length_msgs"] == 1), "the RECEIPT was not held"
    queued = egress()
    assert queued["D-3"]["length_msgs"] == queued["G-1"]["length_msgs"] == 1
    assert queued["D-1"]["length_msgs"] == waiting

    def seen(frames: list[Frame]) -> list[str]:
        return [
            f.headers["receipt-id"]
            if f.command == "RECEIPT"
            else f.body.decode()
            if f.headers["destination"] == "/topic/urgent"
            else "bulk"
            for f in frames
        ]

    assert slow.read_until(
        lambda frames: "persistent" in seen(frames) and seen(frames).count("bulk") == 3000
    )
    order = seen(slow.frames)
    ping, urgent, persistent = (order.index(x) for x in ("ping", "urgent", "persistent"))
    assert ping < urgent < persistent
    assert order[urgent + 1 : persistent].count("bulk") >= waiting, "the backlog overtook"


def test_the_server_stops_even_while_a_client_does_not_read(
    reactor, start_server, floods, slow_clients
):
    server = start_server()
    slow = slow_clients(server.port)
    slow.subscribe("/queue/stuck")
    assert floods(server.port, "/queue/stuck", limit=3000).finish() == 3000
    assert until(lambda: any(s["blocked"] for s in flow_state(reactor, server)["sockets"])), (
        "the slow client never blocked"
    )
    stopped = threading.Event()
    reactor.callFromThread(lambda: server.stop().addBoth(lambda _: stopped.set()))
    try:
        assert stopped.wait(5), "the server is still stopping"
    finally:
        slow.close()  # now it can finish
        assert stopped.wait(TIMEOUT)


# -- slowness ---------------------------------------------------------------------------------

SLOWNESS = {
    "SlowSubscriber.checkinterval": "0.1",
    "SlowSubscriber.warnshare": "0.005",  # 0.3 s of the last minute
    "SlowSubscriber.disconnectshare": "0.015",  # 0.9 s
}


@pytest.mark.parametrize("disconnect", [False, True], ids=["default", "disconnect-on"])
def test_a_client_that_does_not_read_grows_slow_and_is_disconnected_only_when_configured(
    reactor, start_server, floods, slow_clients, events, disconnect
):
    on = {"SlowSubscriber.disconnect": "true", "SlowSubscriber.loadfactor": "0"}
    server = start_server(**SLOWNESS, **(on if disconnect else {}))
    slow = slow_clients(server.port)
    slow.subscribe("/queue/slow")
    flood = floods(server.port, "/queue/slow", limit=3000)

    def socket() -> dict[str, Any] | None:
        state = flow_state(reactor, server)
        return next((s for s in state["sockets"] if s["session"] == slow.session), None)

    def named(event: str) -> list[dict[str, Any]]:
        return [e for e in list(events) if e["event"] == event and e.get("session") == slow.session]

    assert until(lambda: (socket() or {}).get("blocked")), "the slow client never blocked"
    first = socket()["slowness"]
    assert until(lambda: named("client.slow")), "no slow-subscriber event"
    if disconnect:
        assert until(lambda: socket() is None), "not disconnected"
        assert named("client.slow_disconnected")
        assert events.index(named("client.slow")[0]) < events.index(
            named("client.slow_disconnected")[0]
        )
        assert slow.wait_closed()
        assert _after_error(slow.frames) == []
        assert flood.finish() == 3000, "the producer goes on"
        return
    assert until(lambda: socket()["slowness"] >= 0.02), "slowness does not grow"
    assert socket()["slowness"] > first and socket()["verdict"] == "WARN"
    assert not named("client.slow_disconnected")
    assert flood.finish() == 3000
    assert slow.read_until(lambda frames: len(frames) >= 3000, timeout=15)
    assert [number(m.body) for m in slow.messages()] == list(range(3000))
    assert not [f for f in slow.frames if f.command == "ERROR"]


def test_a_slow_subscriber_check_that_raises_is_logged_and_the_checks_go_on(
    reactor, start_server, floods, slow_clients, events
):
    server = start_server(**SLOWNESS)
    # The reported case: warnshare above disconnectshare made the check raise, once, and
    # never run again. config.xml refuses it now; changed while the server runs, it still
    # makes the check raise.
    call_in_reactor(reactor, server.settings.set, "SlowSubscriber.warnshare", 0.5)

    def named(event: str) -> list[dict[str, Any]]:
        return [e for e in list(events) if e["event"] == event]

    assert until(lambda: len(named("periodic.failed")) >= 3), "the check did not run again"
    assert "warn_share" in named("periodic.failed")[0]["error"]
    call_in_reactor(reactor, server.settings.set, "SlowSubscriber.warnshare", 0.005)
    slow = slow_clients(server.port)
    slow.subscribe("/queue/slow")
    flood = floods(server.port, "/queue/slow", limit=3000)
    assert until(lambda: [e for e in named("client.slow") if e["session"] == slow.session]), (
        "the checks stopped for good"
    )
    assert flood.finish() == 3000
    assert slow.read_until(lambda frames: len(frames) >= 3000, timeout=15)
