"""The console's JSON API on its own, over real HTTP: answers, OpenAPI, logins, and every 4xx."""

from __future__ import annotations

import json
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.integration.clients import connect, fill, until
from tests.integration.console import Api, encoded, open_console
from wiremq.config.groups import ServerSettings
from wiremq.config.parameters import REGISTRY
from wiremq.modules.security.users import UsersFile

# -- what the API answers ---------------------------------------------------------------------


def test_the_session_of_an_open_console_is_the_admins_on_localhost(console):
    server, api = console
    session = api.get("/api/session")
    assert session["open"] is True and session["role"] == "admin" and session["user"] is None
    assert session["localhost_only"] is True and session["csrf_token"]
    assert "127.0.0.1 only" in api.request("GET", "/api/session").headers["x-wiremq-note"]


def test_connections_show_clients_their_consumers_and_egress_queues(console):
    server, api = console
    consumer, recorder = connect(server.port, login="alice", **{"client-id": "c1"})
    consumer.subscribe("/queue/a", id="s1", ack="client-individual", headers={"receipt": "r"})
    assert recorder.wait_until(lambda: "r" in recorder.receipts)
    (found,) = api.get("/api/connections")["connections"]
    assert found["client_id"] == "c1" and found["user"] == "alice"
    assert found["peer"].startswith("127.0.0.1:") and found["uptime"] >= 0
    assert found["consumers"] == 1 and found["ready"] is True and found["reading"] is True
    (subscription,) = found["subscriptions"]
    assert subscription["destination"] == "/queue/a" and subscription["ready"] is True
    assert set(found["egress"]) == {"C-1", "D-3", "D-2", "D-1", "G-1", "total"}
    assert set(found["egress"]["G-1"]) == {
        "length_msgs",
        "length_work",
        "hwm_work",
        "max_work",
        "discards_msgs",
        "delivered_msgs",
    }
    one = api.get(f"/api/connections/{encoded(found['session'])}")
    assert one["session"] == found["session"]


def test_destinations_show_depth_counts_and_watermarks(console):
    server, api = console
    fill(server.port, "/queue/d", ["a", "bb", "ccc"])
    fill(server.port, "/queue/d", ["stored"], persistent="true")
    queues = api.get("/api/destinations?kind=queue")["destinations"]
    (queue,) = [q for q in queues if q["name"] == "/queue/d"]
    assert queue["messages"] == 4 and queue["received"] == 4 and queue["delivered"] == 0
    assert queue["stored_messages"] == 1 and queue["volatile_messages"] == 3
    assert queue["producers"] == 0 and queue["consumers"] == 0  # the fill connections left
    assert [w["name"] for w in queue["watermarks"]] == [
        "VolQueueStore",
        "PersQueueStore",
        "Journal",  # the journal's backlog stops every producer
        "P2PPrioQueue",
    ]
    one = api.get(f"/api/destinations/{encoded('/queue/d')}")
    assert one["name"] == "/queue/d" and one["subscriptions"] == []
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/d", id="1")
    recorder.wait_for_messages(4)
    assert until(lambda: api.get(f"/api/destinations/{encoded('/queue/d')}")["delivered"] == 4)


def test_overview_and_state_come_from_the_query_api(console):
    server, api = console
    overview = api.get("/api/overview")
    assert overview["server"]["stomp_port"] == server.port
    assert overview["memory"]["rss_bytes"] > 1_000_000
    transactions = overview["transactions"]
    assert [transactions[k] for k in ("open", "messages", "bytes", "acks")] == [0, 0, 0, 0]
    state = api.get("/api/state")
    assert {"watermarks", "queues", "topics", "clients", "sockets", "totals"} <= set(state)


def test_events_are_numbered_and_polled_after_the_last_seen(console):
    server, api = console
    first = api.get("/api/events?limit=5")
    assert len(first["events"]) <= 5
    last = first["total"]
    connect(server.port)
    assert until(lambda: api.get(f"/api/events?after={last}")["events"])
    later = api.get(f"/api/events?after={last}")["events"]
    assert all(event["id"] > last for event in later)
    assert "client.connected" in [event["event"] for event in later]


def test_history_samples_rates_from_the_counters(reactor, start_server, console_of):
    server = start_server(**{"Admin.sampleinterval": "0.1"})
    api = console_of(server)
    assert until(lambda: len(api.get("/api/history")["times"]) >= 2)
    fill(server.port, "/queue/h", ["x"] * 20)
    history = api.get("/api/history")
    assert set(history["series"]) >= {"received", "delivered", "messages", "rss", "connections"}
    assert until(lambda: 20 in api.get("/api/history")["series"]["messages"]["values"])
    received = api.get("/api/history")["series"]["received"]["values"]
    assert any(received), f"a rate of received messages was charted: {received}"
    mine = api.get(f"/api/history?destination={encoded('/queue/h')}")
    assert 20 in mine["series"]["messages"]["values"]


def test_a_charted_rate_comes_within_seconds_of_a_start_at_the_default_interval(console):
    server, api = console  # Admin.sampleinterval: 10 s; rates once two samples were taken
    started = time.monotonic()
    assert until(lambda: len(api.get("/api/history")["times"]) >= 2, timeout=8)
    rates = api.get("/api/history")["series"]["received"]["values"]
    assert rates[1] is not None and time.monotonic() - started < 10


def test_openapi_documents_every_route(console):
    server, api = console
    document = api.get("/api/openapi.json")
    assert document["openapi"].startswith("3.")
    operations = {
        (method.upper(), path) for path, methods in document["paths"].items() for method in methods
    }
    assert ("PUT", "/api/parameters/{key}") in operations
    assert ("POST", "/api/destinations/{name}/purge") in operations
    assert len(operations) >= 25
    ids = [op["operationId"] for methods in document["paths"].values() for op in methods.values()]
    assert len(ids) == len(set(ids))
    put = document["paths"]["/api/parameters/{key}"]["put"]
    assert put["x-wiremq-role"] == "admin" and "400" in put["responses"]


# -- parameters -------------------------------------------------------------------------------


def test_a_parameter_answers_its_value_default_bounds_unit_and_whether_it_is_live(console):
    server, api = console
    found = api.get("/api/parameters/VolQueueStoreImpl.globalbytehighwatermark")
    assert found["value"] == 16_000_000 and found["default"] == 16_000_000
    assert found["unit"] == "bytes" and found["live"] is True and found["off"] == -1
    assert found["minimum"] == 0 and found["type"] == "integer"
    every = api.get("/api/parameters")["parameters"]
    assert len(every) == len(list(server.settings.registry))
    assert api.get("/api/parameters?group=ClientEgress")["parameters"][0]["group"] == "ClientEgress"


def test_changing_a_live_parameter_applies_it_and_writes_config_xml(console, tmp_path):
    server, api = console
    changed = api.set_parameter("VolQueueStoreImpl.globalbytehighwatermark", 20_000_000)
    assert changed["applied"] is True and changed["value"] == 20_000_000
    assert server.settings.get("VolQueueStoreImpl", "globalbytehighwatermark") == 20_000_000
    config = Path(ServerSettings.read(server.settings, "Server").datadir) / "config.xml"
    assert 'globalbytehighwatermark="20000000"' in config.read_text()
    again = api.set_parameter("VolQueueStoreImpl.globalbytehighwatermark", "30000000")
    assert again["value"] == 30_000_000
    previous = config.with_name("config.xml.bak").read_text()
    assert 'globalbytehighwatermark="20000000"' in previous


def test_a_parameter_that_is_not_live_waits_for_a_restart(console):
    server, api = console
    changed = api.set_parameter("ClientEgress.maxdepth", 500)
    assert changed["applied"] is False and changed["restart_needed"] is True
    assert changed["value"] == 20000 and changed["configured"] == 500
    assert server.settings.get("ClientEgress", "maxdepth") == 20000
    assert api.get("/api/overview")["restart_needed"] == ["ClientEgress.maxdepth"]


def test_several_parameters_change_together_or_not_at_all(console):
    server, api = console
    lower = {
        "VolQueueStoreImpl.globalbytelowwatermark": 1000,
        "VolQueueStoreImpl.globalbytehighwatermark": 2000,
    }
    assert len(api.ok("PATCH", "/api/parameters", {"values": lower})["changed"]) == 2
    broken = {
        "VolQueueStoreImpl.globalbytelowwatermark": 5000,
        "StompListener.maxheaders": 7,
    }
    answer = api.request("PATCH", "/api/parameters", {"values": broken})
    assert (
        answer.status == 400 and "above VolQueueStoreImpl.globalbytehighwatermark" in answer.error
    )
    assert server.settings.get("StompListener", "maxheaders") == 1000
    assert server.settings.get("VolQueueStoreImpl", "globalbytelowwatermark") == 1000


def test_a_destinations_parameters_and_its_overrides(console):
    server, api = console
    path = f"/api/destinations/{encoded('/queue/o')}/parameters"
    before = {p["name"]: p for p in api.get(path)["parameters"]}
    assert before["maxttl"]["value"] == 0 and before["maxttl"]["overridden"] is False
    api.ok("PUT", f"{path}/maxttl", {"value": 5000})
    after = {p["name"]: p for p in api.get(path)["parameters"]}
    assert after["maxttl"]["value"] == 5000 and after["maxttl"]["overridden"] is True
    api.ok("PUT", f"{path}/maxttl", {"value": None})
    assert {p["name"]: p for p in api.get(path)["parameters"]}["maxttl"]["value"] == 0


# -- every 4xx --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "words"),
    [
        ("GET", "/api/nothing", None, 404, "no such API resource"),
        ("GET", "/nothing", None, 404, "no page"),
        ("GET", "/static/../site.py", None, 404, "no such file"),
        ("GET", "/api/parameters/Nope.nothing", None, 404, "unknown parameter"),
        ("GET", "/api/parameters?group=Nope", None, 404, "no parameter group"),
        ("GET", "/api/connections/nobody", None, 404, "no connection"),
        ("DELETE", "/api/connections/nobody", None, 404, "no connection"),
        ("GET", "/api/destinations/%2Fqueue%2Fnone", None, 404, "no destination"),
        ("POST", "/api/destinations/%2Fqueue%2Fnone/purge", None, 404, "no destination"),
        ("GET", "/api/destinations/%2Fqueue%2Fnone/messages", None, 404, "no destination"),
        ("DELETE", "/api/destinations/%2Fqueue%2Fnone", None, 404, "no destination"),
        ("PUT", "/api/parameters/Nope.nothing", {"value": 1}, 404, "unknown parameter"),
        ("PUT", "/api/parameters/ClientEgress.maxdepth", {"value": 1}, 400, "out of range"),
        ("PUT", "/api/parameters/ClientEgress.maxdepth", {"value": "many"}, 400, "not valid"),
        ("PUT", "/api/parameters/ClientEgress.maxdepth", {"value": True}, 400, "not valid"),
        ("PUT", "/api/parameters/ClientEgress.maxdepth", {"value": 2.5}, 400, "not valid"),
        ("PUT", "/api/parameters/ClientEgress.maxdepth", {"valeu": 9}, 400, '{"value": V}'),
        ("PUT", "/api/parameters/ClientEgress.maxdepth", [9], 400, '{"value": V}'),
        ("PUT", "/api/parameters/Server.loglevel", {"value": "loud"}, 400, "one of debug"),
        (
            "PUT",
            "/api/parameters/MessageSpool.usageclearpercent",
            {"value": 90},
            400,
            "above MessageSpool.usagesetpercent",
        ),
        ("PATCH", "/api/parameters", {"values": {}}, 400, "Group.name"),
        ("PATCH", "/api/parameters", {"values": {"No.such": 1}}, 404, "unknown parameter"),
        ("GET", "/api/events?limit=0", None, 400, "out of range"),
        ("GET", "/api/events?after=x", None, 400, "not a whole number"),
        ("GET", "/api/events?color=red", None, 400, "unknown query parameter"),
        ("GET", "/api/history?destination=nowhere", None, 400, "neither /queue/"),
        ("POST", "/api/destinations/%2Ftopic%2Ft/purge", None, 404, "no destination"),
        ("POST", "/api/destinations/nowhere/shutdown", None, 400, "neither /queue/"),
        ("GET", "/api/destinations/nowhere/parameters", None, 400, "neither /queue/"),
        ("POST", "/api/wizard", {"heap_mb": 256}, 400, "missing fields"),
        (
            "POST",
            "/api/wizard",
            {
                **dict.fromkeys(
                    [
                        "heap_mb",
                        "topics",
                        "queues",
                        "topic_message_bytes",
                        "queue_message_bytes",
                        "message_rate",
                        "connections",
                    ],
                    10,
                ),
                "threads": 25,
            },
            400,
            "must be more than",
        ),
        ("POST", "/api/parameters", None, 405, "not allowed"),
        ("DELETE", "/api/parameters/Server.loglevel", None, 405, "not allowed"),
        ("PUT", "/", None, 405, "not allowed"),
        ("POST", "/static/console.js", None, 405, "not allowed"),
        ("GET", "/logout", None, 405, "not allowed"),
    ],
)
def test_bad_requests_get_a_4xx_saying_why(console, method, path, body, status, words):
    server, api = console
    answer = api.request(method, path, body)
    assert answer.status == status, answer.body
    assert words in answer.error
    assert answer.json["status"] == status


def test_405_names_the_methods_allowed(console):
    server, api = console
    answer = api.request("POST", "/api/parameters/Server.loglevel", {"value": "info"})
    assert answer.status == 405 and answer.headers["allow"] == "GET, PUT"


def test_a_body_that_is_not_json_is_refused(console):
    server, api = console
    path = "/api/parameters/ClientEgress.maxdepth"
    wrong_type = api.request(
        "PUT", path, raw=b'{"value": 9}', headers={"Content-Type": "text/plain"}
    )
    assert wrong_type.status == 415 and "application/json" in wrong_type.error
    no_type = api.request("PUT", path, raw=b'{"value": 9}')
    assert no_type.status == 415
    broken = api.request(
        "PUT", path, raw=b'{"value": ', headers={"Content-Type": "application/json"}
    )
    assert broken.status == 400 and "not valid JSON" in broken.error


def test_a_body_over_the_limit_gets_413(console):
    server, api = console
    big = json.dumps({"value": "x" * 70_000}).encode()
    json_type = {"Content-Type": "application/json"}
    answer = api.request("PUT", "/api/parameters/Server.datadir", raw=big, headers=json_type)
    assert answer.status == 413 and "at most 65536" in answer.error
    api.set_parameter("Admin.maxrequestbytes", 200_000)  # live: the next request may be larger
    taken = api.request("PUT", "/api/parameters/Server.datadir", raw=big, headers=json_type)
    assert taken.status == 200 and taken.json["applied"] is False


def test_a_state_change_without_the_csrf_token_is_refused(console):
    server, api = console
    bare = Api(api.port)
    answer = bare.request("PUT", "/api/parameters/ClientEgress.maxdepth", {"value": 500})
    assert answer.status == 403 and "X-CSRF-Token" in answer.error
    wrong = Api(api.port, csrf="forged")
    assert wrong.request("POST", "/api/destinations/%2Fqueue%2Fx/shutdown").status == 403
    assert bare.request("GET", "/api/parameters/ClientEgress.maxdepth").status == 200


# -- logins and roles ---------------------------------------------------------------------------


@pytest.fixture
def with_users(reactor, start_server, tmp_path):
    """A server whose data folder has a users file: one user of each role."""
    users = UsersFile(tmp_path / "data")
    for role in ("admin", "operator", "viewer"):
        users.set(role, f"{role}-pw", role)
    # The console needs the logins; the STOMP clients here connect without one, and may do
    # anything.
    users.grant(None, "everyone", ">", ["read", "write", "create", "admin"])
    server = start_server(**{"Security.allowanonymous": "true"})
    return server, open_console(reactor, server)


def test_with_a_users_file_everything_needs_a_login(with_users):
    server, anonymous = with_users
    for path in ("/api/session", "/api/overview", "/metrics", "/api/parameters"):
        answer = anonymous.request("GET", path)
        assert answer.status == 401, path
        assert answer.headers["www-authenticate"].startswith("Basic realm=")
    assert anonymous.request("GET", "/api/openapi.json").status == 200  # documentation
    page = anonymous.request("GET", "/")
    assert page.status == 303 and page.headers["location"] == "/login"
    assert anonymous.request("GET", "/login").status == 200
    assert "x-wiremq-note" not in anonymous.request("GET", "/login").headers


@pytest.mark.parametrize(
    "auth",
    [("admin", "wrong"), ("nobody", "admin-pw"), ("admin", "")],
)
def test_a_wrong_login_gets_401(with_users, auth):
    server, anonymous = with_users
    answer = Api(anonymous.port, auth=auth).request("GET", "/api/overview")
    assert answer.status == 401 and "wrong user name or password" in answer.error


@pytest.mark.parametrize(
    "header",
    ["Bearer abc", "Basic !!!notbase64", "Basic " + "bm9jb2xvbg=="],  # the last: "nocolon"
)
def test_malformed_credentials_get_401(with_users, header):
    server, anonymous = with_users
    answer = anonymous.request("GET", "/api/overview", headers={"Authorization": header})
    assert answer.status == 401


@pytest.mark.parametrize(
    ("role", "method", "path", "body", "allowed"),
    [
        ("viewer", "GET", "/api/overview", None, True),
        ("viewer", "GET", "/metrics", None, True),
        ("viewer", "GET", "/api/destinations/%2Fqueue%2Fr/messages", None, True),  # read
        ("viewer", "POST", "/api/destinations/%2Fqueue%2Fr/purge", None, False),
        ("viewer", "PUT", "/api/parameters/ClientEgress.maxdepth", {"value": 500}, False),
        ("operator", "POST", "/api/destinations/%2Fqueue%2Fr/purge", None, True),
        ("operator", "GET", "/api/destinations/%2Fqueue%2Fr/messages", None, True),
        ("operator", "POST", "/api/destinations/%2Fqueue%2Fr/shutdown", None, True),
        ("operator", "PUT", "/api/parameters/ClientEgress.maxdepth", {"value": 500}, False),
        ("operator", "DELETE", "/api/destinations/%2Fqueue%2Fr", None, False),
        ("operator", "POST", "/api/wizard/apply", None, False),
        ("admin", "PUT", "/api/parameters/ClientEgress.maxdepth", {"value": 500}, True),
        ("admin", "DELETE", "/api/destinations/%2Fqueue%2Fr", None, True),
    ],
)
def test_an_action_beyond_the_role_gets_403(with_users, role, method, path, body, allowed):
    server, anonymous = with_users
    fill(server.port, "/queue/r", ["m"])
    api = Api(anonymous.port, auth=(role, f"{role}-pw"))
    answer = api.request(method, path, body)
    if allowed:
        assert answer.status == 200, answer.body
    else:
        assert answer.status == 403, answer.body
        assert "needs the" in answer.error and role in answer.error


def test_the_login_page_sets_a_session_cookie_that_needs_the_csrf_token(with_users):
    server, anonymous = with_users
    wrong = Api(anonymous.port).log_in("operator", "nope")
    assert wrong.status == 401 and b"Wrong user name or password" in wrong.body
    api = Api(anonymous.port)
    answer = api.log_in("operator", "operator-pw")
    assert answer.status == 303 and api.cookie
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    session = api.get("/api/session")
    assert session["user"] == "operator" and session["role"] == "operator"
    assert api.request("GET", "/").status == 200
    purge = "/api/destinations/%2Fqueue%2Fq/purge"
    fill(server.port, "/queue/q", ["m"])
    assert api.request("POST", purge).status == 403  # the cookie alone is not enough
    api.csrf = session["csrf_token"]
    assert api.request("POST", purge).status == 200
    assert api.request("POST", "/logout").status == 200
    assert api.request("GET", "/api/session").status == 401


def test_a_removed_user_loses_their_session_at_once(with_users, tmp_path):
    server, anonymous = with_users
    api = Api(anonymous.port)
    assert api.log_in("viewer", "viewer-pw").status == 303
    assert api.request("GET", "/api/overview").status == 200
    UsersFile(tmp_path / "data").delete("viewer")
    assert api.request("GET", "/api/overview").status == 401


def test_a_session_unused_past_the_timeout_ends(with_users):
    server, anonymous = with_users
    admin = Api(anonymous.port, auth=("admin", "admin-pw"))
    admin.set_parameter("Admin.sessiontimeout", 10)
    api = Api(anonymous.port)
    assert api.log_in("viewer", "viewer-pw").status == 303
    gate_sessions = [s for s in _gate(server).sessions.values() if s.user == "viewer"]
    for session in gate_sessions:
        session.used -= 11  # as if unused for 11 s
    assert api.request("GET", "/api/overview").status == 401


def _gate(server):
    """The console's gate (its sessions), found through the listener's site (wrapped in
    the factory that counts the console's sockets)."""
    (listener,) = server.listeners
    return listener.factory.wrappedFactory.resource.gate


def test_without_a_users_file_the_console_listens_on_localhost_only(reactor, start_server):
    server = start_server(**{"Admin.host": "0.0.0.0"})
    api = open_console(reactor, server)
    (listener,) = server.listeners
    assert listener.getHost().host == "127.0.0.1"
    assert api.get("/api/session")["localhost_only"] is True


def test_with_a_users_file_the_console_listens_where_it_is_told(reactor, start_server, tmp_path):
    UsersFile(tmp_path / "data").set("ops", "pw", "viewer")
    server = start_server(**{"Admin.host": "0.0.0.0"})
    api = open_console(reactor, server)
    (listener,) = server.listeners
    assert listener.getHost().host == "0.0.0.0"
    session = Api(api.port, auth=("ops", "pw")).get("/api/session")
    assert session["localhost_only"] is False and session["role"] == "viewer"


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=5,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    key=st.sampled_from([p.key for p in REGISTRY]),
    body=st.one_of(JSON_VALUES, st.fixed_dictionaries({"value": JSON_VALUES})),
)
@example(key="Server.datadir", body={"value": "\x08"})  # no XML can hold it
def test_any_json_put_to_a_parameter_is_taken_or_refused_with_400(console, key, body):
    server, api = console
    raw = json.dumps(body).encode()
    json_type = {"Content-Type": "application/json"}
    answer = api.request("PUT", f"/api/parameters/{key}", raw=raw, headers=json_type)
    assert answer.status in (200, 400), (answer.status, answer.body)
    if answer.status == 400:
        assert answer.error
    server.settings.check_relations()  # whatever was taken keeps the rules


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    segments=st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=5),
    method=st.sampled_from(["GET", "PUT", "POST", "DELETE", "PATCH"]),
)
def test_any_path_under_the_api_gets_an_answer_not_a_crash(console, segments, method):
    server, api = console
    path = "/api/" + "/".join(quote(s, safe="") for s in segments)
    answer = api.request(method, path, {} if method in ("PUT", "POST", "PATCH") else None)
    assert answer.status < 500, (path, answer.status, answer.body)
    assert answer.json["status"] == answer.status or answer.status == 200


def test_a_users_destination_permissions_bound_what_the_console_lets_them_do(
    reactor, start_server, tmp_path
):
    """Besides the role: reading a destination needs read, acting on it admin, and a
    message moved needs write where it goes (docs/security.md)."""
    users = UsersFile(tmp_path / "data")
    users.set("ops", "ops-pw", "operator")
    users.grant("ops", None, "/queue/mine.>", ["admin"])
    users.grant("ops", None, "/queue/theirs", ["read"])
    users.set("feeder", "feeder-pw", "viewer")
    users.grant("feeder", None, ">", ["read", "write", "create"])
    server = start_server()
    api = open_console(reactor, server)
    producer, recorder = connect(server.port, login="feeder", passcode="feeder-pw")
    for destination in ("/queue/mine.a", "/queue/theirs"):
        producer.send(destination, "m", receipt=destination)
    assert recorder.wait_until(lambda: len(recorder.receipts) == 2)
    producer.disconnect()
    ops = Api(api.port, auth=("ops", "ops-pw"))
    mine, theirs = encoded("/queue/mine.a"), encoded("/queue/theirs")

    [waiting] = ops.get(f"/api/destinations/{mine}/messages")["messages"]
    assert len(ops.get(f"/api/destinations/{theirs}/messages")["messages"]) == 1  # read
    refused = ops.request("POST", f"/api/destinations/{theirs}/purge")
    assert refused.status == 403 and refused.error == "permission denied: admin /queue/theirs"
    elsewhere = encoded("/queue/other")
    assert ops.request("GET", f"/api/destinations/{elsewhere}/messages").status == 403
    moved = ops.request(
        "POST",
        f"/api/destinations/{mine}/messages/{encoded(waiting['message_id'])}/move",
        {"to": "/queue/theirs"},
    )
    assert moved.status == 403 and moved.error == "permission denied: write /queue/theirs"
    assert ops.ok("POST", f"/api/destinations/{mine}/purge")["purged"] == 1
    assert len(ops.get(f"/api/destinations/{theirs}/messages")["messages"]) == 1, "untouched"
