"""Logins and permissions with real stomp.py clients over real sockets.

The users file is written before the server starts or while it runs (the
server reads it again when it changes). Each refusal is an ERROR naming the
permission and the destination, followed by the connection's close.
"""

from __future__ import annotations

import time

import pytest
import stomp

from tests.integration.clients import RawClient, Recorder, connect
from wiremq.modules.security.users import UsersFile


@pytest.fixture
def users(tmp_path) -> UsersFile:
    """The users file of the servers ``start_server`` starts: alice (operator), bob (viewer),
    root (admin)."""
    users = UsersFile(tmp_path / "data")
    users.set("alice", "alice-pw", "operator")
    users.set("bob", "bob-pw", "viewer")
    users.set("root", "root-pw", "admin")
    return users


def stomp_py(
    port: int, login: str | None, passcode: str | None
) -> tuple[stomp.Connection12, Recorder]:
    """A stomp.py connection that has sent CONNECT (with ``login``) and waits for nothing."""
    connection = stomp.Connection12([("127.0.0.1", port)], auto_content_length=True)
    recorder = Recorder()
    connection.set_listener("recorder", recorder)
    connection.connect(login, passcode, wait=False)
    return connection, recorder


def refusal(recorder: Recorder) -> dict[str, str]:
    assert recorder.wait_until(lambda: recorder.errors), "no ERROR"
    return recorder.errors[0].headers


def test_a_stomp_py_client_logs_in_and_a_wrong_password_is_refused(start_server, users):
    server = start_server()
    alice, recorder = connect(server.port, login="alice", passcode="alice-pw")
    assert alice.is_connected()
    wrong, refused = stomp_py(server.port, "alice", "nope")
    assert refusal(refused)["message"] == "login failed"
    assert refused.wait_until(lambda: refused.disconnected)
    nobody, missing = stomp_py(server.port, None, None)
    assert refusal(missing)["message"] == "login failed"
    assert "a login is required" in missing.errors[0].body


def test_failed_logins_from_one_address_wait_longer_each_time(start_server, users):
    server = start_server(**{"Security.loginfailuredelay": "0.2"})
    waited = []
    for _ in range(3):
        client = RawClient(server.port, source="127.0.0.2")
        started = time.monotonic()
        client.send(b"CONNECT\naccept-version:1.2\nlogin:alice\npasscode:guess\n\n\0")
        assert client.next_frame().headers["message"] == "login failed"
        waited.append(time.monotonic() - started)
        assert client.wait_closed()
    assert waited[0] >= 0.2 and waited[1] >= 0.4 and waited[2] >= 0.8, waited
    other = RawClient(server.port, source="127.0.0.3")  # another address: no wait
    started = time.monotonic()
    other.send(b"CONNECT\naccept-version:1.2\nlogin:alice\npasscode:alice-pw\n\n\0")
    assert other.next_frame().command == "CONNECTED"
    assert time.monotonic() - started < 0.2


def test_anonymous_clients_may_connect_when_allowed(start_server, users):
    users.grant(None, "anonymous", "/topic/public", ["read", "write", "create"])
    server = start_server(**{"Security.allowanonymous": "true"})
    anonymous, recorder = connect(server.port)
    anonymous.subscribe("/topic/public", id="1")
    anonymous.send("/topic/public", "hello", receipt="r")
    assert recorder.wait_for_messages(1)[0].body == "hello"
    anonymous.send("/topic/private", "no", receipt="p")
    assert refusal(recorder)["message"] == "permission denied: write /topic/private"


# (what bob holds on /queue/q and /topic/t, the frames he sends, the refusal expected)
REFUSALS = [
    (["read", "create"], "send", "/queue/q", "write /queue/q"),
    (["write"], "send", "/queue/new", "create /queue/new"),
    (["write", "create"], "subscribe", "/queue/q", "read /queue/q"),
    (["read"], "subscribe", "/topic/new", "create /topic/new"),
    (["read", "write"], "durable", "/topic/t", "create /topic/t"),
]


@pytest.mark.parametrize(("granted", "action", "destination", "denied"), REFUSALS)
def test_an_unauthorized_send_or_subscribe_gets_an_error_naming_permission_and_destination(
    start_server, users, granted, action, destination, denied
):
    server = start_server()
    root, _ = connect(server.port, login="root", passcode="root-pw")
    root.subscribe("/queue/q", id="q")  # /queue/q and /topic/t exist
    root.subscribe("/topic/t", id="t")
    users.grant("bob", None, "/queue/>", granted)
    users.grant("bob", None, "/topic/>", granted)
    bob, recorder = connect(server.port, login="bob", passcode="bob-pw")
    if action == "send":
        bob.send(destination, "x", receipt="refused")
    else:
        durable = {"durable": "true"} if action == "durable" else {}
        bob.subscribe(destination, id="1", headers={"receipt": "refused", **durable})
    headers = refusal(recorder)
    assert headers["message"] == f"permission denied: {denied}"
    assert headers["receipt-id"] == "refused"
    assert "user 'bob'" in recorder.errors[0].body
    assert recorder.wait_until(lambda: recorder.disconnected)


def test_with_the_permission_the_same_frames_pass(start_server, users):
    server = start_server()
    users.grant("bob", None, "/queue/>", ["read", "write", "create"])
    users.grant("bob", None, "/topic/t", ["admin"])  # admin includes the others
    bob, recorder = connect(server.port, login="bob", passcode="bob-pw", **{"client-id": "b"})
    bob.subscribe("/queue/new", id="1")
    bob.subscribe("/topic/t", id="2", headers={"durable": "true"})
    bob.send("/queue/new", "q")
    bob.send("/topic/t", "t", receipt="r")
    assert sorted(m.body for m in recorder.wait_for_messages(2)) == ["q", "t"]
    assert not recorder.errors


def test_a_wildcard_subscriber_gets_only_the_destinations_it_may_read(start_server, users):
    """A wildcard subscription needs no permission on its pattern: each destination it
    matches is joined only if the client may read it (``may_read``)."""
    users.grant("bob", None, "/topic/prices.>", ["read"])
    users.grant("bob", None, "/topic/other.>", ["write"])  # write is not read
    server = start_server()
    bob, recorder = connect(server.port, login="bob", passcode="bob-pw")
    bob.subscribe("/topic/*.*", id="1", headers={"receipt": "s"})
    assert recorder.wait_until(lambda: "s" in recorder.receipts)
    root, root_recorder = connect(server.port, login="root", passcode="root-pw")
    for name in ("/topic/prices.eu", "/topic/other.secret", "/topic/prices.us"):
        root.send(name, name, receipt=name)
    assert root_recorder.wait_until(lambda: len(root_recorder.receipts) == 3)
    assert sorted(m.body for m in recorder.wait_for_messages(2)) == [
        "/topic/prices.eu",
        "/topic/prices.us",
    ]
    time.sleep(1.5)  # long enough to see a late arrival
    assert len(recorder.messages) == 2 and not recorder.errors
    bob.subscribe("/topic/other.secret", id="2", headers={"receipt": "s2"})
    assert refusal(recorder)["message"] == "permission denied: read /topic/other.secret"


def test_a_user_added_while_the_server_runs_logs_in_at_once(start_server, users):
    server = start_server()
    users.set("carol", "carol-pw", "viewer")
    carol, _ = connect(server.port, login="carol", passcode="carol-pw")
    assert carol.is_connected()
