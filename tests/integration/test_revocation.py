"""Rights taken away while clients are connected, over real sockets.

The users file changes while the server runs (as ``wiremq revoke`` and ``wiremq passwd
--delete`` change it): within a second a subscription that lost read gets an ERROR
naming it and ends, its unacknowledged messages back in the queue; a wildcard
subscription leaves the destinations it may no longer read and keeps the others; a
deleted user's connections are closed.
"""

from __future__ import annotations

import time

import pytest

from tests.integration.clients import connect
from wiremq.modules.security.users import UsersFile

WITHIN = 1.0  # seconds: how soon a change takes effect on open subscriptions


@pytest.fixture
def users(tmp_path) -> UsersFile:
    """bob (viewer) may read (and create) /queue/rv.q, the topics /topic/rv.> and
    /topic/rv.keep; root (admin) may do everything."""
    users = UsersFile(tmp_path / "data")
    users.set("bob", "bob-pw", "viewer")
    users.set("root", "root-pw", "admin")
    users.grant("bob", None, "/queue/rv.q", ["read", "create"])
    users.grant("bob", None, "/topic/rv.>", ["read", "create"])
    users.grant("bob", None, "/topic/rv.keep", ["read"])
    return users


def _send(producer, recorder, *sends: tuple[str, str]) -> None:
    """Send each (destination, body) and wait for every receipt."""
    before = len(recorder.receipts)
    for destination, body in sends:
        producer.send(destination, body, receipt=f"{destination}:{body}")
    assert recorder.wait_until(lambda: len(recorder.receipts) == before + len(sends))


def test_revoked_read_ends_open_subscriptions_and_a_wildcard_leaves_what_it_may_not_read(
    start_server, users
):
    server = start_server()
    root, sent = connect(server.port, login="root", passcode="root-pw")
    _send(root, sent, ("/topic/rv.y", "created"), ("/topic/rv.keep", "created"))
    bob, recorder = connect(server.port, login="bob", passcode="bob-pw")
    bob.subscribe("/queue/rv.q", id="q", ack="client-individual")
    bob.subscribe("/topic/rv.x", id="x")
    bob.subscribe("/topic/rv.>", id="all", headers={"receipt": "subscribed"})
    assert recorder.wait_until(lambda: "subscribed" in recorder.receipts)
    _send(root, sent, ("/queue/rv.q", "q1"), ("/topic/rv.y", "y1"), ("/topic/rv.keep", "k1"))
    assert sorted(m.body for m in recorder.wait_for_messages(3)) == ["k1", "q1", "y1"]

    changed = time.monotonic()
    users.revoke("bob", None, "/queue/rv.q", ["read"])
    users.revoke("bob", None, "/topic/rv.>", ["read"])
    assert recorder.wait_until(lambda: len(recorder.errors) == 2, timeout=WITHIN + 0.5)
    latency = time.monotonic() - changed
    print(f"revocation: both subscriptions ended {latency * 1000:.0f} ms after the change")
    assert latency < WITHIN
    ended = {e.headers["subscription"]: e.headers for e in recorder.errors}
    assert set(ended) == {"q", "x"}
    assert ended["q"]["destination"] == "/queue/rv.q"
    assert ended["x"]["destination"] == "/topic/rv.x"
    assert ended["q"]["message"] == "permission revoked: read /queue/rv.q"
    assert bob.is_connected() and not recorder.disconnected

    # q1, never acknowledged, is back in the queue for another consumer
    root.subscribe("/queue/rv.q", id="again", ack="client-individual")
    assert sent.wait_until(lambda: [m.body for m in sent.messages] == ["q1"])
    assert sent.messages[0].headers.get("redelivered") == "true"

    # the wildcard keeps /topic/rv.keep and no longer gets /topic/rv.y nor /topic/rv.x
    received = len(recorder.messages)
    _send(root, sent, ("/topic/rv.y", "y2"), ("/topic/rv.x", "x2"), ("/topic/rv.keep", "k2"))
    assert recorder.wait_until(lambda: len(recorder.messages) > received)
    time.sleep(1.0)  # long enough to see a late arrival
    assert [m.body for m in recorder.messages[received:]] == ["k2"]
    assert len(recorder.errors) == 2
    bob.disconnect()
    root.disconnect()


def test_a_deleted_users_connections_are_closed_with_an_error(start_server, users):
    server = start_server()
    bob, recorder = connect(server.port, login="bob", passcode="bob-pw")
    bob.subscribe("/queue/rv.q", id="q", headers={"receipt": "subscribed"})
    assert recorder.wait_until(lambda: "subscribed" in recorder.receipts)
    changed = time.monotonic()
    users.delete("bob")
    assert recorder.wait_until(lambda: recorder.disconnected, timeout=WITHIN + 0.5)
    latency = time.monotonic() - changed
    print(f"deletion: the connection closed {latency * 1000:.0f} ms after the change")
    assert latency < WITHIN
    assert [e.headers["message"] for e in recorder.errors] == ["user removed"]
    root, _ = connect(server.port, login="root", passcode="root-pw")  # the others go on
    assert root.is_connected()
    root.disconnect()


def test_a_wildcard_queue_subscription_gives_back_what_it_held_of_a_destination_it_left(
    start_server, users
):
    users.grant("bob", None, "/queue/rvw.>", ["read", "create"])
    users.grant("bob", None, "/queue/rvw.keep", ["read"])
    server = start_server()
    root, sent = connect(server.port, login="root", passcode="root-pw")
    bob, recorder = connect(server.port, login="bob", passcode="bob-pw")
    bob.subscribe("/queue/rvw.*", id="all", ack="client-individual", headers={"receipt": "s"})
    assert recorder.wait_until(lambda: "s" in recorder.receipts)
    _send(root, sent, ("/queue/rvw.gone", "g1"), ("/queue/rvw.keep", "k1"))
    assert sorted(m.body for m in recorder.wait_for_messages(2)) == ["g1", "k1"]
    users.revoke("bob", None, "/queue/rvw.>", ["read"])
    root.subscribe("/queue/rvw.gone", id="again", ack="client-individual")
    assert sent.wait_until(lambda: [m.body for m in sent.messages] == ["g1"], timeout=WITHIN + 0.5)
    assert sent.messages[0].headers.get("redelivered") == "true"
    _send(root, sent, ("/queue/rvw.keep", "k2"))
    assert recorder.wait_until(lambda: [m.body for m in recorder.messages][2:] == ["k2"])
    keep = next(m for m in recorder.messages if m.body == "k1")
    bob.ack(keep.headers["ack"], receipt="acked")  # what it kept is still acknowledged
    assert recorder.wait_until(lambda: "acked" in recorder.receipts)
    assert not recorder.errors and bob.is_connected()
    bob.disconnect()
    root.disconnect()
