"""Expiry: the expires header and a destination's max TTL; dead message queues; cleanup."""

from __future__ import annotations

import time

from tests.integration.clients import connect, until


def _now_ms() -> int:
    return int(time.time() * 1000)


def test_an_expired_message_is_never_delivered(server):
    producer, recorder = connect(server.port)
    producer.send("/queue/exp", "old", headers={"expires": str(_now_ms() - 1)})
    producer.send("/queue/exp", "old-persistent", headers={"expires": "1", "persistent": "true"})
    producer.send("/queue/exp", "fresh", headers={"expires": str(_now_ms() + 60_000)})
    producer.send("/queue/exp", "forever", headers={"expires": "0"}, receipt="sent")
    assert recorder.wait_until(lambda: "sent" in recorder.receipts)
    consumer, consumer_recorder = connect(server.port)
    consumer.subscribe("/queue/exp", id="1")
    bodies = [m.body for m in consumer_recorder.wait_for_messages(2)]
    assert bodies == ["fresh", "forever"]
    assert not consumer_recorder.wait_until(lambda: len(consumer_recorder.messages) > 2, 0.3)


def _config(*destinations: str) -> str:
    return "<wiremq>" + "".join(destinations) + "</wiremq>"


def test_max_ttl_caps_the_publishers_expiry_and_expired_messages_go_to_the_dmq(start_server):
    server = start_server(
        _config(
            '<Destination name="/queue/short" maxttl="200" expiredmessages="deadmessagequeue"/>'
        ),
        **{"VolQueueStoreImpl.cleanupinterval": "0.1"},
    )
    producer, recorder = connect(server.port)
    sent = _now_ms()
    producer.send("/queue/short", "capped", headers={"expires": str(sent + 3_600_000), "k": "v"})
    producer.send("/queue/short", "uncapped", receipt="sent")
    assert recorder.wait_until(lambda: "sent" in recorder.receipts)
    consumer, dead = connect(server.port)
    consumer.subscribe("/queue/DMQ", id="1")
    messages = dead.wait_for_messages(2, timeout=5)
    assert sorted(m.body for m in messages) == ["capped", "uncapped"]
    for message in messages:
        assert message.headers["original-destination"] == "/queue/short"
        assert message.headers["dead-reason"] == "expired"
        assert "expires" not in message.headers
    assert next(m for m in messages if m.body == "capped").headers["k"] == "v"


def test_the_store_cleanup_removes_expired_persistent_messages(start_server):
    server = start_server(
        _config('<Destination name="/queue/sweep" expiredmessages="deadmessagequeue"/>'),
        **{
            "PersQueueFileStore.cleanupinterval": "0.2",
            "PersQueueFileStore.cleanuptransactionsize": "7",
            "PersQueueFileStore.cleanupgaptime": "0.01",
        },
    )
    producer, recorder = connect(server.port)
    soon = str(_now_ms() + 300)
    for i in range(40):
        producer.send(
            "/queue/sweep", f"e{i}", headers={"persistent": "true", "expires": soon}, receipt=str(i)
        )
    producer.send("/queue/sweep", "stays", headers={"persistent": "true"}, receipt="stays")
    assert recorder.wait_until(lambda: len(recorder.receipts) == 41)
    store = server.store
    until(
        lambda: (store.count("/queue/sweep")[0], store.count("/queue/DMQ")[0]) == (1, 40),
        10,
        every=0.05,
    )
    assert store.count("/queue/sweep")[0] == 1
    assert store.count("/queue/DMQ")[0] == 40  # moved, still persistent
    consumer, consumer_recorder = connect(server.port)
    consumer.subscribe("/queue/sweep", id="1")
    assert [m.body for m in consumer_recorder.wait_for_messages(1)] == ["stays"]


def test_a_cleanup_run_that_raises_is_logged_and_the_next_run_goes_on(start_server, events):
    server = start_server(**{"PersQueueFileStore.cleanupinterval": "0.2"})
    expiry = server.core.expiry
    moves = expiry.expired_stored
    calls = []

    def fails_once(found, then, run):
        calls.append(len(found))
        if len(calls) == 1:
            raise RuntimeError("a bad cleanup run")
        moves(found, then, run)

    expiry.expired_stored = fails_once  # what the cleanup calls with what it found
    producer, recorder = connect(server.port)
    for i in range(5):
        producer.send(
            "/queue/flaky", f"e{i}", headers={"persistent": "true", "expires": str(_now_ms() + 100)}
        )
    producer.send("/queue/flaky", "stays", headers={"persistent": "true"}, receipt="sent")
    assert recorder.wait_until(lambda: "sent" in recorder.receipts)
    store = server.store
    # Two cleanup runs, then only "stays" left (the count alone may still show the first
    # commit's message for a moment after the receipt: it is published just after it).
    assert until(lambda: len(calls) >= 2 and store.count("/queue/flaky")[0] == 1, 10, every=0.05), (
        calls
    )
    assert calls[:2] == [5, 5], "the run after the failure found them again"
    failed = [e for e in list(events) if e["event"] == "cleanup.failed"]
    assert failed and failed[0]["error"] == "a bad cleanup run"


def test_an_invalid_expires_header_is_refused(server):
    producer, recorder = connect(server.port)
    producer.send("/queue/bad-exp", "x", headers={"expires": "tomorrow"})
    assert recorder.wait_until(lambda: recorder.errors)
    assert recorder.errors[0].headers["message"] == "invalid expires header"
