"""Every group of live parameters, changed through the API of a real server, takes effect at
once: watermarks stop and resume real producers, periodic tasks run at their new interval,
the stores' cleanups, catch-up, reads and replays follow, and destinations' policies apply.
(The log level is tested on a ``wiremq serve`` process, in ``test_cli.py``; the Admin
group in ``test_api.py`` and ``test_operations.py``.)"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import call_in_reactor
from tests.integration.clients import RawClient, connect, fill, until
from tests.integration.console import encoded
from tests.integration.test_flow_control import client_state, flow_state, send_frame

PERSISTENT = {"persistent": "true"}


def _expiring(ms: int) -> dict[str, str]:
    return {"expires": str(int(time.time() * 1000) + ms)}


def _events(events: list[dict[str, Any]], name: str, **fields: Any) -> list[dict[str, Any]]:
    return [
        e
        for e in list(events)
        if e["event"] == name and all(e.get(k) == v for k, v in fields.items())
    ]


def _durable_away(port: int, topic: str, client_id: str = "away") -> None:
    """A durable subscription of ``topic`` whose subscriber has gone: persistent messages
    published to it are stored."""
    connection, recorder = connect(port, **{"client-id": client_id})
    connection.subscribe(topic, id="d", headers={"activemq.subscriptionName": "d", "receipt": "s"})
    assert recorder.wait_until(lambda: "s" in recorder.receipts)
    connection.disconnect()


# -- watermarks: producers stop and resume as they change ---------------------------------------


@dataclass
class Watermarked:
    """One watermark scope: how to switch it on low, and back off (or high)."""

    destination: str
    watermark: str  # its name in flow_state
    on: dict[str, int]
    off: dict[str, int]
    persistent: bool = False
    durable: bool = False  # the topic has a durable subscription (its messages are stored)
    slow_subscriber: bool = False  # a subscriber that does not read fills the live buffer


def _pair(group: str, prefix: str, unit: str, high: int, low: int) -> dict[str, int]:
    return {
        f"{group}.{prefix}{unit}lowwatermark": low,
        f"{group}.{prefix}{unit}highwatermark": high,
    }


WATERMARKS = {
    "VolQueueStore-global": Watermarked(
        "/queue/w",
        "VolQueueStore",
        _pair("VolQueueStoreImpl", "global", "byte", 200_000, 100_000),
        _pair("VolQueueStoreImpl", "global", "byte", 1 << 40, 1 << 39),
    ),
    "VolQueueStore-destination": Watermarked(
        "/queue/w",
        "VolQueueStore /queue/w",
        _pair("VolQueueStoreImpl", "", "msg", 100, 50),
        _pair("VolQueueStoreImpl", "", "msg", -1, -1),
    ),
    "PersQueueStore-global": Watermarked(
        "/queue/w",
        "PersQueueStore",
        _pair("PersQueueFileStore", "global", "msg", 100, 50),
        _pair("PersQueueFileStore", "global", "msg", -1, -1),
        persistent=True,
    ),
    "PersQueueStore-destination": Watermarked(
        "/queue/w",
        "PersQueueStore /queue/w",
        _pair("PersQueueFileStore", "", "msg", 100, 50),
        _pair("PersQueueFileStore", "", "msg", -1, -1),
        persistent=True,
    ),
    "TopicStore-global": Watermarked(
        "/topic/w",
        "TopicStore",
        _pair("TopicFileStore", "global", "msg", 100, 50),
        _pair("TopicFileStore", "global", "msg", -1, -1),
        persistent=True,
        durable=True,
    ),
    "TopicStore-destination": Watermarked(
        "/topic/w",
        "TopicStore /topic/w",
        _pair("TopicFileStore", "", "msg", 100, 50),
        _pair("TopicFileStore", "", "msg", -1, -1),
        persistent=True,
        durable=True,
    ),
    "TopicLiveBuffer-global": Watermarked(
        "/topic/w",
        "TopicLiveBuffer",
        _pair("DestinationManager", "topicglobal", "byte", 50_000, 25_000),
        _pair("DestinationManager", "topicglobal", "byte", 100_000_000, 99_000_000),
        slow_subscriber=True,
    ),
    "TopicLiveBuffer-destination": Watermarked(
        "/topic/w",
        "TopicLiveBuffer /topic/w",
        _pair("DestinationManager", "topic", "byte", 50_000, 25_000),
        _pair("DestinationManager", "topic", "byte", -1, -1),
        slow_subscriber=True,
    ),
}


@pytest.mark.parametrize("case", WATERMARKS.values(), ids=WATERMARKS.keys())
def test_a_watermark_changed_at_run_time_stops_and_resumes_the_producer(
    reactor, start_server, console_of, floods, slow_clients, case
):
    big_buffer = {  # the default global live-buffer watermark must not stop it first
        "DestinationManager.topicglobalbytehighwatermark": "100000000",
        "DestinationManager.topicglobalbytelowwatermark": "99000000",
    }
    server = start_server(**(big_buffer if case.watermark != "TopicLiveBuffer" else {}))
    api = console_of(server)
    if case.durable:
        _durable_away(server.port, case.destination)
    if case.slow_subscriber:
        slow_clients(server.port).subscribe(case.destination, consumerQueueEntriesSize="5")
    headers = PERSISTENT if case.persistent else {}
    flood = floods(server.port, case.destination, limit=10**9, headers=lambda i: headers)

    def producer() -> dict[str, Any]:
        found = client_state(flow_state(reactor, server), flood.session)
        assert found is not None
        return found

    assert until(lambda: flood.sent >= 20)
    api.ok("PATCH", "/api/parameters", {"values": case.on})
    assert until(lambda: not producer()["reading"]), f"never stopped ({flood.sent} sent)"
    assert producer()["stopped_by"] == [f"<Watermark {case.watermark}>"]
    assert flood.stalled()
    stalled_at = flood.sent
    api.ok("PATCH", "/api/parameters", {"values": case.off})
    assert until(lambda: producer()["reading"]), "not resumed when the watermark went up"
    assert until(lambda: flood.sent > stalled_at + 100), "resumed, but its SENDs do not complete"


def test_a_new_destination_watermark_counts_what_the_destination_holds_already(
    reactor, start_server, console_of
):
    server = start_server()
    api = console_of(server)
    fill(server.port, "/queue/held", [f"m{i}" for i in range(30)])
    api.ok("PATCH", "/api/parameters", {"values": _pair("VolQueueStoreImpl", "", "msg", 20, 10)})
    state = flow_state(reactor, server)
    (queue,) = [q for q in state["queues"] if q["name"] == "/queue/held"]
    (own,) = [w for w in queue["watermarks"] if w["name"] == "VolQueueStore /queue/held"]
    assert own["messages"] == 30 and own["tripped"] is True
    client = RawClient(server.port)
    client.connect()
    client.send(send_frame("/queue/held", "one more", receipt="r"))
    assert until(lambda: flow_state(reactor, server)["clients"][0]["stopped_by"])


# -- periodic tasks at their new interval ------------------------------------------------------


def test_a_shorter_volatile_cleanup_interval_applies_to_the_wait_under_way(console, events):
    server, api = console  # VolQueueStoreImpl.cleanupinterval: 10 s
    fill(server.port, "/queue/vol", ["soon gone"], **_expiring(200))
    api.set_parameter("VolQueueStoreImpl.cleanupinterval", 0.1)
    assert until(lambda: _events(events, "message.expired", destination="/queue/vol"), timeout=3)


def test_idle_destinations_go_at_the_new_idle_time(console):
    server, api = console  # DestinationManager.idletimetolive: 60 s
    fill(server.port, "/queue/idle", ["x"])
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/idle", id="1")
    recorder.wait_for_messages(1)
    consumer.disconnect()
    api.set_parameter("DestinationManager.idletimetolive", 0.2)
    path = f"/api/destinations/{encoded('/queue/idle')}"
    assert until(lambda: api.request("GET", path).status == 404, timeout=3)


def test_queue_live_buffers_are_given_back_at_the_new_time_to_live(console):
    server, api = console  # qlbcleanupinterval 30 s, qlbcleanuptimetolive 60 s
    fill(server.port, "/queue/lb", ["p"], **PERSISTENT)
    path = f"/api/destinations/{encoded('/queue/lb')}"
    assert api.get(path)["live_buffer_messages"] == 1
    api.ok(
        "PATCH",
        "/api/parameters",
        {
            "values": {
                "DestinationManager.qlbcleanuptimetolive": 0.1,
                "DestinationManager.qlbcleanupinterval": 0.1,
            }
        },
    )
    assert until(lambda: api.get(path)["live_buffer_messages"] == 0, timeout=3)
    assert api.get(path)["backlog_in_store"] is True and api.get(path)["stored_messages"] == 1


def test_topic_live_buffers_drop_expired_messages_at_the_new_interval(
    console, slow_clients, events
):
    server, api = console  # DestinationManager.tlbcleanupinterval: 10 s
    slow = slow_clients(server.port)  # holds one unacknowledged: the others wait in the buffer
    slow.subscribe("/topic/tlb", ack="client-individual", consumerQueueEntriesSize="1")
    fill(server.port, "/topic/tlb", ["x" * 1000 for _ in range(20)], **_expiring(300))
    path = f"/api/destinations/{encoded('/topic/tlb')}"
    assert api.get(path)["live_buffer_messages"] == 19
    api.set_parameter("DestinationManager.tlbcleanupinterval", 0.1)
    assert until(lambda: _events(events, "message.expired", destination="/topic/tlb"), timeout=3)
    assert api.get(path)["live_buffer_messages"] == 0


def test_slow_subscriber_settings_apply_at_the_next_check(console, floods, slow_clients, events):
    server, api = console  # checkinterval 5 s, warnshare 0.5
    slow = slow_clients(server.port)
    slow.subscribe("/queue/slow")
    floods(server.port, "/queue/slow", limit=3000)
    api.ok(
        "PATCH",
        "/api/parameters",
        {"values": {"SlowSubscriber.checkinterval": 0.1, "SlowSubscriber.warnshare": 0.001}},
    )
    assert until(lambda: _events(events, "client.slow", session=slow.session), timeout=5)


# -- the stores' cleanups, catch-up, reads and replays -----------------------------------------


@pytest.mark.parametrize("store", ["PersQueueFileStore", "TopicFileStore"])
def test_a_store_cleanup_runs_at_its_new_interval_in_steps_of_its_new_size(console, events, store):
    server, api = console  # cleanupinterval 60 s, cleanuptransactionsize 500
    destination = "/queue/cl" if store == "PersQueueFileStore" else "/topic/cl"
    if store == "TopicFileStore":
        _durable_away(server.port, destination)
    fill(server.port, destination, ["a", "b", "c"], **PERSISTENT, **_expiring(200))
    assert until(lambda: server.store.count(destination)[0] == 3)
    time.sleep(0.3)  # expired now
    api.ok(
        "PATCH",
        "/api/parameters",
        {
            "values": {
                f"{store}.cleanuptransactionsize": 1,
                f"{store}.cleanupgaptime": 0.01,
                f"{store}.cleanupinterval": 0.1,
            }
        },
    )
    assert until(lambda: server.store.count(destination)[0] == 0, timeout=5)
    steps = _events(events, "message.expired", destination=destination)
    assert [e["count"] for e in steps] == [1, 1, 1], "one message per cleanup transaction"


def test_the_write_ahead_log_catches_up_at_its_new_interval(reactor, console):
    server, api = console  # WriteAheadLog.catchupinterval: 0.2 s
    store = server.store

    def behind() -> bool:  # committed to the log, not yet in the stores of record
        applied = min(part.applied for part in store._parts)  # noqa: SLF001
        return applied < store._wal.durable_lsn  # noqa: SLF001

    api.set_parameter("WriteAheadLog.catchupinterval", 60.0)
    time.sleep(0.5)  # a catch-up already scheduled at the old interval may run first
    fill(server.port, "/queue/wal", ["p"], **PERSISTENT)
    assert until(behind)  # once the commit is published (just after its receipt)
    assert not until(lambda: not behind(), timeout=1.0), "caught up before its interval"
    api.set_parameter("WriteAheadLog.catchupinterval", 0.05)
    assert until(lambda: not behind(), timeout=3), "the shorter interval did not apply"


def test_expiry_on_read_applies_to_the_next_backlog_read(start_server, console_of, events):
    server = start_server(
        **{
            "DestinationManager.persqueuebytehighwatermark": "100",
            "DestinationManager.globalpersqueuebytehighwatermark": "100",
        }
    )
    api = console_of(server)  # PersQueueFileStore.expiryonread: false
    fill(server.port, "/queue/r", ["x" * 80], **PERSISTENT)  # fills the live buffer
    fill(server.port, "/queue/r", ["y" * 80, "z" * 80], **PERSISTENT, **_expiring(200))
    time.sleep(0.3)
    api.ok(
        "PATCH",
        "/api/parameters",
        {
            "values": {
                "PersQueueFileStore.expiryonread": True,
                "PersQueueFileStore.readmsgamount": 1,
            }
        },
    )
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/r", id="1")
    assert [m.body for m in recorder.wait_for_messages(1)] == ["x" * 80]
    assert until(lambda: server.store.count("/queue/r")[0] == 0, timeout=5), (
        "the expired messages met by the read were not removed"
    )
    assert _events(events, "message.expired", destination="/queue/r")


def test_replay_steps_follow_the_new_amount_and_pause(console):
    server, api = console  # replaymsgamount 100, replaysleep 10 ms: ten messages at once
    topic = "/topic/replay"
    _durable_away(server.port, topic, client_id="r")
    fill(server.port, topic, [f"m{i}" for i in range(10)], **PERSISTENT)
    api.ok(
        "PATCH",
        "/api/parameters",
        {"values": {"TopicFileStore.replaymsgamount": 2, "TopicFileStore.replaysleep": 400}},
    )
    connection, recorder = connect(server.port, **{"client-id": "r"})
    connection.subscribe(topic, id="d", headers={"activemq.subscriptionName": "d"})
    assert not recorder.wait_until(lambda: len(recorder.messages) >= 10, timeout=1.0), (
        "the replay did not go in steps of 2 messages, 0.4 s apart"
    )
    assert [m.body for m in recorder.wait_for_messages(10)] == [f"m{i}" for i in range(10)]


# -- destinations' policies -------------------------------------------------------------------


def test_destination_policies_apply_to_the_next_message_and_subscription(reactor, console):
    server, api = console
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/pol", id="old", headers={"receipt": "s0"})
    assert recorder.wait_until(lambda: "s0" in recorder.receipts)
    api.ok(
        "PATCH",
        "/api/parameters",
        {"values": {"Destination.maxttl": 60_000, "Destination.consumerQueueEntriesSize": 7}},
    )
    fill(server.port, "/queue/pol", ["capped"])
    (message,) = recorder.wait_for_messages(1)
    expires = int(message.headers["expires"])
    assert 0 < expires - time.time() * 1000 <= 60_000
    consumer.subscribe("/queue/pol2", id="new", headers={"receipt": "s1"})
    assert recorder.wait_until(lambda: "s1" in recorder.receipts)
    windows = {  # the consumer's (the filler may not have gone yet)
        s["id"]: s["window_messages"]
        for client in flow_state(reactor, server)["clients"]
        for s in client["subscriptions"]
    }
    assert windows == {"old": 1000, "new": 7}


def test_a_spool_limit_set_on_one_destination_refuses_its_next_message(console):
    server, api = console
    fill(server.port, "/queue/big", ["x" * 500], **PERSISTENT)
    api.ok(
        "PUT",
        f"/api/destinations/{encoded('/queue/big')}/parameters/maxmsgsize",
        {"value": 100},
    )
    client = RawClient(server.port)
    client.connect()
    client.send(send_frame("/queue/big", "x" * 500, persistent="true", receipt="r"))
    error = client.next_frame()
    assert error.command == "ERROR" and error.body.decode().startswith("message too large")
    fill(server.port, "/queue/other", ["x" * 500], **PERSISTENT)  # other destinations: not


def test_a_change_of_a_parameter_that_is_not_live_leaves_the_server_as_it_was(reactor, console):
    server, api = console
    api.set_parameter("ClientEgress.maxdepth", 50)
    client = RawClient(server.port)
    client.connect()
    state = call_in_reactor(reactor, server.flow_state)
    assert state["clients"][0]["egress"]["D-1"]["max_work"] == 20000


def test_redelivery_settings_apply_to_the_next_redelivery(console):
    server, api = console
    base = f"/api/destinations/{encoded('/queue/again')}/parameters"
    api.ok("PUT", f"{base}/maxredeliveries", {"value": 1})
    api.ok("PUT", f"{base}/redeliverydelay", {"value": 500})
    dead, dead_recorder = connect(server.port)
    dead.subscribe("/queue/DMQ", id="d", headers={"receipt": "d"})
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/again", id="1", ack="client-individual", headers={"receipt": "s"})
    assert recorder.wait_until(lambda: "s" in recorder.receipts)
    assert dead_recorder.wait_until(lambda: "d" in dead_recorder.receipts)
    fill(server.port, "/queue/again", ["twice"])
    (first,) = recorder.wait_for_messages(1)
    nacked = time.monotonic()
    consumer.nack(first.headers["ack"])
    again = recorder.wait_for_messages(2)[-1]
    assert time.monotonic() - nacked >= 0.45 and again.headers["x-delivery-count"] == "1"
    consumer.nack(again.headers["ack"])
    (moved,) = dead_recorder.wait_for_messages(1)
    assert moved.headers["dead-reason"] == "redelivery limit"
    assert moved.headers["dead-delivery-count"] == "2"
