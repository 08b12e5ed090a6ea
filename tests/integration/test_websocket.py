"""STOMP over WebSocket with a wsproto client: the upgrade, framing, wss://, and flow control.

The browser and Node tests (``tests/browser``) run the real stomp.js; these look
at what a browser cannot show: the bytes of each message, refusals of the
upgrade, and a client that stops reading.
"""

from __future__ import annotations

import contextlib
import socket
import ssl

import pytest
from wsproto import ConnectionType, WSConnection
from wsproto.events import Ping, Request
from wsproto.frame_protocol import FrameProtocol

from tests.conftest import call_in_reactor
from tests.integration.certificates import make_certificates
from tests.integration.clients import TIMEOUT, connect, until
from tests.integration.test_flow_control import (
    client_state,
    closing_after,
    number,
    watermark_state,
)
from tests.integration.test_flow_subscribers import TOPIC_WATERMARKS, stopped_by_the_live_buffer
from tests.integration.wsclient import HandshakeRefused, WsClient
from wiremq.modules.security.users import UsersFile
from wiremq.server.writer import socket_of

WS = {"WebSocketListener.port": "0"}


@pytest.fixture
def ws_clients():
    """``ws_clients(port, ...)``: WsClients closed after the test, before its server."""
    yield from closing_after(WsClient)


def test_a_stomp_client_over_websocket_exchanges_messages_with_tcp_clients(
    start_server, ws_clients
):
    server = start_server(**WS)
    client = ws_clients(server.ports["ws"])
    assert client.subprotocol == "v12.stomp"
    client.subscribe("/queue/web")
    producer, _ = connect(server.port)
    producer.send("/queue/web", "from tcp")
    assert client.read_until(lambda frames: any(f.command == "MESSAGE" for f in frames))
    assert client.messages()[0].body == b"from tcp"
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/tcp", id="1")
    client.send(b"SEND\ndestination:/queue/tcp\nreceipt:r\n\nfrom the web\0")
    assert recorder.wait_for_messages(1)[0].body == "from the web"


def test_frames_may_span_messages_and_one_message_may_hold_several(start_server, ws_clients):
    server = start_server(**WS)
    client = ws_clients(server.ports["ws"])
    first = b"SEND\ndestination:/queue/a\nreceipt:1\n\none\0"
    second = b"SEND\ndestination:/queue/a\nreceipt:2\n\ntwo\0"
    client.send(first[:10])
    client.send(first[10:] + b"\n" + second, binary=True)
    assert client.read_until(lambda frames: len(frames) == 2)
    assert [f.headers["receipt-id"] for f in client.frames] == ["1", "2"]


def test_each_message_holds_whole_frames_as_text_or_as_binary_when_not_utf8(
    start_server, ws_clients
):
    server = start_server(**WS)
    client = ws_clients(server.ports["ws"])
    client.subscribe("/queue/bodies")
    client.send(b"SEND\ndestination:/queue/bodies\ncontent-length:2\n\n\xff\xfe\0", binary=True)
    client.send("SEND\ndestination:/queue/bodies\n\nh\u00e9llo\0".encode())
    assert client.read_until(lambda frames: len(client.messages()) == 2)
    assert [m.body for m in client.messages()] == [b"\xff\xfe", "h\u00e9llo".encode()]
    kinds = [type(m) for m in client.messages_received if b"MESSAGE" in _bytes(m)]
    assert kinds == [bytes, str]  # binary only where the frame is not UTF-8
    assert client.decoder.buffered == 0  # no message ended inside a frame


def _bytes(message: str | bytes) -> bytes:
    return message.encode() if isinstance(message, str) else message


@pytest.mark.parametrize(
    ("offered", "chosen"),
    [
        (["v10.stomp", "v11.stomp", "v12.stomp"], "v12.stomp"),
        (["v10.stomp"], "v10.stomp"),
        (["mqtt", "v11.stomp"], "v11.stomp"),
        ([], None),
    ],
)
def test_the_newest_stomp_subprotocol_offered_is_chosen(start_server, ws_clients, offered, chosen):
    server = start_server(**WS)
    client = ws_clients(server.ports["ws"], subprotocols=offered)
    assert client.subprotocol == chosen


def test_an_upgrade_the_server_cannot_serve_is_refused_with_a_reason(start_server):
    server = start_server(**WS, **{"WebSocketListener.allowedorigins": "https://app.example"})
    port = server.ports["ws"]
    with pytest.raises(HandshakeRefused) as refused:
        WsClient(port, subprotocols=["mqtt"])
    assert refused.value.status == 400 and b"v12.stomp" in refused.value.body
    with pytest.raises(HandshakeRefused) as refused:
        WsClient(port, origin="https://evil.example")
    assert refused.value.status == 403 and b"https://evil.example" in refused.value.body
    WsClient(port, origin="https://app.example/").close()  # allowed, trailing slash or not
    WsClient(port).close()  # no Origin: not a browser
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as plain:
        plain.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = plain.recv(65536)
    assert answer.startswith(b"HTTP/1.1 400") and b"STOMP over WebSocket" in answer


def test_a_connection_that_never_upgrades_is_closed_at_the_connect_timeout(start_server):
    server = start_server(**WS, **{"StompListener.connecttimeout": "0.3"})
    with socket.create_connection(("127.0.0.1", server.ports["ws"]), timeout=TIMEOUT) as idle:
        idle.sendall(b"GET / HTTP/1.1\r\n")  # and nothing more
        with contextlib.suppress(ConnectionResetError):  # cut: closed by the server too
            assert idle.recv(100) == b""  # closed by the server, not by our timeout


def test_stomp_over_secure_websocket(start_server, tmp_path, ws_clients):
    certificates = make_certificates(tmp_path / "certificates")
    server = start_server(
        **{
            "WebSocketListener.tlsport": "0",
            "TLS.certfile": str(certificates.server.cert),
            "TLS.keyfile": str(certificates.server.key),
        }
    )
    context = ssl.create_default_context(cafile=str(certificates.ca))
    client = ws_clients(server.ports["wss"], tls=context)
    client.send(b"SEND\ndestination:/queue/s\nreceipt:1\n\nsecret\0")
    assert client.next_frame().headers["receipt-id"] == "1"


def test_a_websocket_login_failure_gets_an_error_then_a_close(start_server, tmp_path, ws_clients):
    UsersFile(tmp_path / "data").set("alice", "pw", "viewer")
    server = start_server(**WS, **{"Security.loginfailuredelay": "0.05"})
    client = ws_clients(server.ports["ws"], connect=False)
    client.send(b"CONNECT\naccept-version:1.2\nlogin:alice\npasscode:wrong\n\n\0")
    assert client.next_frame().headers["message"] == "login failed"
    assert client.wait_closed()
    assert client.close_code == 1000


def test_heart_beats_flow_both_ways_over_websocket(start_server, ws_clients):
    server = start_server(
        **WS, **{"StompListener.heartbeatsend": "100", "StompListener.heartbeatreceive": "100"}
    )
    client = ws_clients(server.ports["ws"], connect=False)
    client.connect(heart_beat="100,100")
    for _ in range(8):  # 0.8 s: the server would drop a silent client after 0.2 s
        client.send(b"\n")
        client.read_until(lambda frames: False, timeout=0.1)
    assert not client.closed and not client.frames
    assert client.messages_received.count("\n") >= 3  # the server's own heart-beats
    client.sock.sendall(client.websocket.send(Ping(b"are you there")))  # WebSocket's own
    assert client.read_until(lambda frames: client.pongs == [b"are you there"], timeout=5)


def test_a_websocket_subscriber_that_does_not_read_stops_the_publisher_as_over_tcp(
    reactor, start_server, floods, ws_clients
):
    """The transport's buffer pauses the socket writer; frames wait in the client's egress;
    the topic's live buffer fills to its watermark and the publisher is not read."""
    server = start_server(**WS, **TOPIC_WATERMARKS)
    slow = ws_clients(server.ports["ws"], receive_buffer=4096)
    slow.subscribe("/topic/web", consumerQueueEntriesSize="5")
    flood = floods(server.port, "/topic/web")
    state = stopped_by_the_live_buffer(reactor, server, flood)
    assert watermark_state(state, "TopicLiveBuffer")["tripped"]
    socket_state = next(s for s in state["sockets"] if s["session"] == slow.session)
    assert socket_state["blocked"], "the WebSocket client's writer was never paused"
    waiting = client_state(state, slow.session)["egress"]["D-1"]
    assert 0 < waiting["length_msgs"] <= 5  # its window: waiting in the egress, not the socket

    flood.limit = flood.sent + 200
    assert slow.read_until(lambda frames: len(frames) >= flood.limit, timeout=20)
    total = flood.finish()
    assert [number(m.body) for m in slow.messages()] == list(range(total))


def test_pings_from_a_client_that_does_not_read_do_not_pile_up_pongs(
    reactor, start_server, ws_clients
):
    """Pongs are written past the socket writer; while the socket's buffer is over its
    bound they are left out (RFC 6455 lets a server answer only the latest ping)."""
    server = start_server(**WS)
    client = ws_clients(server.ports["ws"], receive_buffer=4096)
    ping = client.websocket.send(Ping(b"p" * 125))
    client.sock.sendall(ping * 20_000)  # 2.6 MB of pings, no pong read
    client.send(b"SEND\ndestination:/queue/after\nreceipt:r\n\nx\0")

    def held() -> int | None:
        def measure() -> int | None:
            for connection in server.connections:
                if connection.client.session.session_id == client.session:
                    sock = socket_of(connection.transport)
                    return len(sock.dataBuffer) + sock._tempDataLen
            return None

        return call_in_reactor(reactor, measure)  # type: ignore[return-value]

    assert until(lambda: server.core.destinations.get("/queue/after") is not None)
    bound = server.transmit_bound
    assert held() is not None and held() <= 2 * bound, (held(), bound)


def test_frames_sent_along_with_the_upgrade_request_are_read(start_server):
    """A client should wait for the 101, but one that does not loses nothing."""
    server = start_server(**WS)
    handshake = WSConnection(ConnectionType.CLIENT)
    request = handshake.send(Request(host="127.0.0.1", target="/", subprotocols=["v12.stomp"]))
    frame = FrameProtocol(client=True, extensions=[]).send_data(
        b"CONNECT\naccept-version:1.2\n\n\0", fin=True
    )
    with socket.create_connection(("127.0.0.1", server.ports["ws"]), timeout=TIMEOUT) as sock:
        sock.sendall(request + frame)
        received = b""
        while b"CONNECTED" not in received:
            chunk = sock.recv(65536)
            assert chunk, f"closed after {received!r}"
            received += chunk
    assert received.startswith(b"HTTP/1.1 101")


def test_a_client_certificate_logs_in_over_secure_websocket(start_server, tmp_path, ws_clients):
    certificates = make_certificates(tmp_path / "certificates")
    users = UsersFile(tmp_path / "data")
    users.set("alice", "alice-pw", "viewer")
    users.grant("alice", None, "/queue/alice", ["write", "create"])
    server = start_server(
        **{
            "WebSocketListener.tlsport": "0",
            "TLS.certfile": str(certificates.server.cert),
            "TLS.keyfile": str(certificates.server.key),
            "TLS.cafile": str(certificates.ca),
            "TLS.clientcertificates": "required",
        }
    )
    context = ssl.create_default_context(cafile=str(certificates.ca))
    context.load_cert_chain(str(certificates.client.cert), str(certificates.client.key))
    alice = ws_clients(server.ports["wss"], tls=context)  # CONNECT without a login
    alice.send(b"SEND\ndestination:/queue/alice\nreceipt:1\n\nmine\0")
    assert alice.next_frame().headers["receipt-id"] == "1"
    alice.send(b"SEND\ndestination:/queue/bob\nreceipt:2\n\nnot mine\0")
    assert alice.next_frame().headers["message"] == "permission denied: write /queue/bob"


def test_an_upgrade_request_larger_than_a_connect_may_be_is_refused(start_server):
    server = start_server(**WS, **{"StompListener.maxconnectsize": "1024"})
    with socket.create_connection(("127.0.0.1", server.ports["ws"]), timeout=TIMEOUT) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Padding: " + b"p" * 2000 + b"\r\n")
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 431") and b"too large" in answer
