"""A STOMP over WebSocket client for the tests: wsproto over a plain (or TLS) socket.

It has the raw STOMP client's interface (``send`` bytes of frames, ``next_frame``,
``wait_closed``, ``read_until``...), so the tests written for TCP clients run
over WebSocket too; it also records the WebSocket messages themselves (text or
binary) and how the server answered the upgrade.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from collections.abc import Sequence

from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    Pong,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)

from tests.defaults import LIMITS
from tests.integration.clients import TIMEOUT
from tests.integration.test_flow_control import SlowClient
from wiremq.modules.stomp.codec import FrameDecoder

STOMP_SUBPROTOCOLS = ["v10.stomp", "v11.stomp", "v12.stomp"]


class HandshakeRefused(Exception):
    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"{status}: {body!r}")
        self.status = status
        self.body = body


class WsClient(SlowClient):
    """STOMP over WebSocket (see the module docstring); ``receive_buffer`` makes its socket
    take little before its window closes, for a client that does not read."""

    def __init__(
        self,
        port: int,
        subprotocols: Sequence[str] = STOMP_SUBPROTOCOLS,
        origin: str | None = None,
        tls: ssl.SSLContext | None = None,
        receive_buffer: int | None = None,
        connect: bool = True,
    ) -> None:
        sock = socket.socket()
        if receive_buffer is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.settimeout(TIMEOUT)
        sock.connect(("127.0.0.1", port))
        self.sock = tls.wrap_socket(sock, server_hostname="127.0.0.1") if tls else sock
        self._init_stomp()
        self.websocket = WSConnection(ConnectionType.CLIENT)
        self.messages_received: list[str | bytes] = []  # each WebSocket message, whole
        self.subprotocol: str | None = None
        self.close_code: int | None = None
        self.pongs: list[bytes] = []  # the payloads of the pongs received
        self._partial: list[str | bytes] = []
        headers = [(b"origin", origin.encode())] if origin is not None else []
        self.sock.sendall(
            self.websocket.send(
                Request(
                    host="127.0.0.1",
                    target="/stomp",
                    subprotocols=list(subprotocols),
                    extra_headers=headers,
                )
            )
        )
        self._handshake()
        if connect:
            self.session = self.connect().headers["session"]

    def _init_stomp(self) -> None:
        self.decoder = FrameDecoder(LIMITS)
        self.decoder.version = "1.2"
        self.frames = []
        self.raw = b""
        self.closed = False

    def _handshake(self) -> None:
        rejected: RejectConnection | None = None
        body = b""
        while True:
            data = self.sock.recv(65536)
            if not data:
                raise HandshakeRefused(rejected.status_code if rejected else 0, body)
            self.websocket.receive_data(data)
            for event in self.websocket.events():
                if isinstance(event, AcceptConnection):
                    self.subprotocol = event.subprotocol
                    return
                if isinstance(event, RejectConnection):
                    rejected = event
                    if not event.has_body:
                        raise HandshakeRefused(event.status_code, b"")
                elif isinstance(event, RejectData):
                    body += event.data
                    if event.body_finished:
                        assert rejected is not None
                        raise HandshakeRefused(rejected.status_code, body)

    def send(self, data: bytes, binary: bool = False) -> None:
        """One WebSocket message holding ``data`` (frames, parts of one, heart-beats)."""
        message = BytesMessage(data) if binary else TextMessage(data.decode())
        self.sock.sendall(self.websocket.send(message))

    def _take(self, data: bytes) -> None:
        """Bytes of WebSocket frames the server sent: the STOMP in its messages is taken as
        a raw client takes it."""
        self.websocket.receive_data(data)
        for event in self.websocket.events():
            if isinstance(event, TextMessage | BytesMessage):
                self._partial.append(event.data)
                if event.message_finished:
                    whole = self._partial[0][:0].join(self._partial)  # type: ignore[arg-type]
                    self._partial = []
                    self.messages_received.append(whole)
                    super()._take(whole.encode() if isinstance(whole, str) else whole)
            elif isinstance(event, Ping):
                self.sock.sendall(self.websocket.send(event.response()))
            elif isinstance(event, Pong):
                self.pongs.append(bytes(event.payload))
            elif isinstance(event, CloseConnection):
                self.close_code = event.code
                with contextlib.suppress(Exception):  # the server may be gone already
                    self.sock.sendall(self.websocket.send(event.response()))
