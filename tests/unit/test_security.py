"""Logins and per-destination permissions, on a real core on a fake clock (``tests/unit/net.py``).

Every refusal is an ERROR naming what was refused; failed logins are answered
late, later with each failure from one address, and an address's next login is
not checked before then.
"""

from __future__ import annotations

import pytest

from tests.defaults import EGRESS_LIMITS
from tests.unit.net import FakeReader, FakeWriter, Net, Peer, frame, send_frame
from wiremq.modules.client.egress import Egress
from wiremq.modules.security.users import UsersFile

ALICE = {"login": "alice", "passcode": "alice-pw"}
BOB = {"login": "bob", "passcode": "bob-pw"}
ROOT = {"login": "root", "passcode": "root-pw"}
GUESS = {"login": "alice", "passcode": "guess"}
FAST_FAILURES = {"Security.loginfailuredelay": 1.0, "Security.loginfailuremaxdelay": 8.0}


def with_users(net: Net) -> UsersFile:
    """alice (operator, group traders), bob (viewer), no permissions yet; root (admin)."""
    users = UsersFile(net.data)
    users.set("alice", "alice-pw", "operator", ["traders"])
    users.set("bob", "bob-pw", "viewer")
    users.set("root", "root-pw", "admin")
    return users


def error_of(peer: Peer) -> dict[str, str]:
    (error,) = peer.errors
    return error.headers


def test_without_a_users_file_every_client_connects_and_may_do_everything(make_net):
    net = make_net()
    consumer = Peer(net, "10.0.0.1:1", login={"login": "anyone", "passcode": "x"})
    consumer.subscribe("/queue/open")
    Peer(net, "10.0.0.2:1").send("/queue/open", "hello")
    assert consumer.bodies() == ["hello"]
    assert consumer.connection.core_session.access is None  # no check at all on the message path


def test_a_login_is_checked_on_a_worker_and_what_follows_connect_waits_for_it(make_net):
    net = make_net()
    users = with_users(net)
    users.grant("alice", None, "/queue/orders", ["read", "write", "create"])
    net.workers_held = True
    peer = Peer(net, "10.0.0.1:1", login=ALICE, connected=False)
    peer.feed(
        frame("SUBSCRIBE", {"id": "1", "destination": "/queue/orders"})
        + send_frame("/queue/orders", "mine", {"receipt": "r"})
    )
    assert peer.writer.frames == []  # nothing answered, nothing done, until the login is
    assert len(net.runtime.workers["login"].calls) == 1
    net.workers_held = False
    net.settle()
    commands = [f.command for f in peer.writer.frames]
    assert commands == ["CONNECTED", "MESSAGE", "RECEIPT"] or commands == [
        "CONNECTED",
        "RECEIPT",
        "MESSAGE",
    ]
    assert peer.connection.core_session.user == "alice"


@pytest.mark.parametrize(
    ("login", "reason"),
    [
        ({"login": "alice", "passcode": "wrong"}, "wrong login or passcode"),
        ({"login": "nobody", "passcode": "alice-pw"}, "wrong login or passcode"),
        ({}, "a login is required"),
        ({"login": "alice"}, "wrong login or passcode"),
    ],
)
def test_a_wrong_or_missing_login_gets_an_error_after_a_delay_and_the_connection_closes(
    make_net, login, reason
):
    net = make_net(FAST_FAILURES)
    with_users(net)
    started = net.runtime.now
    peer = Peer(net, "10.0.0.1:1", login=login, connected=False)
    assert error_of(peer)["message"] == "login failed"
    assert reason in peer.errors[0].body.decode()
    assert peer.writer.closed
    assert net.runtime.now - started == pytest.approx(1.0)
    assert [f.command for f in peer.writer.frames] == ["ERROR"]


def test_failures_from_one_address_double_the_delay_and_other_addresses_are_not_slowed(make_net):
    net = make_net(FAST_FAILURES)
    with_users(net)
    delays = []
    for _ in range(5):
        started = net.runtime.now
        peer = Peer(
            net, "10.0.0.1:1", login={"login": "alice", "passcode": "guess"}, connected=False
        )
        assert error_of(peer)["message"] == "login failed"
        delays.append(net.runtime.now - started)
    assert delays == pytest.approx([1.0, 2.0, 4.0, 8.0, 8.0])  # up to loginfailuremaxdelay
    started = net.runtime.now
    Peer(net, "10.0.0.2:1", login=ALICE)  # another address logs in at once
    assert net.runtime.now == started


def test_the_logins_of_one_address_are_checked_one_at_a_time(make_net):
    """Many connections at once from one address get one hash at a time on the worker."""
    net = make_net(FAST_FAILURES)
    with_users(net)
    net.workers_held = True
    guessers = [
        Peer(net, "10.0.0.1:2", login={"login": "alice", "passcode": f"guess{i}"}, connected=False)
        for i in range(3)
    ]
    other = Peer(net, "10.0.0.2:1", login=ALICE, connected=False)  # not held up by them
    assert len(net.runtime.workers["login"].calls) == 2
    net.workers_held = False
    net.settle()
    assert all(g.errors[0].headers["message"] == "login failed" for g in guessers)
    assert other.connection.core_session.user == "alice"


def test_after_a_failure_the_next_check_of_the_address_waits_for_the_delay(make_net):
    """A guesser opening many connections at once gets no more guesses for it."""
    net = make_net(FAST_FAILURES)
    with_users(net)
    Peer(net, "10.0.0.1:1", login=GUESS, connected=False)
    worker = net.runtime.workers["login"]
    checked_at: list[float] = []
    submit = worker.submit
    worker.submit = lambda *job: (checked_at.append(net.runtime.now), submit(*job))  # type: ignore[method-assign]
    net.workers_held = True
    guessers = [
        Peer(net, "10.0.0.1:2", login={"login": "alice", "passcode": f"guess{i}"}, connected=False)
        for i in range(3)
    ]
    net.workers_held = False
    net.settle()
    gaps = [b - a for a, b in zip(checked_at, checked_at[1:], strict=False)]
    assert len(checked_at) == 3 and gaps == pytest.approx([2.0, 4.0]), checked_at
    assert all(g.errors[0].headers["message"] == "login failed" for g in guessers)


def test_failures_are_forgotten_after_loginfailurememory(make_net):
    net = make_net({**FAST_FAILURES, "Security.loginfailurememory": 60.0})
    with_users(net)
    for _ in range(3):
        Peer(net, "10.0.0.1:1", login={"login": "bob", "passcode": "guess"}, connected=False)
    net.runtime.advance(61)
    started = net.runtime.now
    Peer(net, "10.0.0.1:1", login={"login": "bob", "passcode": "guess"}, connected=False)
    assert net.runtime.now - started == pytest.approx(1.0)  # the first delay again


def test_a_login_that_succeeded_is_not_hashed_again_until_the_password_changes(make_net):
    net = make_net()
    users = with_users(net)
    Peer(net, "10.0.0.1:1", login=ALICE)
    net.workers_held = True
    again = Peer(net, "10.0.0.1:2", login=ALICE)  # answered at once, no worker call
    assert again.connection.core_session.user == "alice" and not net.runtime.workers["login"].calls
    users.set("alice", "new-pw", None)
    stale = Peer(net, "10.0.0.1:3", login=ALICE, connected=False)
    assert len(net.runtime.workers["login"].calls) == 1  # checked again, and it fails
    net.workers_held = False
    net.settle()
    assert error_of(stale)["message"] == "login failed"


def test_anonymous_clients_are_refused_unless_allowed_and_then_hold_their_groups_grants(make_net):
    net = make_net({"Security.allowanonymous": True})
    users = with_users(net)
    users.grant(None, "anonymous", "/topic/public.>", ["read"])
    users.grant(None, "everyone", "/topic/news", ["read", "create"])
    anonymous = Peer(net, "10.0.0.1:1")
    assert anonymous.connection.core_session.user is None
    anonymous.subscribe("/topic/news", sub_id="news")
    anonymous.subscribe("/topic/public.a", sub_id="a", receipt="ok")
    assert error_of(anonymous)["message"] == "permission denied: create /topic/public.a"
    assert "an anonymous client" in anonymous.errors[0].body.decode()


@pytest.mark.parametrize(
    ("granted", "frames", "refusal"),
    [
        # SEND needs write; to a destination that does not exist yet, create too.
        (["read", "create"], [send_frame("/queue/q", "x", {"receipt": "s"})], "write /queue/q"),
        (["write"], [send_frame("/queue/new", "x", {"receipt": "s"})], "create /queue/new"),
        # SUBSCRIBE needs read; to a destination that does not exist yet, create too.
        (
            ["write", "create"],
            [frame("SUBSCRIBE", {"id": "1", "destination": "/queue/q", "receipt": "s"})],
            "read /queue/q",
        ),
        (
            ["read"],
            [frame("SUBSCRIBE", {"id": "1", "destination": "/queue/new", "receipt": "s"})],
            "create /queue/new",
        ),
        # A durable subscription needs create, even on a topic that exists.
        (
            ["read", "write"],
            [
                frame(
                    "SUBSCRIBE",
                    {"id": "1", "destination": "/topic/t", "durable": "true", "receipt": "s"},
                )
            ],
            "create /topic/t",
        ),
    ],
)
def test_a_frame_without_its_permission_gets_an_error_naming_permission_and_destination(
    make_net, granted, frames, refusal
):
    net = make_net(persistent=True)
    users = with_users(net)
    Peer(net, "10.0.0.9:1", login=ROOT).feed(  # the destinations /queue/q and /topic/t exist
        frame("SUBSCRIBE", {"id": "q", "destination": "/queue/q"})
        + frame("SUBSCRIBE", {"id": "t", "destination": "/topic/t"})
    )
    users.grant("bob", None, "/queue/>", granted)
    users.grant("bob", None, "/topic/>", granted)
    peer = Peer(net, "10.0.0.1:1", login=BOB)
    peer.feed(*frames)
    headers = error_of(peer)
    assert headers["message"] == f"permission denied: {refusal}"
    assert headers["receipt-id"] == "s"
    assert "user 'bob'" in peer.errors[0].body.decode()
    assert peer.writer.closed


def test_grants_of_the_user_its_groups_and_everyone_add_up_and_admin_holds_all(make_net):
    net = make_net(persistent=True)
    users = with_users(net)
    users.grant(None, "traders", "/queue/orders.*", ["write", "create"])
    users.grant("alice", None, "/queue/orders.eu", ["read"])
    users.grant(None, "everyone", "/topic/news", ["admin"])
    alice = Peer(net, "10.0.0.1:1", login=ALICE)
    alice.subscribe("/queue/orders.eu", sub_id="eu")
    alice.subscribe("/topic/news", sub_id="news", durable="true")
    alice.send("/queue/orders.eu", "buy")
    alice.send("/topic/news", "extra")
    assert sorted(alice.bodies()) == ["buy", "extra"] and not alice.errors
    access = alice.connection.core_session.access
    assert access is not None
    assert access.allows("read", "/queue/orders.eu")
    assert not access.allows("read", "/queue/orders.us")  # write, but no read
    assert not access.allows("write", "/queue/orders.eu.x")  # * is one level
    root = Peer(net, "10.0.0.2:1", login=ROOT)
    root.subscribe("/queue/anything.at.all", durable="false")
    root.send("/topic/whatever", "x", {"receipt": "r"})
    assert not root.errors


def test_a_connected_clients_permissions_follow_the_users_file(make_net):
    net = make_net()
    users = with_users(net)
    users.grant("bob", None, "/queue/q", ["write", "create"])
    bob = Peer(net, "10.0.0.1:1", login=BOB)
    bob.send("/queue/q", "allowed", {"receipt": "1"})
    assert not bob.errors
    users.revoke("bob", None, "/queue/q", ["write"])
    net.core.authenticator.refresh()  # the periodic check of the users file
    bob.send("/queue/q", "refused now", {"receipt": "2"})
    assert error_of(bob)["message"] == "permission denied: write /queue/q"
    assert error_of(bob)["receipt-id"] == "2"


def test_removing_a_durable_subscription_needs_create_on_its_topic(make_net):
    net = make_net(persistent=True)
    users = with_users(net)
    users.grant("alice", None, "/topic/t", ["read", "create"])
    users.grant("bob", None, "/topic/t", ["read"])
    alice = Peer(net, "10.0.0.1:1", login={**ALICE, "client-id": "shared"})
    alice.subscribe("/topic/t", sub_id="d", durable="true")
    alice.feed(frame("UNSUBSCRIBE", {"id": "d"}))  # detached, kept
    bob = Peer(net, "10.0.0.2:1", login={**BOB, "client-id": "shared"})
    bob.feed(frame("UNSUBSCRIBE", {"id": "d", "durable": "true", "receipt": "gone"}))
    assert error_of(bob)["message"] == "permission denied: create /topic/t"
    assert ("shared", "d") in net.core.persistence.durables


def test_what_follows_a_refused_connect_in_the_same_read_does_not_act(make_net):
    """A CONNECT refused at once (too many connections from the address) leaves the client
    unknown: a SEND it pipelined behind it must not reach a destination unchecked."""
    net = make_net({"StompListener.maxconnectionsperaddress": 1})
    users = with_users(net)
    users.grant("alice", None, "/queue/orders", ["read", "write", "create"])
    Peer(net, "10.0.0.1:1", login=ALICE)
    egress = Egress(net.outbox, EGRESS_LIMITS)
    writer = FakeWriter(egress)
    intruder = net.core.connect(egress, "10.0.0.1:2", FakeReader(), net.clock())
    intruder.data_received(
        frame("CONNECT", {"accept-version": "1.2"}) + send_frame("/queue/orders", "forged"),
        net.clock(),
    )
    net.settle()
    assert [f.headers["message"] for f in writer.frames] == ["too many connections"]
    assert "/queue/orders" not in net.core.destinations.queues
