"""The console's destinations through the API on a real server: the table sorted, filtered
and paged (over 10,000 destinations), making one with its parameters, publishing a test
message, and a topic's durable subscriptions listed and removed."""

from __future__ import annotations

import base64
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.conftest import call_in_reactor
from tests.integration.clients import connect, fill, until
from tests.integration.console import Api, encoded, open_console
from wiremq.config.groups import ServerSettings
from wiremq.modules.security.users import UsersFile


def _page(api, **query: object) -> dict:
    text = "&".join(f"{k}={encoded(str(v))}" for k, v in query.items())
    return api.get(f"/api/destinations?{text}")


def _names(page: dict) -> list[str]:
    return [d["name"] for d in page["destinations"]]


def test_ten_thousand_destinations_come_one_page_at_a_time(reactor, start_server, console_of):
    server = start_server()
    api = console_of(server)
    names = [f"/queue/q{n:05d}" for n in range(10_000)]

    def make() -> None:
        for name in names:
            server.core.destinations.resolve(name)

    call_in_reactor(reactor, make)
    fill(server.port, "/queue/q04242", ["a", "b", "c"])
    fill(server.port, "/queue/q00007", ["a"])
    fill(server.port, "/topic/t1", ["x"])
    started = time.monotonic()
    first = _page(api, kind="queue", limit=50)
    took = time.monotonic() - started
    assert first["total"] == 10_000 and first["matched"] == 10_000
    assert _names(first) == names[:50] and first["offset"] == 0
    print(f"\nfirst page of 10,000 queues by name: {took * 1000:.1f} ms")
    last = _page(api, kind="queue", offset=9_990, limit=50)
    assert _names(last) == names[9_990:]
    backwards = _page(api, kind="queue", order="desc", limit=3)
    assert _names(backwards) == names[-1:-4:-1]
    started = time.monotonic()
    busiest = _page(api, kind="queue", sort="messages", order="desc", limit=2)
    print(f"10,000 queues sorted by depth: {(time.monotonic() - started) * 1000:.1f} ms")
    assert _names(busiest) == ["/queue/q04242", "/queue/q00007"]
    assert [d["messages"] for d in busiest["destinations"]] == [3, 1]
    found = _page(api, kind="queue", filter="Q0424")
    assert found["matched"] == 10 and _names(found)[0] == "/queue/q04240"
    assert _names(_page(api, kind="topic")) == ["/topic/t1"]
    both = _page(api, filter="T1")
    assert both["total"] == 10_001 and _names(both) == ["/topic/t1"]


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("sort=colour", "sort: 'colour' is not one of name"),
        ("kind=queues", "kind: 'queues' is not one of queue, topic"),
        ("order=up", "order: 'up' is not one of asc, desc"),
        ("limit=0", "out of range"),
        ("limit=1001", "out of range"),
        ("offset=-1", "out of range"),
        ("page=2", "unknown query parameter 'page'"),
    ],
)
def test_a_bad_table_query_is_refused_saying_why(console, query, words):
    server, api = console
    answer = api.request("GET", f"/api/destinations?{query}")
    assert answer.status == 400 and words in answer.error


def test_a_destination_made_with_its_parameters_is_declared_kept_and_deleted(
    reactor, start_server, console_of
):
    server = start_server(**{"DestinationManager.idletimetolive": "0.3"})
    api = console_of(server)
    made = api.ok(
        "POST",
        "/api/destinations",
        {"name": "/queue/made", "parameters": {"maxttl": 60000, "whenfull": "fail"}},
    )
    assert made["destination"] == "/queue/made" and made["kind"] == "queue"
    applied = {p["key"]: p["applied"] for p in made["parameters"]}
    assert applied == {
        "Destination.maxttl@/queue/made": True,
        "Destination.whenfull@/queue/made": False,  # not live: at the next start
    }
    config = Path(ServerSettings.read(server.settings, "Server").datadir) / "config.xml"
    api.ok("POST", "/api/destinations", {"name": "/topic/made"})
    assert _declared(config) == {"/queue/made", "/topic/made"}
    fill(server.port, "/queue/passing", ["x"])
    _drain_one(server.port, "/queue/passing")
    assert until(lambda: "/queue/passing" not in server.core.destinations.queues, timeout=5)
    assert "/queue/made" in server.core.destinations.queues, "a declared queue is never swept"
    assert api.get(f"/api/destinations/{encoded('/queue/made')}")["name"] == "/queue/made"
    fill(server.port, "/queue/made", ["short-lived"])
    (held,) = api.get(f"/api/destinations/{encoded('/queue/made')}/messages")["messages"]
    assert held["expires"] > 0, "its maxttl applies"
    call_in_reactor(reactor, server.stop)
    server = start_server(config.read_text(), **{"DestinationManager.idletimetolive": "0.3"})
    api = console_of(server)
    assert "/queue/made" in server.core.destinations.queues
    assert "/topic/made" in server.core.destinations.topics, "made again at start"
    api.ok("DELETE", f"/api/destinations/{encoded('/topic/made')}")
    config = Path(server.config.path)  # where this server's console saves
    assert _declared(config) == {"/queue/made"}
    call_in_reactor(reactor, server.stop)
    server = start_server(config.read_text())
    assert "/topic/made" not in server.core.destinations.topics, "deleted: not made again"
    assert "/queue/made" in server.core.destinations.queues


def _declared(config: Path) -> set[str]:
    root = ElementTree.parse(config).getroot()
    return {e.get("name", "") for e in root.iter("Destination") if e.get("declared") == "true"}


def _drain_one(port: int, name: str) -> None:
    consumer, recorder = connect(port)
    consumer.subscribe(name, id="1")
    recorder.wait_for_messages(1)
    consumer.disconnect()


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"name": "/queue/exists"}, 409, "exists already"),
        ({"name": "orders"}, 400, "neither /queue/NAME nor /topic/NAME"),
        ({"name": "/queue/a*b"}, 400, "without wildcards"),
        ({"name": "/queue/p", "parameters": {"maxttl": -5}}, 400, "maxttl"),
        ({"name": "/queue/p", "parameters": {"colour": "red"}}, 400, "colour"),
        ({"name": "/queue/p", "parameters": {"whenfull": "explode"}}, 400, "whenfull"),
        ({"name": "/queue/p", "extra": 1}, 400, "unknown fields ['extra']"),
        ({"parameters": {}}, 400, '"name"'),
    ],
)
def test_a_bad_destination_to_make_is_refused_and_nothing_is_made(console, body, status, words):
    server, api = console
    fill(server.port, "/queue/exists", ["x"])
    answer = api.request("POST", "/api/destinations", body)
    assert answer.status == status and words in answer.error, answer.error
    assert "/queue/p" not in server.core.destinations.queues
    config = Path(ServerSettings.read(server.settings, "Server").datadir) / "config.xml"
    assert not config.exists() or "/queue/p" not in config.read_text()


def test_a_published_message_is_received_as_a_clients_with_its_headers(console):
    server, api = console
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/published", id="1", headers={"receipt": "s"})
    assert recorder.wait_until(lambda: "s" in recorder.receipts)
    path = f"/api/destinations/{encoded('/queue/published')}/messages"
    sent = api.ok("POST", path, {"body": "hello", "headers": {"color": "red"}, "persistent": True})
    assert sent["destination"] == "/queue/published" and sent["persistent"] is True
    (message,) = recorder.wait_for_messages(1)
    assert message.body == "hello" and message.headers["color"] == "red"
    assert message.headers["message-id"] == sent["message_id"]
    assert message.headers["persistent"] == "true"
    queue = api.get(f"/api/destinations/{encoded('/queue/published')}")
    assert queue["received"] == 1 and queue["producers"] == 0, "the console is no producer after"
    binary = bytes(range(256))
    kept = f"/api/destinations/{encoded('/queue/binary')}/messages"
    api.ok("POST", kept, {"body": base64.b64encode(binary).decode(), "encoding": "base64"})
    (waiting,) = api.get(kept)["messages"]
    assert waiting["size"] == 256 and waiting["persistent"] is False


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"body": "x", "headers": {"transaction": "t1"}}, 400, "describe a SEND frame"),
        ({"body": "x", "headers": {"expires": "soon"}}, 400, "invalid expires header"),
        ({"body": "x", "headers": {"n": 1}}, 400, "headers must map names to text"),
        ({"body": "x", "persistent": "yes"}, 400, "persistent must be true or false"),
        ({"body": "!!", "encoding": "base64"}, 400, "not valid base64"),
        ({"body": "x", "encoding": "hex"}, 400, "encoding must be one of"),
        ({"body": "x", "colour": 1}, 400, "unknown fields ['colour']"),
    ],
)
def test_a_bad_message_to_publish_is_refused_saying_why(console, body, status, words):
    server, api = console
    path = f"/api/destinations/{encoded('/queue/pub')}/messages"
    answer = api.request("POST", path, body)
    assert answer.status == status and words in answer.error, answer.error


def test_publishing_to_a_shut_down_destination_is_refused(console):
    server, api = console
    api.ok("POST", f"/api/destinations/{encoded('/queue/closed')}/shutdown")
    path = f"/api/destinations/{encoded('/queue/closed')}/messages"
    answer = api.request("POST", path, {"body": "x"})
    assert answer.status == 409 and "destination shut down" in answer.error
    answer = api.request("POST", f"/api/destinations/{encoded('nowhere')}/messages", {"body": "x"})
    assert answer.status == 400


def test_a_topics_durable_subscriptions_with_their_backlog_and_their_removal(console):
    server, api = console
    keeper, kept = connect(server.port, **{"client-id": "shop"})
    for name, selector in (("all", None), ("red", "color = 'red'")):
        headers = {"activemq.subscriptionName": name, "receipt": name}
        if selector:
            headers["selector"] = selector
        keeper.subscribe("/topic/prices", id=name, headers=headers)
    assert kept.wait_until(lambda: {"all", "red"} <= set(kept.receipts))
    before = int(time.time() * 1000)
    keeper.disconnect()
    listener, heard = connect(server.port, **{"client-id": "desk"})
    listener.subscribe(
        "/topic/prices",
        id="live",
        headers={"activemq.subscriptionName": "live", "receipt": "l"},
    )
    assert heard.wait_until(lambda: "l" in heard.receipts)
    fill(server.port, "/topic/prices", ["r1", "r2"], persistent="true", color="red")
    fill(server.port, "/topic/prices", ["b1", "b2", "b3"], persistent="true", color="blue")
    path = f"/api/destinations/{encoded('/topic/prices')}/durable"
    listed = {s["durable"]: s for s in api.get(path)["subscriptions"]}
    assert set(listed) == {"shop/all", "shop/red", "desk/live"}
    assert listed["shop/all"]["backlog"] == 5 and listed["shop/red"]["backlog"] == 2
    assert listed["shop/red"]["selector"] == "color = 'red'"
    assert listed["shop/all"]["connected"] is False and listed["desk/live"]["connected"] is True
    assert listed["desk/live"]["session"]
    assert listed["desk/live"]["last_seen"] is None, "connected: not left since the start"
    assert before <= listed["shop/all"]["last_seen"] <= int(time.time() * 1000)
    assert listed["shop/all"]["backlog_more"] is False
    busy = api.request("DELETE", f"{path}?client_id=desk&subscription=live")
    assert busy.status == 409 and "is connected" in busy.error
    removed = api.ok("DELETE", f"{path}?client_id=shop&subscription=red")
    assert removed == {"topic": "/topic/prices", "removed": "shop/red"}
    assert {s["durable"] for s in api.get(path)["subscriptions"]} == {"shop/all", "desk/live"}
    again = api.request("DELETE", f"{path}?client_id=shop&subscription=red")
    assert again.status == 404
    assert api.request("DELETE", path).status == 400
    fill(server.port, "/queue/q", ["x"])
    queue = api.request("GET", f"/api/destinations/{encoded('/queue/q')}/durable")
    assert queue.status == 400 and "is a queue" in queue.error


def test_what_a_user_may_do_to_destinations_follows_their_permissions(
    reactor, start_server, tmp_path
):
    users = UsersFile(tmp_path / "data")
    users.set("ops", "ops-pw", "operator")
    users.grant("ops", None, "/queue/mine.>", ["read", "write"])
    users.grant("ops", None, "/queue/seen", ["read"])
    users.set("boss", "boss-pw", "admin")
    server = start_server(**{"Security.allowanonymous": "true"})
    api = open_console(reactor, server)
    boss = Api(api.port, auth=("boss", "boss-pw"))
    for name in ("/queue/mine.a", "/queue/seen", "/queue/hidden"):
        boss.ok("POST", "/api/destinations", {"name": name})
    ops = Api(api.port, auth=("ops", "ops-pw"))
    assert _names(_page(ops, kind="queue")) == ["/queue/mine.a", "/queue/seen"]
    assert _page(ops, kind="queue")["total"] == 2
    publish = f"/api/destinations/{encoded('/queue/mine.a')}/messages"
    assert ops.ok("POST", publish, {"body": "mine"})["destination"] == "/queue/mine.a"
    new = ops.request("POST", f"/api/destinations/{encoded('/queue/mine.new')}/messages", {})
    assert new.status == 403 and new.error == "permission denied: create /queue/mine.new"
    seen = ops.request("POST", f"/api/destinations/{encoded('/queue/seen')}/messages", {})
    assert seen.status == 403 and seen.error == "permission denied: write /queue/seen"
    made = ops.request("POST", "/api/destinations", {"name": "/queue/mine.b"})
    assert made.status == 403 and "needs the admin role" in made.error
    users.set("maker", "maker-pw", "admin")
    assert Api(api.port, auth=("maker", "maker-pw")).ok(
        "POST", "/api/destinations", {"name": "/queue/mine.b"}
    )


def test_a_dead_message_goes_back_only_where_its_sender_may_write(reactor, start_server, tmp_path):
    users = UsersFile(tmp_path / "data")
    users.set("ops", "ops-pw", "operator")
    users.grant("ops", None, "/queue/DMQ", ["admin"])
    users.grant(None, "anonymous", ">", ["read", "write", "create"])
    server = start_server(**{"Security.allowanonymous": "true"})
    ops = Api(open_console(reactor, server).port, auth=("ops", "ops-pw"))
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/secret", id="s", ack="client-individual")
    fill(server.port, "/queue/secret", ["dead"])
    (message,) = recorder.wait_for_messages(1)
    consumer.nack(message.headers["ack"], requeue="false", receipt="n")
    assert recorder.wait_until(lambda: "n" in recorder.receipts)
    base = f"/api/destinations/{encoded('/queue/DMQ')}/messages"
    assert until(lambda: len(ops.get(base)["messages"]) == 1)
    retry = f"{base}/{encoded(message.headers['message-id'])}/retry"
    refused = ops.request("POST", retry)
    assert refused.status == 403 and refused.error == "permission denied: write /queue/secret"
    assert len(ops.get(base)["messages"]) == 1, "it stays where it was"
    users.grant("ops", None, "/queue/secret", ["write"])
    assert ops.ok("POST", retry)["to"] == "/queue/secret"
