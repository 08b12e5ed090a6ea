"""Browsing a queue through the API on a real server: every waiting message a page at a
time (in memory and deep in the store's backlog), filtered by a JMS selector, one message
whole (text, or binary as hex), a copy sent to another destination; read on a queue is
enough to browse it, a copy needs an operator who may write where it goes."""

from __future__ import annotations

import pytest

from tests.integration.clients import connect, fill, until
from tests.integration.console import Api, encoded, open_console
from tests.integration.test_operations import PAD, SMALL_LIVE_BUFFER
from wiremq.modules.security.users import UsersFile


def _messages(name: str) -> str:
    return f"/api/destinations/{encoded(name)}/messages"


def _pages(api: Api, name: str, size: int, selector: str = "") -> list[list[dict]]:
    """Every page of ``name``'s browse, ``size`` messages a page, until one says no more."""
    pages: list[list[dict]] = []
    query = f"&selector={encoded(selector)}" if selector else ""
    while True:
        offset = sum(len(p) for p in pages)
        page = api.get(f"{_messages(name)}?offset={offset}&limit={size}{query}")
        assert page["offset"] == offset and len(page["messages"]) <= size
        pages.append(page["messages"])
        if not page["more"]:
            return pages
        assert len(page["messages"]) == size, "a page with more after it is full"


def _fill_mixed(port: int, name: str) -> list[str]:
    """40 messages: non-persistent ones in memory, persistent ones past the live buffer in
    the store only; every third is red. Their bodies in delivery order."""
    bodies = []
    for i in range(40):
        body = f"m{i:02d}{PAD}"
        headers = {"color": "red" if i % 3 == 0 else "blue", "n": str(i)}
        if i % 4:
            headers["persistent"] = "true"
        fill(port, name, [body], **headers)
        bodies.append(body)
    return bodies


def test_a_browse_pages_through_every_waiting_message_and_filters_with_a_selector(
    start_server, console_of
):
    server = start_server(**SMALL_LIVE_BUFFER, **{"Admin.browsebytes": "1000"})
    api = console_of(server)
    name = "/queue/paged"
    bodies = _fill_mixed(server.port, name)
    assert api.get(f"/api/destinations/{encoded(name)}")["backlog_in_store"] is True
    pages = _pages(api, name, 7)
    assert [len(p) for p in pages] == [7, 7, 7, 7, 7, 5]
    seen = [m["body"] for p in pages for m in p]
    assert sorted(seen) == sorted(bodies) and len(set(seen)) == 40, "each one once"
    assert any(m["stored_at"] for p in pages[-2:] for m in p), "the store's backlog is read"

    red = [m for p in _pages(api, name, 5, "color = 'red' AND n > 10") for m in p]
    expected = {f"m{i:02d}{PAD}" for i in range(11, 40) if i % 3 == 0}
    assert {m["body"] for m in red} == expected and len(red) == len(expected)
    nothing = api.get(f"{_messages(name)}?selector={encoded('color = ' + repr('green'))}")
    assert nothing == {**nothing, "messages": [], "more": False}
    assert api.get(f"/api/destinations/{encoded(name)}")["messages"] == 40, "nothing taken"


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("selector=" + encoded("color = "), "invalid selector"),
        ("offset=-1", "offset"),
        ("limit=0", "limit"),
    ],
)
def test_a_bad_browse_is_refused_with_what_is_wrong(console, query, words):
    server, api = console
    fill(server.port, "/queue/q", ["x"])
    answer = api.request("GET", f"{_messages('/queue/q')}?{query}")
    assert answer.status == 400 and words in answer.error, answer.error


def test_one_message_is_shown_whole_text_or_binary_in_memory_or_in_the_store(
    start_server, console_of
):
    server = start_server(**SMALL_LIVE_BUFFER, **{"Admin.browsebytes": "4"})
    api = console_of(server)
    name = "/queue/whole"
    long_text = "é" + "long text " * 100
    fill(server.port, name, [long_text], color="red", persistent="true")
    fill(server.port, name, [f"filler-{i}{PAD}" for i in range(30)], persistent="true")
    producer, recorder = connect(server.port)
    binary = bytes(range(256)) * 2
    producer.send(name, binary, headers={"persistent": "true"}, receipt="bin")
    assert recorder.wait_until(lambda: "bin" in recorder.receipts)
    producer.disconnect()
    pages = _pages(api, name, 100)
    (first, *_, last) = [m for p in pages for m in p]
    assert first["body_truncated"] and last["stored_at"], "the binary one is in the store"
    assert last["encoding"] == "hex" and last["body"] == binary[:4].hex()

    text = api.get(f"{_messages(name)}/{encoded(first['message_id'])}")
    assert text["body"] == long_text and text["encoding"] == "text"
    assert text["headers"]["color"] == "red" and text["body_truncated"] is False
    assert text["size"] == len(long_text.encode())
    deep = api.get(f"{_messages(name)}/{encoded(last['message_id'])}")
    assert deep["encoding"] == "hex" and bytes.fromhex(deep["body"]) == binary
    assert deep["size"] == 512 and deep["stored_at"] == last["stored_at"]
    assert api.request("GET", f"{_messages(name)}/no-such-id").status == 404
    assert api.get(f"/api/destinations/{encoded(name)}")["messages"] == 32, "nothing taken"


def test_one_message_over_messagebytes_is_shown_cut_with_its_whole_size(start_server, console_of):
    """A body of any size is never sent whole to a browser: the first Admin.messagebytes
    bytes, flagged, with the size of the whole (text cut inside a character stays text)."""
    server = start_server(**{"Admin.messagebytes": "301"})
    api = console_of(server)
    name = "/queue/cut"
    fill(server.port, name, ["é" * 400])  # 800 bytes; byte 301 ends inside a character
    (listed,) = _pages(api, name, 10)[0]
    shown = api.get(f"{_messages(name)}/{encoded(listed['message_id'])}")
    assert shown["size"] == 800 and shown["body_truncated"] is True
    assert shown["encoding"] == "text" and shown["body"] == "é" * 150


def test_a_copy_goes_to_another_destination_and_the_original_stays(start_server, console_of):
    server = start_server(**SMALL_LIVE_BUFFER)
    api = console_of(server)
    name = "/queue/original"
    fill(server.port, name, ["in-memory"], color="red")
    fill(server.port, name, [f"s{i}{PAD}" for i in range(30)], persistent="true")
    messages = [m for p in _pages(api, name, 100) for m in p]
    memory, deep = messages[0], messages[-1]
    assert deep["stored_at"] and not memory["stored_at"]
    for message in (memory, deep):
        path = f"{_messages(name)}/{encoded(message['message_id'])}/copy"
        copied = api.ok("POST", path, {"to": "/queue/copies"})
        assert copied == {"message_id": message["message_id"], "from": name, "to": "/queue/copies"}
    assert api.get(f"/api/destinations/{encoded(name)}")["messages"] == 31, "originals stay"
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/copies", id="1")
    got = recorder.wait_for_messages(2)
    assert [m.body for m in got] == ["in-memory", f"s29{PAD}"]
    assert got[0].headers["color"] == "red" and got[1].headers["persistent"] == "true"
    assert until(lambda: server.store.count("/queue/copies")[0] == 0), "the stored one acked"
    consumer.disconnect()

    def story() -> list[tuple[str, str]]:
        path = f"/api/messages/{encoded(deep['message_id'])}/story"
        return [(r["event"], r["destination"]) for r in api.get(path)["records"]]

    assert until(lambda: ("consumed", "/queue/copies") in story()), story()
    assert story()[:2] == [("received", name), ("stored", name)], "the original's life first"
    base = f"{_messages(name)}/{encoded(memory['message_id'])}/copy"
    api.ok("POST", f"/api/destinations/{encoded('/queue/closed')}/shutdown")
    refused = api.request("POST", base, {"to": "/queue/closed"})
    assert refused.status == 409 and "is shut down" in refused.error
    assert api.request("POST", base, {"to": "nowhere"}).status == 400
    assert api.request("POST", base, {}).status == 400
    gone = api.request("POST", f"{_messages(name)}/no-such-id/copy", {"to": "/queue/copies"})
    assert gone.status == 404


@pytest.fixture
def users_console(reactor, start_server, tmp_path):
    users = UsersFile(tmp_path / "data")
    users.set("root", "root-pw", "admin")
    users.set("vera", "vera-pw", "viewer")
    users.set("otto", "otto-pw", "operator")
    users.set("olga", "olga-pw", "operator")
    server = start_server()
    admin = Api(open_console(reactor, server).port, auth=("root", "root-pw"))
    grant = f"/api/users/{{}}/permissions/{encoded('/queue/>')}"
    admin.ok("PUT", grant.format("vera"), {"permissions": ["read"]})
    admin.ok("PUT", grant.format("otto"), {"permissions": ["read", "write", "create"]})
    admin.ok("PUT", grant.format("olga"), {"permissions": ["read"]})
    return server, admin


def test_read_is_enough_to_browse_and_a_copy_needs_an_operator_who_may_write_there(
    users_console,
):
    server, admin = users_console
    producer, recorder = connect(server.port, login="root", passcode="root-pw")
    producer.send("/queue/seen", "hello", receipt="r")
    assert recorder.wait_until(lambda: "r" in recorder.receipts)
    producer.disconnect()
    vera = Api(admin.port, auth=("vera", "vera-pw"))
    (message,) = vera.get(_messages("/queue/seen"))["messages"]
    one = f"{_messages('/queue/seen')}/{encoded(message['message_id'])}"
    assert vera.get(one)["body"] == "hello"
    copy = {"to": "/queue/elsewhere"}
    assert vera.request("POST", f"{one}/copy", copy).status == 403, "a viewer does not act"
    olga = Api(admin.port, auth=("olga", "olga-pw"))
    refused = olga.request("POST", f"{one}/copy", copy)
    assert refused.status == 403 and "write" in refused.error, "no write where it goes"
    otto = Api(admin.port, auth=("otto", "otto-pw"))
    assert otto.request("POST", f"{one}/copy", copy).status == 200
    assert until(lambda: admin.get(f"/api/destinations/{encoded('/queue/elsewhere')}"))
    assert admin.get(f"/api/destinations/{encoded('/queue/seen')}")["messages"] == 1
