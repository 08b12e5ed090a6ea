"""Persistent messages: stored before their receipt, kept across restarts until acknowledged."""

from __future__ import annotations

import time

import pytest

from tests.conftest import call_in_reactor
from tests.integration.clients import RawClient, connect, fill, until
from tests.integration.test_early_receipts import logged
from wiremq.modules.events import EVENTS

PERSISTENT = {"persistent": "true"}


def _restart(reactor, start_server, server, **overrides):
    call_in_reactor(reactor, server.stop)
    return start_server(**overrides)


def _drain(port: int, destination: str, count: int, ack: str = "auto"):
    consumer, recorder = connect(port)
    consumer.subscribe(destination, id="1", ack=ack)
    return consumer, recorder, recorder.wait_for_messages(count)


def test_persistent_queue_messages_survive_a_restart_and_volatile_ones_do_not(
    reactor, start_server
):
    server = start_server()
    fill(server.port, "/queue/keep", [f"p{i}" for i in range(20)], **PERSISTENT)
    fill(server.port, "/queue/keep", ["volatile"])
    assert until(lambda: server.store.count("/queue/keep")[0] == 20)
    server = _restart(reactor, start_server, server)
    _, recorder, messages = _drain(server.port, "/queue/keep", 20)
    assert [m.body for m in messages] == [f"p{i}" for i in range(20)]
    assert not recorder.wait_until(lambda: len(recorder.messages) > 20, timeout=0.3)


def test_acknowledged_messages_do_not_come_back_after_a_restart(reactor, start_server):
    server = start_server()
    fill(server.port, "/queue/acked", [str(i) for i in range(10)], **PERSISTENT)
    consumer, recorder, messages = _drain(server.port, "/queue/acked", 10, "client-individual")
    for message in messages[:4]:
        consumer.ack(message.headers["ack"], receipt=f"a{message.body}")
    assert recorder.wait_until(lambda: len(recorder.receipts) == 4)
    assert server.store.count("/queue/acked")[0] == 6  # the receipts waited
    server = _restart(reactor, start_server, server)
    _, _, again = _drain(server.port, "/queue/acked", 6)
    assert [m.body for m in again] == ["4", "5", "6", "7", "8", "9"]


def test_a_send_receipt_means_the_message_is_in_the_store(server):
    """In its write-ahead log, synced (the receipt goes from the sync thread, before the
    event loop publishes the commit: the counts follow a moment later)."""
    client = RawClient(server.port)
    client.connect()
    for i in range(30):
        body = f"receipted message {i}"
        client.send(
            f"SEND\ndestination:/queue/rcpt\npersistent:true\nreceipt:{i}\n\n{body}\0".encode()
        )
        receipt = client.next_frame()
        assert receipt.headers["receipt-id"] == str(i)
        assert logged(server, body.encode())
        assert until(lambda i=i: server.store.count("/queue/rcpt")[0] == i + 1)


def test_messages_beyond_the_live_buffer_are_read_back_from_the_store_in_order(start_server):
    server = start_server(
        **{
            "DestinationManager.persqueuebytehighwatermark": "500",
            "PersQueueFileStore.readmsgamount": "7",
        }
    )
    bodies = [f"{i:04d}" + "x" * 96 for i in range(100)]  # 100 B each: 5 fit in memory
    fill(server.port, "/queue/deep", bodies, **PERSISTENT)
    queue = server.core.destinations.queues["/queue/deep"]
    assert queue.counts.live_buffer_bytes == 500 and queue.backlog_start() is not None
    _, _, messages = _drain(server.port, "/queue/deep", 100)
    assert [m.body for m in messages] == bodies


def test_a_queue_keeps_one_order_over_both_delivery_modes(server):
    """p1 persistent (its receipt awaited), n1 non-persistent, p2 persistent: a consumer
    subscribing afterwards gets them in that order. (Non-persistent messages go out
    through the egress queues written before the persistent one, G-1: n1 overtook p1.)"""
    producer, recorder = connect(server.port)
    for i, (body, headers) in enumerate([("p1", PERSISTENT), ("n1", {}), ("p2", PERSISTENT)]):
        producer.send("/queue/one-order", body, headers=dict(headers), receipt=f"r{i}")
        assert recorder.wait_until(lambda i=i: f"r{i}" in recorder.receipts)
    _, _, messages = _drain(server.port, "/queue/one-order", 3)
    assert [m.body for m in messages] == ["p1", "n1", "p2"]


def test_a_mixed_queue_keeps_its_order_for_a_consumer_with_many_in_flight(server):
    """Twenty messages alternating between the modes, all waiting when the consumer
    subscribes (its window takes them all at once), and twenty more while it consumes.
    Each reaches the queue before the next is sent (a persistent one once stored: a
    non-persistent one sent before its receipt may reach the queue first)."""
    producer, recorder = connect(server.port)

    def send(numbers: range) -> None:
        for i in numbers:
            headers = PERSISTENT if i % 2 else {}
            producer.send("/queue/mixed-modes", str(i), headers=dict(headers), receipt=f"r{i}")
            assert recorder.wait_until(lambda i=i: f"r{i}" in recorder.receipts)

    send(range(20))
    consumer, received = connect(server.port)
    consumer.subscribe("/queue/mixed-modes", id="1")
    send(range(20, 40))
    messages = received.wait_for_messages(40)
    assert [int(m.body) for m in messages] == list(range(40))


@pytest.mark.parametrize("spelling", ["activemq", "durable", "persistent"])
def test_durable_subscriber_gets_what_was_published_while_it_was_away(
    reactor, start_server, spelling
):
    server = start_server()
    headers = {
        "activemq": {"activemq.subscriptionName": "audit"},
        "durable": {"durable": "true"},
        "persistent": {"persistent": "true"},
    }[spelling]

    def subscribe(port):
        connection, recorder = connect(port, **{"client-id": "c1"})
        connection.subscribe("/topic/events", id="audit", headers={**headers, "receipt": "s"})
        assert recorder.wait_until(lambda: "s" in recorder.receipts)
        return connection, recorder

    connection, recorder = subscribe(server.port)
    fill(server.port, "/topic/events", ["live"], **PERSISTENT)
    assert [m.body for m in recorder.wait_for_messages(1)] == ["live"]
    connection.disconnect()
    fill(server.port, "/topic/events", [f"missed-{i}" for i in range(250)], **PERSISTENT)
    fill(server.port, "/topic/events", ["not-persistent"])
    server = _restart(reactor, start_server, server)
    _, recorder = subscribe(server.port)
    replayed = recorder.wait_for_messages(250)
    assert [m.body for m in replayed] == [f"missed-{i}" for i in range(250)]
    fill(server.port, "/topic/events", ["after"], **PERSISTENT)
    assert recorder.wait_for_messages(251)[-1].body == "after"
    assert len(recorder.messages) == 251


def test_unsubscribing_a_durable_subscription_removes_it_and_its_backlog(server):
    connection, recorder = connect(server.port, **{"client-id": "c2"})
    durable = {"activemq.subscriptionName": "gone"}
    connection.subscribe("/topic/drop", id="1", headers={**durable, "receipt": "s"})
    assert recorder.wait_until(lambda: "s" in recorder.receipts)
    connection.unsubscribe("1", headers={**durable, "receipt": "u"})
    assert recorder.wait_until(lambda: "u" in recorder.receipts)
    fill(server.port, "/topic/drop", ["nobody keeps this"], **PERSISTENT)
    connection.subscribe("/topic/drop", id="2", headers={**durable, "receipt": "s2"})
    assert recorder.wait_until(lambda: "s2" in recorder.receipts)
    assert not recorder.wait_until(lambda: recorder.messages, timeout=0.5)
    assert server.store.count("/topic/drop")[0] == 0


def test_a_durable_subscription_cannot_be_active_twice(server):
    first, _ = connect(server.port, **{"client-id": "twice"})
    first.subscribe("/topic/t2", id="1", headers={"activemq.subscriptionName": "n"})
    second = RawClient(server.port)
    second.send(
        b"CONNECT\naccept-version:1.2\nclient-id:twice\n\n\0"
        b"SUBSCRIBE\nid:1\ndestination:/topic/t2\nactivemq.subscriptionName:n\n\n\0"
    )
    assert second.next_frame().command == "CONNECTED"
    error = second.next_frame()
    assert error.headers["message"] == "durable subscription in use"


def test_packing_gives_back_the_space_of_acknowledged_messages(start_server, tmp_path):
    server = start_server(**{"Server.packinterval": "0.3"})
    path = tmp_path / "data" / "persqueue.fs"
    packed: list[dict] = []
    stop = EVENTS.subscribe(lambda e: packed.append(e) if e["event"] == "store.packed" else None)
    try:
        fill(server.port, "/queue/pack", ["x" * 2000 for _ in range(100)], **PERSISTENT)
        # The database catches up with the write-ahead log within a few catch-up intervals.
        assert until(lambda: path.stat().st_size > 100 * 2000, 10, every=0.05)
        full = path.stat().st_size
        _drain(server.port, "/queue/pack", 100)
        deadline = time.monotonic() + 10  # for both waits together
        until(lambda: not server.store.count("/queue/pack")[0], 10, every=0.05)
        seen = len(packed)
        until(lambda: len(packed) >= seen + 2, deadline - time.monotonic(), every=0.05)
    finally:
        stop()
    assert len(packed) >= seen + 2, "the store was packed after the removals"
    assert path.stat().st_size < full / 2
