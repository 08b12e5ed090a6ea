"""Users and permissions through the API on a real server: the users file ``wiremq passwd``
and ``grant`` write, changed from the console, taking effect as a change made with the
commands does (the console at once, STOMP clients at their next CONNECT)."""

from __future__ import annotations

import pytest

from tests.integration.clients import connect, until
from tests.integration.console import Api, encoded, open_console
from wiremq.modules.security.users import UsersFile


@pytest.fixture
def admin_console(reactor, start_server, tmp_path):
    users = UsersFile(tmp_path / "data")
    users.set("root", "root-pw", "admin")
    server = start_server()
    console = open_console(reactor, server)
    return server, Api(console.port, auth=("root", "root-pw")), users


def test_an_admin_adds_changes_and_removes_users_in_the_users_file(admin_console):
    server, admin, users = admin_console
    listed = admin.ok("POST", "/api/users", {"name": "ann", "password": "ann-pw", "role": "viewer"})
    assert [u["name"] for u in listed["users"]] == ["ann", "root"]
    assert users.read().users["ann"].role == "viewer", "the file the commands write"
    ann = Api(admin.port, auth=("ann", "ann-pw"))
    assert ann.get("/api/session")["role"] == "viewer", "a login at once"
    assert ann.request("POST", f"/api/destinations/{encoded('/queue/x')}/purge").status == 403
    admin.ok("PATCH", "/api/users/ann", {"role": "operator", "groups": ["traders"]})
    assert ann.get("/api/session")["role"] == "operator"
    assert users.read().users["ann"].groups == ("traders",)
    admin.ok("PATCH", "/api/users/ann", {"password": "new-pw"})
    assert ann.request("GET", "/api/session").status == 401
    ann = Api(admin.port, auth=("ann", "new-pw"))
    assert ann.get("/api/session")["user"] == "ann"
    admin.ok("DELETE", "/api/users/ann")
    assert ann.request("GET", "/api/session").status == 401
    assert "ann" not in users.read().users


def test_permissions_set_from_the_console_bind_stomp_clients_as_grant_does(admin_console):
    server, admin, users = admin_console
    admin.ok("POST", "/api/users", {"name": "app", "password": "app-pw", "role": "viewer"})
    pattern = encoded("/queue/orders.>")
    writes = {"permissions": ["write", "create"]}  # create: sending makes the queue
    listed = admin.ok("PUT", f"/api/users/app/permissions/{pattern}", writes)
    (app,) = [u for u in listed["users"] if u["name"] == "app"]
    assert app["permissions"] == {"/queue/orders.>": ["write", "create"]}
    client, recorder = connect(server.port, login="app", passcode="app-pw")
    client.send("/queue/orders.eu", "ok", receipt="sent")
    assert recorder.wait_until(lambda: "sent" in recorder.receipts)
    client.subscribe("/queue/orders.eu", id="1", headers={"receipt": "s"})
    assert recorder.wait_until(lambda: recorder.errors), "read was not granted"
    assert "permission" in recorder.errors[0].headers["message"]
    admin.ok("PUT", f"/api/users/app/permissions/{pattern}", {"permissions": ["read", "write"]})
    assert users.read().users["app"].permissions[0].permissions == ["read", "write"]
    again, heard = connect(server.port, login="app", passcode="app-pw")
    again.subscribe("/queue/orders.eu", id="1")
    assert [m.body for m in heard.wait_for_messages(1)] == ["ok"]
    everyone = encoded("/topic/news")
    groups = admin.ok(
        "PUT", f"/api/groups/everyone/permissions/{everyone}", {"permissions": ["read"]}
    )
    assert groups["groups"]["everyone"] == {"/topic/news": ["read"]}
    gone = admin.ok("PUT", f"/api/users/app/permissions/{pattern}", {"permissions": []})
    (app,) = [u for u in gone["users"] if u["name"] == "app"]
    assert app["permissions"] == {}
    assert until(lambda: users.read().users["app"].permissions == ())


def test_the_last_admin_is_kept_and_an_open_consoles_first_user_is_an_admin(
    admin_console, reactor, start_server, tmp_path
):
    server, admin, users = admin_console
    demote = admin.request("PATCH", "/api/users/root", {"role": "operator"})
    assert demote.status == 409 and "last admin" in demote.error
    remove = admin.request("DELETE", "/api/users/root")
    assert remove.status == 409 and "last admin" in remove.error
    admin.ok("POST", "/api/users", {"name": "second", "password": "pw", "role": "admin"})
    admin.ok("PATCH", "/api/users/root", {"role": "operator"})  # another admin remains
    assert users.read().users["root"].role == "operator"


def test_the_first_user_of_an_open_console_must_be_an_admin(console):
    server, api = console
    viewer = api.request("POST", "/api/users", {"name": "v", "password": "pw", "role": "viewer"})
    assert viewer.status == 400 and "the first user must be an admin" in viewer.error
    api.ok("POST", "/api/users", {"name": "boss", "password": "pw", "role": "admin"})
    assert api.request("GET", "/api/overview").status == 401, "now a login is needed"
    assert Api(api.port, auth=("boss", "pw")).get("/api/session")["role"] == "admin"


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "words"),
    [
        ("POST", "/api/users", {"name": "root", "password": "x", "role": "admin"}, 409, "exists"),
        ("POST", "/api/users", {"name": "a:b", "password": "x", "role": "viewer"}, 400, "':'"),
        ("POST", "/api/users", {"name": "n", "password": "", "role": "viewer"}, 400, "empty"),
        ("POST", "/api/users", {"name": "n", "password": "x", "role": "king"}, 400, "role"),
        ("POST", "/api/users", {"name": "n", "password": "x"}, 400, "missing fields ['role']"),
        ("PATCH", "/api/users/nobody", {"role": "viewer"}, 404, "no user 'nobody'"),
        ("PATCH", "/api/users/root", {}, 400, "nothing to change"),
        ("PATCH", "/api/users/root", {"groups": "ops"}, 400, "groups must be a list"),
        ("DELETE", "/api/users/nobody", None, 404, "no user"),
        ("PUT", "/api/users/root/permissions/%2Fqueue%2Fa", {"permissions": ["fly"]}, 400, "fly"),
        ("PUT", "/api/users/root/permissions/queue", {"permissions": ["read"]}, 400, "pattern"),
        ("PUT", "/api/users/nobody/permissions/%3E", {"permissions": ["read"]}, 404, "no user"),
        ("PUT", "/api/groups/a%3Ab/permissions/%3E", {"permissions": ["read"]}, 400, "':'"),
    ],
)
def test_bad_user_changes_are_refused_saying_why(admin_console, method, path, body, status, words):
    server, admin, users = admin_console
    before = users.path.read_bytes()
    answer = admin.request(method, path, body)
    assert answer.status == status and words in answer.error, (answer.status, answer.error)
    assert users.path.read_bytes() == before, "nothing written"


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_only_an_admin_sees_or_changes_users(admin_console, role):
    server, admin, users = admin_console
    admin.ok("POST", "/api/users", {"name": "who", "password": "pw", "role": role})
    who = Api(admin.port, auth=("who", "pw"))
    for method, path, body in (
        ("GET", "/api/users", None),
        ("POST", "/api/users", {"name": "x", "password": "pw", "role": "viewer"}),
        ("DELETE", "/api/users/root", None),
        ("PUT", "/api/groups/everyone/permissions/%3E", {"permissions": ["read"]}),
    ):
        answer = who.request(method, path, body)
        assert answer.status == 403 and "needs the admin role" in answer.error
