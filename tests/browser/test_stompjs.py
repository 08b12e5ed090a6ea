"""The real @stomp/stompjs client against wiremq's STOMP over WebSocket, in Node (ws:// and
wss://) and in headless Chromium: login, send with receipts, subscribe with client-individual acks,
a binary body, heart-beats both ways while idle, and a permission refusal.

The client comes from npm (``tests/browser/package.json``, installed by ``make test``
with ``npm ci``); Chromium is Debian's. Both run ``scenario.js``; the server's side of
what it did is checked here.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from tests.browser.chromium import PageServer, chromium
from tests.conftest import call_in_reactor
from tests.integration.certificates import Certificates, make_certificates
from tests.integration.clients import until
from wiremq.modules.security.users import UsersFile

HERE = Path(__file__).parent
STOMPJS = HERE / "node_modules" / "@stomp" / "stompjs" / "bundles" / "stomp.umd.min.js"
COUNT = 5
HEARTBEAT = 1000  # ms, both ways (200 ms lost a connection to a loaded machine now and then)
IDLE = 4000  # ms of silence but heart-beats: the server drops a client silent for 2 s


@pytest.fixture
def certificates(tmp_path: Path) -> Certificates:
    return make_certificates(tmp_path / "certificates")


@pytest.fixture
def stomp_server(start_server, tmp_path, certificates):
    """A server with STOMP over WebSocket, ws:// and wss://; alice may use /queue/browser,
    not /queue/forbidden."""
    assert STOMPJS.exists(), "no @stomp/stompjs: `make test` installs it (npm ci)"
    users = UsersFile(tmp_path / "data")
    users.set("alice", "alice-pw", "viewer")
    users.grant("alice", None, "/queue/browser", ["read", "write", "create"])
    return start_server(
        **{
            "WebSocketListener.port": "0",
            "WebSocketListener.tlsport": "0",
            "TLS.certfile": str(certificates.server.cert),
            "TLS.keyfile": str(certificates.server.key),
            "StompListener.heartbeatsend": str(HEARTBEAT // 2),
            "StompListener.heartbeatreceive": str(HEARTBEAT // 2),
        }
    )


def options(server: Any, scheme: str = "ws") -> dict[str, Any]:
    return {
        "url": f"{scheme}://127.0.0.1:{server.ports[scheme]}/stomp",
        "login": "alice",
        "passcode": "alice-pw",
        "queue": "/queue/browser",
        "forbidden": "/queue/forbidden",
        "count": COUNT,
        "heartbeat": HEARTBEAT,
        "idleMs": IDLE,
    }


def check(seen: dict[str, Any], reactor: object, server: Any) -> None:
    assert "failure" not in seen, seen.get("failure")
    assert seen["version"] == "1.2"
    assert seen["bodies"] == [f"message {i} \u00e9" for i in range(COUNT)]
    assert seen["binary"] == [0xFF, 0x00, 0x01, 0xFE]
    assert seen["receipts"] == [f"r-{i}" for i in range(COUNT)]
    assert seen["connectedAfterIdle"], "dropped while idle: heart-beats did not flow"
    assert seen["idleHeartbeats"] >= IDLE // HEARTBEAT - 2, seen["idleHeartbeats"]
    assert seen["clientHeartbeats"] >= IDLE // HEARTBEAT - 2, seen["clientHeartbeats"]
    assert seen["error"] == {
        "message": "permission denied: write /queue/forbidden",
        "receipt": "no",
    }
    assert seen["closedCleanly"] is True  # a WebSocket Close after the ERROR

    def queue() -> dict[str, Any] | None:
        state = call_in_reactor(reactor, server.flow_state)
        return next((q for q in state["queues"] if q["name"] == "/queue/browser"), None)

    # Every message was acknowledged: none went back to the queue when the client left.
    assert until(lambda: (q := queue()) is not None and q["consumers"] == 0)
    assert queue()["volatile_messages"] == 0  # type: ignore[index]


@pytest.mark.parametrize("scheme", ["ws", "wss"])
def test_stompjs_in_node(reactor, stomp_server, certificates, scheme):
    given = options(stomp_server, scheme)
    done = subprocess.run(
        ["node", "run_node.js", given["url"], json.dumps(given)],
        cwd=HERE,
        capture_output=True,
        timeout=90,
        env={**os.environ, "NODE_EXTRA_CA_CERTS": str(certificates.ca)},  # trusts the server
    )
    assert done.returncode == 0, done.stderr.decode()
    check(json.loads(done.stdout), reactor, stomp_server)


def test_stompjs_in_headless_chromium(reactor, stomp_server):
    page = PageServer(
        {
            "/page.html": HERE / "page.html",
            "/scenario.js": HERE / "scenario.js",
            "/stomp.umd.min.js": STOMPJS,
        }
    )
    try:
        fragment = urllib.parse.quote(json.dumps(options(stomp_server)))
        with chromium(f"http://127.0.0.1:{page.port}/page.html#{fragment}") as browser:
            reported = page.reported.wait(90)
            assert reported, f"the page reported nothing: {browser.poll()=}"
        assert page.result is not None
        check(page.result, reactor, stomp_server)
    finally:
        page.close()
