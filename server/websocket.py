"""STOMP over WebSocket (``ws://`` and ``wss://``): a channel between a socket and STOMP.

Browsers cannot open TCP sockets, so stomp.js speaks STOMP inside WebSocket
messages (subprotocols ``v10.stomp``, ``v11.stomp``, ``v12.stomp``). One
``WebSocketChannel`` per connection sits on the socket's transport (TCP, or TLS
for ``wss://``): it answers the HTTP upgrade, then hands the bytes of the
client's messages to a ``StompProtocol`` as one byte stream (a frame may span
messages, a message may hold several frames and heart-beats), and is that
protocol's transport: each write becomes one message holding whole frames,
text when it is UTF-8 (which is what stomp.js and older clients expect) and
binary otherwise.

Everything else is the socket's: the STOMP bounds apply to the stream as they
do over TCP (so no message is ever held whole), reading is paused and resumed
on the socket, and the socket writer is registered with the socket's
transport, whose write buffer pauses it when the client does not read. Flow
control, slow-subscriber detection and the transmit bound thus work for
WebSocket clients exactly as for TCP ones.

The protocol is wsproto's (sans-io, as our STOMP codec): the handshake, the
client's frames (masking, fragments, UTF-8 checks, pings, close). Only the
header of the server's data messages is written here, so that a frame's bytes
are sent as they are instead of being decoded to text and encoded again.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

import structlog
from twisted.internet.interfaces import IDelayedCall, IPushProducer
from twisted.internet.protocol import Factory, Protocol
from twisted.python.failure import Failure
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import RemoteProtocolError

from wiremq.server.descriptors import SocketGate
from wiremq.server.protocol import ListeningServer
from wiremq.server.writer import socket_of

log = structlog.get_logger("wiremq.websocket")

SUBPROTOCOLS = ("v12.stomp", "v11.stomp", "v10.stomp")  # the most preferred first
_TEXT, _BINARY = 0x81, 0x82  # FIN and the opcode of an unfragmented message


def message_header(data: bytes) -> bytes:
    """The header of a server's (unmasked, unfragmented) message carrying ``data``: text
    if ``data`` is UTF-8, else binary (RFC 6455, 5.2)."""
    kind = _TEXT if data.isascii() or _is_utf8(data) else _BINARY
    length = len(data)
    if length < 126:
        return bytes((kind, length))
    if length < 1 << 16:
        return struct.pack("!BBH", kind, 126, length)
    return struct.pack("!BBQ", kind, 127, length)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def choose_subprotocol(offered: Sequence[str]) -> str | None:
    """The STOMP subprotocol to answer with: the newest the client offers."""
    return next((p for p in SUBPROTOCOLS if p in offered), None)


class WebSocketChannel(Protocol):
    """The WebSocket side of one connection (see the module docstring).

    To the socket it is the protocol; to the STOMP protocol it is the transport.
    """

    def __init__(
        self,
        stomp: Protocol,
        handshake_bytes: int,
        handshake_timeout: float,
        allowed_origins: frozenset[str],
        call_later: Callable[..., IDelayedCall],
        sockets: SocketGate,
    ) -> None:
        """``handshake_bytes`` and ``handshake_timeout`` bound the HTTP upgrade as
        StompListener.maxconnectsize and connecttimeout bound a CONNECT;
        ``allowed_origins``: the web origins that may connect (empty: any)."""
        self.stomp = stomp
        self.handshake_bytes = handshake_bytes
        self.allowed_origins = allowed_origins
        self.websocket = WSConnection(ConnectionType.SERVER)
        self.upgraded = False
        self.disconnecting = False
        self._received = 0
        self._handshake_timeout = handshake_timeout
        self._call_later = call_later
        self._deadline: IDelayedCall | None = None
        self.sockets = sockets  # where its socket counts

    # -- as the socket's protocol ----------------------------------------------------------

    def connectionMade(self) -> None:
        self.sockets.opened()
        self._deadline = self._call_later(self._handshake_timeout, self._handshake_overdue)

    def dataReceived(self, data: bytes) -> None:
        if not self.upgraded:
            if self.disconnecting:  # refused: what follows is not read
                return
            self._received += len(data)
            if self._received > self.handshake_bytes:
                self._reject(431, "the WebSocket handshake is too large")
                return
        elif self.websocket.state is ConnectionState.CLOSED:
            return  # both sides said goodbye: nothing more is read
        try:
            self.websocket.receive_data(data)
            self._handle_events()
        except RemoteProtocolError as error:
            self._refuse_handshake(error)

    def _handle_events(self) -> None:
        for event in self.websocket.events():
            if isinstance(event, BytesMessage):
                self.stomp.dataReceived(bytes(event.data))
            elif isinstance(event, TextMessage):
                self.stomp.dataReceived(event.data.encode())
            elif isinstance(event, Request):
                if self._upgrade(event):
                    self._read_pipelined()
                return
            elif isinstance(event, Ping) and not self._backed_up():
                self._write_control(event.response())
            elif isinstance(event, CloseConnection):
                self._write_control(event.response())
                self.transport.loseConnection()  # type: ignore[union-attr]
                return

    def connectionLost(self, reason: Failure | None = None) -> None:
        self.sockets.closed()
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        if self.upgraded:
            self.stomp.connectionLost(reason)  # type: ignore[arg-type]

    # -- the handshake -----------------------------------------------------------------------

    def _upgrade(self, request: Request) -> bool:
        """Answer the upgrade; True if accepted."""
        origin = next((v for k, v in request.extra_headers if k.lower() == b"origin"), None)
        if origin is not None and self.allowed_origins:
            shown = origin.decode("latin-1").rstrip("/").lower()
            if shown not in self.allowed_origins:
                self._reject(403, f"pages of {shown[:200]} may not connect here")
                return False
        chosen = choose_subprotocol(request.subprotocols)
        if request.subprotocols and chosen is None:
            offered = ", ".join(request.subprotocols)[:200]
            self._reject(400, f"no STOMP subprotocol ({', '.join(SUBPROTOCOLS)}) in {offered}")
            return False
        self.transport.write(self.websocket.send(AcceptConnection(subprotocol=chosen)))  # type: ignore[union-attr]
        self.upgraded = True
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self.stomp.makeConnection(self)  # type: ignore[arg-type]
        return True

    def _read_pipelined(self) -> None:
        """Read the frames a client sent right behind its upgrade request. A client should
        wait for the 101, but wsproto's server side keeps what came after the request in
        its HTTP parser (h11's ``trailing_data``) and never hands it on."""
        parser = getattr(self.websocket.handshake, "_h11_connection", None)
        pipelined = bytes(parser.trailing_data[0]) if parser is not None else b""
        if pipelined:
            self.websocket.receive_data(pipelined)
            self._handle_events()

    def _refuse_handshake(self, error: RemoteProtocolError) -> None:
        """A request that is no WebSocket upgrade gets a 400 naming what is wrong; a broken
        WebSocket frame closes the connection."""
        if self.upgraded or not isinstance(error.event_hint, RejectConnection):
            self.transport.abortConnection()  # type: ignore[union-attr]
            return
        self._reject(400, f"this port serves STOMP over WebSocket: {error}")

    def _reject(self, status: int, reason: str) -> None:
        log.info("websocket.refused", status=status, reason=reason)
        self.disconnecting = True
        body = reason.encode() + b"\n"
        headers = [(b"content-type", b"text/plain; charset=utf-8")]
        try:
            response = self.websocket.send(
                RejectConnection(status_code=status, headers=headers, has_body=True)
            ) + self.websocket.send(RejectData(data=body))
        except Exception:  # the handshake is past answering: just close
            response = b""
        self.transport.write(response)  # type: ignore[union-attr]
        self.transport.loseConnection()  # type: ignore[union-attr]

    def _handshake_overdue(self) -> None:
        self._deadline = None
        if not self.upgraded:
            self.transport.abortConnection()  # type: ignore[union-attr]

    def _backed_up(self) -> bool:
        """Whether the socket holds more than its bound unwritten (the client does not
        read): then pings are not answered, or a client sending pings and reading nothing
        would make pongs pile up (RFC 6455 lets a pong answer only the latest ping)."""
        sock = socket_of(self.transport)
        return len(sock.dataBuffer) + sock._tempDataLen > sock.bufferSize

    def _write_control(self, event: Any) -> None:
        if self.websocket.state in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING):
            self.transport.write(self.websocket.send(event))  # type: ignore[union-attr]

    # -- as the STOMP protocol's transport ---------------------------------------------------

    def write(self, data: bytes) -> None:
        if data and self.websocket.state is ConnectionState.OPEN:
            self.transport.writeSequence((message_header(data), data))  # type: ignore[union-attr]

    def writeSequence(self, data: Sequence[bytes]) -> None:
        self.write(b"".join(data))

    def loseConnection(self) -> None:
        """Say goodbye with a Close message, then close once what is queued is written."""
        self.disconnecting = True
        if self.websocket.state is ConnectionState.OPEN:
            self._write_control(CloseConnection(code=1000))
        self.transport.loseConnection()  # type: ignore[union-attr]

    def abortConnection(self) -> None:
        self.transport.abortConnection()  # type: ignore[union-attr]

    def getPeer(self) -> Any:
        return self.transport.getPeer()  # type: ignore[union-attr]

    def getHost(self) -> Any:
        return self.transport.getHost()  # type: ignore[union-attr]

    def registerProducer(self, producer: IPushProducer, streaming: bool) -> None:
        self.transport.registerProducer(producer, streaming)  # type: ignore[union-attr]

    def unregisterProducer(self) -> None:
        self.transport.unregisterProducer()  # type: ignore[union-attr]

    def pauseProducing(self) -> None:
        self.transport.pauseProducing()  # type: ignore[union-attr]

    def resumeProducing(self) -> None:
        self.transport.resumeProducing()  # type: ignore[union-attr]


class WebSocketFactory(Factory):
    """Makes the channel and its STOMP protocol of each WebSocket connection."""

    def __init__(self, server: ListeningServer, make_stomp: Callable[[], Protocol]) -> None:
        self.server = server
        self.make_stomp = make_stomp
        origins = server.websocket.allowedorigins.split(",")
        self.allowed_origins = frozenset(
            o.strip().rstrip("/").lower() for o in origins if o.strip()
        )

    def buildProtocol(self, addr: object) -> WebSocketChannel:
        server = self.server
        return WebSocketChannel(
            self.make_stomp(),
            server.bounds.maxconnectsize,
            server.bounds.connecttimeout,
            self.allowed_origins,
            server.reactor.callLater,
            server.sockets,
        )
