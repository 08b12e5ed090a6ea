"""Operator actions through the API on a real server: purge, shut down, delete, disconnect,
browse, and moving messages out of a dead message queue (in memory and in the store)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.conftest import call_in_reactor
from tests.integration.clients import RawClient, connect, fill, until
from tests.integration.console import encoded
from tests.integration.test_flow_control import send_frame
from wiremq.config.groups import ServerSettings

# A live buffer of one small message: persistent messages past it are in the store only.
PAD = "." * 60
SMALL_LIVE_BUFFER = {
    "DestinationManager.persqueuebytehighwatermark": "100",
    "DestinationManager.globalpersqueuebytehighwatermark": "100",
}


def _queue(api, name: str) -> dict:
    return api.get(f"/api/destinations/{encoded(name)}")


def _drain(port: int, name: str, expected: int) -> list[str]:
    """Every message a fresh consumer gets from ``name`` (and that no more come)."""
    consumer, recorder = connect(port)
    consumer.subscribe(name, id="1")
    if expected:
        recorder.wait_for_messages(expected)
    assert not recorder.wait_until(lambda: len(recorder.messages) > expected, timeout=0.3)
    consumer.disconnect()
    return recorder.bodies()


@pytest.mark.parametrize("backlog", [False, True], ids=["in-memory", "with-store-backlog"])
def test_purge_removes_every_waiting_message_but_not_those_a_consumer_holds(
    start_server, console_of, backlog
):
    server = start_server(**(SMALL_LIVE_BUFFER if backlog else {}))
    api = console_of(server)
    holder, recorder = connect(server.port)
    fill(server.port, "/queue/p", ["held"], persistent="true")
    holder.subscribe("/queue/p", id="1", ack="client-individual", headers={"prefetch-count": "1"})
    recorder.wait_for_messages(1)
    fill(server.port, "/queue/p", [f"v{i}" for i in range(5)])
    fill(server.port, "/queue/p", [f"p{i}{PAD}" for i in range(30)], persistent="true")
    if backlog:
        assert _queue(api, "/queue/p")["backlog_in_store"] is True
    assert _queue(api, "/queue/p")["messages"] == 36
    purged = api.ok("POST", f"/api/destinations/{encoded('/queue/p')}/purge")
    assert purged == {"destination": "/queue/p", "purged": 35}
    after = _queue(api, "/queue/p")
    assert after["messages"] == 1 and after["stored_messages"] == 1  # the one held
    assert after["backlog_in_store"] is False
    holder.disconnect()  # unacknowledged: it goes back to the queue, and is all there is
    assert _drain(server.port, "/queue/p", 1) == ["held"]
    assert server.store.count("/queue/p") == (0, 0) or until(
        lambda: server.store.count("/queue/p")[0] == 0
    )


def test_purge_of_a_topic_is_refused(console):
    server, api = console
    connect(server.port)[0].send("/topic/t", "m")
    assert until(
        lambda: api.request("GET", f"/api/destinations/{encoded('/topic/t')}").status == 200
    )
    answer = api.request("POST", f"/api/destinations/{encoded('/topic/t')}/purge")
    assert answer.status == 400 and "is a topic" in answer.error


def test_a_shut_down_destination_refuses_new_messages_until_resumed(console):
    server, api = console
    fill(server.port, "/queue/s", ["before"])
    api.ok("POST", f"/api/destinations/{encoded('/queue/s')}/shutdown")
    assert _queue(api, "/queue/s")["shutdown"] is True
    client = RawClient(server.port)
    client.connect()
    client.send(send_frame("/queue/s", "refused", receipt="r1"))
    error = client.next_frame()
    assert error.command == "ERROR" and error.headers["receipt-id"] == "r1"
    assert error.headers["message"] == "destination shut down"
    assert _drain(server.port, "/queue/s", 1) == ["before"], "its consumers still get it"
    config = Path(ServerSettings.read(server.settings, "Server").datadir) / "config.xml"
    assert 'shutdown="true"' in config.read_text()
    api.ok("POST", f"/api/destinations/{encoded('/queue/s')}/resume")
    fill(server.port, "/queue/s", ["after"])
    assert _drain(server.port, "/queue/s", 1) == ["after"]
    assert "shutdown" not in config.read_text()


def test_a_producer_that_sent_before_the_shutdown_is_refused_after(console):
    server, api = console
    client = RawClient(server.port)
    client.connect()
    client.send(send_frame("/queue/s2", "one", receipt="r1"))
    assert client.next_frame().headers["receipt-id"] == "r1"
    api.ok("POST", f"/api/destinations/{encoded('/queue/s2')}/shutdown")
    client.send(send_frame("/queue/s2", "two", receipt="r2"))
    error = client.next_frame()
    assert error.command == "ERROR" and error.headers["receipt-id"] == "r2"


def test_delete_purges_and_removes_a_destination_and_refuses_one_with_consumers(console):
    server, api = console
    fill(server.port, "/queue/gone", ["a", "b"], persistent="true")
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/busy", id="1", headers={"receipt": "s"})
    assert recorder.wait_until(lambda: "s" in recorder.receipts)
    busy = api.request("DELETE", f"/api/destinations/{encoded('/queue/busy')}")
    assert busy.status == 409 and "1 consumers" in busy.error
    deleted = api.ok("DELETE", f"/api/destinations/{encoded('/queue/gone')}")
    assert deleted == {"destination": "/queue/gone", "deleted": True, "purged": 2}
    assert api.request("GET", f"/api/destinations/{encoded('/queue/gone')}").status == 404
    assert until(lambda: server.store.count("/queue/gone")[0] == 0)
    totals = api.get("/api/overview")["totals"]
    assert totals["received"] >= 2, "the deleted queue's counts stay in the totals"


def test_disconnect_sends_an_error_and_closes_the_connection(console):
    server, api = console
    client = RawClient(server.port)
    session = client.connect().headers["session"]
    api.ok("DELETE", f"/api/connections/{encoded(session)}")
    error = client.next_frame()
    assert error.command == "ERROR" and error.headers["message"] == "disconnected"
    assert client.wait_closed()
    assert until(lambda: not api.get("/api/connections")["connections"])


def test_browse_shows_waiting_messages_in_order_with_the_first_bytes_of_their_bodies(
    start_server, console_of
):
    server = start_server(**SMALL_LIVE_BUFFER, **{"Admin.browsebytes": "4"})
    api = console_of(server)
    fill(server.port, "/queue/b", ["volatile-1"], color="red")
    fill(server.port, "/queue/b", [f"stored-{i}{PAD}" for i in range(3)], persistent="true")
    fill(server.port, "/queue/b", ["volatile-2"])
    found = api.get(f"/api/destinations/{encoded('/queue/b')}/messages")["messages"]
    assert [m["body"] for m in found] == ["vola", "stor", "vola", "stor", "stor"]
    assert found[0]["headers"]["color"] == "red" and found[0]["persistent"] is False
    assert found[0]["size"] == len("volatile-1") and found[0]["body_truncated"] is True
    stored = [m for m in found if m["persistent"]]
    assert len(stored) == 3 and all(m["stored_at"] > 0 for m in stored)
    api.set_parameter("Admin.browsebytes", 100)
    whole = api.get(f"/api/destinations/{encoded('/queue/b')}/messages?limit=2")["messages"]
    assert len(whole) == 2 and whole[0]["body"] == "volatile-1"
    assert _queue(api, "/queue/b")["messages"] == 5, "browsing takes nothing"


def _expired_into_dmq(server, api, persistent: bool) -> list[dict]:
    """Messages of /queue/orig expired into /queue/DMQ, as the DMQ's browse shows them."""
    api.ok(
        "PUT",
        f"/api/destinations/{encoded('/queue/orig')}/parameters/expiredmessages",
        {"value": "deadmessagequeue"},
    )
    api.set_parameter("PersQueueFileStore.cleanupinterval", 0.1)
    api.set_parameter("VolQueueStoreImpl.cleanupinterval", 0.1)
    expires = str(int(time.time() * 1000) + 300)
    headers = {"expires": expires, **({"persistent": "true"} if persistent else {})}
    fill(server.port, "/queue/orig", ["one", "two", "three"], **headers)
    assert until(lambda: _dmq(api) and len(_dmq(api)) == 3), _dmq(api)
    return _dmq(api)


def _dmq(api) -> list[dict] | None:
    answer = api.request("GET", f"/api/destinations/{encoded('/queue/DMQ')}/messages")
    return answer.json["messages"] if answer.status == 200 else None


@pytest.mark.parametrize("persistent", [True, False], ids=["persistent", "non-persistent"])
def test_dead_messages_are_deleted_moved_or_sent_back(console, persistent):
    server, api = console
    dead = _expired_into_dmq(server, api, persistent)
    assert {m["headers"]["original-destination"] for m in dead} == {"/queue/orig"}
    one, two, three = (m["message_id"] for m in dead)
    base = f"/api/destinations/{encoded('/queue/DMQ')}/messages"
    assert api.ok("DELETE", f"{base}/{encoded(one)}")["to"] is None
    moved = api.ok("POST", f"{base}/{encoded(two)}/move", {"to": "/queue/elsewhere"})
    assert moved == {"message_id": two, "from": "/queue/DMQ", "to": "/queue/elsewhere"}
    back = api.ok("POST", f"{base}/{encoded(three)}/retry")
    assert back["to"] == "/queue/orig"
    assert _dmq(api) == []
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/elsewhere", id="1")
    consumer.subscribe("/queue/orig", id="2")
    messages = recorder.wait_for_messages(2)
    by_destination = {m.headers["destination"]: m for m in messages}
    assert by_destination["/queue/elsewhere"].headers["original-destination"] == "/queue/orig"
    returned = by_destination["/queue/orig"]
    assert "original-destination" not in returned.headers and "dead-reason" not in returned.headers
    assert returned.body == "three"
    assert not recorder.wait_until(lambda: len(recorder.messages) > 2, timeout=0.3)
    if persistent:
        assert until(lambda: server.store.count("/queue/DMQ")[0] == 0)


def test_a_message_deep_in_the_store_backlog_is_found_and_moved(start_server, console_of):
    server = start_server(**SMALL_LIVE_BUFFER)
    api = console_of(server)
    fill(server.port, "/queue/deep", [f"m{i}{PAD}" for i in range(40)], persistent="true")
    assert _queue(api, "/queue/deep")["backlog_in_store"] is True
    browse = api.get(f"/api/destinations/{encoded('/queue/deep')}/messages?limit=40")["messages"]
    target = next(m for m in browse if m["body"] == f"m30{PAD}")
    assert target["stored_at"] > 0
    base = f"/api/destinations/{encoded('/queue/deep')}/messages/{encoded(target['message_id'])}"
    api.ok("POST", f"{base}/move", {"to": "/queue/shallow"})
    again = api.request("POST", f"{base}/move", {"to": "/queue/shallow"})
    assert again.status == 404, "it is gone from the queue"
    remaining = _drain(server.port, "/queue/deep", 39)
    assert f"m30{PAD}" not in remaining and len(remaining) == 39
    assert _drain(server.port, "/queue/shallow", 1) == [f"m30{PAD}"]


@pytest.mark.parametrize(
    ("action", "body", "status", "words"),
    [
        ("move", {"to": "nowhere"}, 400, "neither /queue/"),
        ("move", {"to": "/queue/bad*name"}, 400, "without wildcards"),
        ("move", {}, 400, '{"to"'),
        ("move", {"to": "/queue/closed"}, 409, "is shut down"),
        ("retry", None, 400, "no original-destination header"),
    ],
)
def test_bad_message_actions_are_refused(console, action, body, status, words):
    server, api = console
    api.ok("POST", f"/api/destinations/{encoded('/queue/closed')}/shutdown")
    fill(server.port, "/queue/m", ["plain"])
    (message,) = api.get(f"/api/destinations/{encoded('/queue/m')}/messages")["messages"]
    path = f"/api/destinations/{encoded('/queue/m')}/messages/{encoded(message['message_id'])}"
    answer = api.request("POST", f"{path}/{action}", body)
    assert answer.status == status and words in answer.error
    assert _queue(api, "/queue/m")["messages"] == 1, "nothing was taken"


def test_an_unknown_message_is_404(console):
    server, api = console
    fill(server.port, "/queue/u", ["x"], persistent="true")
    base = f"/api/destinations/{encoded('/queue/u')}/messages/no-such-id"
    assert api.request("DELETE", base).status == 404
    assert api.request("POST", f"{base}/retry").status == 404
    assert api.request("POST", f"{base}/move", {"to": "/queue/v"}).status == 404


def test_purge_after_a_restart_removes_the_restored_backlog(reactor, start_server, console_of):
    server = start_server()
    fill(server.port, "/queue/kept", [f"k{i}" for i in range(5)], persistent="true")
    call_in_reactor(reactor, server.stop)
    server = start_server()
    api = console_of(server)
    assert _queue(api, "/queue/kept")["backlog_in_store"] is True
    assert api.ok("POST", f"/api/destinations/{encoded('/queue/kept')}/purge")["purged"] == 5
    assert until(lambda: server.store.count("/queue/kept")[0] == 0)
    assert _queue(api, "/queue/kept")["backlog_in_store"] is False
    fill(server.port, "/queue/kept", ["new"], persistent="true")
    assert _drain(server.port, "/queue/kept", 1) == ["new"]


HOUR_MS = 3_600_000
TEN_MINUTES_MS = 600_000


def _expires_of(api, queue: str) -> dict[str, int]:
    """The expiry of each message waiting in ``queue``, by body."""
    found = api.get(f"/api/destinations/{encoded(queue)}/messages")["messages"]
    return {m["body"]: m["expires"] for m in found}


def test_copies_keep_or_drop_their_expiry_by_one_rule_before_and_after_a_restart(
    reactor, start_server, console_of
):
    """A moved message keeps its own expiry, a dead-lettered one drops it; either is capped
    by its new destination's maxttl, and the copy stored is the copy delivered: a restart
    finds the same expiry (the dead copy and the moved copy were once made by two pieces of
    code that differed on it, and neither stored what the pipeline then applied)."""
    server = start_server()
    api = console_of(server)
    for capped in ("/queue/DMQ", "/queue/short"):
        api.ok(
            "PUT",
            f"/api/destinations/{encoded(capped)}/parameters/maxttl",
            {"value": TEN_MINUTES_MS},
        )
    own = int(time.time() * 1000) + HOUR_MS
    fill(
        server.port, "/queue/src", ["dead", "moved", "capped"], persistent="true", expires=str(own)
    )
    fill(server.port, "/queue/src", ["volatile"], expires=str(own))
    consumer, recorder = connect(server.port)
    consumer.subscribe(
        "/queue/src", id="1", ack="client-individual", headers={"prefetch-count": "1"}
    )
    first = recorder.wait_for_messages(1)[0]
    assert first.body == "dead"
    before = int(time.time() * 1000)
    consumer.nack(first.headers["ack"], receipt="n", requeue="false")
    assert recorder.wait_until(lambda: "n" in recorder.receipts)
    consumer.disconnect()
    waiting = api.get(f"/api/destinations/{encoded('/queue/src')}/messages")["messages"]
    ids = {m["body"]: m["message_id"] for m in waiting}
    base = f"/api/destinations/{encoded('/queue/src')}/messages"
    api.ok("POST", f"{base}/{encoded(ids['moved'])}/move", {"to": "/queue/plain"})
    api.ok("POST", f"{base}/{encoded(ids['volatile'])}/move", {"to": "/queue/plain"})
    api.ok("POST", f"{base}/{encoded(ids['capped'])}/move", {"to": "/queue/short"})
    after = int(time.time() * 1000)

    def expiries() -> dict[str, int]:
        return {
            **_expires_of(api, "/queue/DMQ"),
            **_expires_of(api, "/queue/plain"),
            **_expires_of(api, "/queue/short"),
        }

    assert until(lambda: len(expiries()) == 4)
    seen = expiries()
    assert seen["moved"] == own and seen["volatile"] == own, "a move keeps the message's expiry"
    assert before + TEN_MINUTES_MS <= seen["dead"] <= after + TEN_MINUTES_MS, (
        "a dead copy has no expiry of its own: the DMQ's maxttl alone, from its death"
    )
    assert before + TEN_MINUTES_MS <= seen["capped"] <= after + TEN_MINUTES_MS
    call_in_reactor(reactor, server.stop)
    server = start_server()
    api = console_of(server)
    restored = {**_expires_of(api, "/queue/DMQ"), **_expires_of(api, "/queue/plain")}
    restored.update(_expires_of(api, "/queue/short"))
    assert restored == {k: v for k, v in seen.items() if k != "volatile"}
    delivered, copies = connect(server.port)
    delivered.subscribe("/queue/DMQ", id="d")
    (dead,) = copies.wait_for_messages(1)
    assert dead.headers["expires"] == str(seen["dead"]) and dead.headers["dead-reason"]
