"""The socket reader: one Twisted protocol per connection, feeding the client connection."""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any, cast

import structlog
from twisted.internet import tcp
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall
from twisted.internet.protocol import Factory, Protocol
from twisted.python.failure import Failure

from wiremq.config.groups import (
    ClientBounds,
    ListenerSettings,
    SlowSubscriberSettings,
    WebSocketSettings,
)
from wiremq.modules.client.egress import Egress, Outbox
from wiremq.modules.core import Core
from wiremq.modules.flow.egress_queues import QueueLimits
from wiremq.modules.flow.slowness import Verdict
from wiremq.server.descriptors import SocketGate
from wiremq.server.runtime import TwistedRuntime
from wiremq.server.tls import certificate_name
from wiremq.server.writer import SocketWriter, socket_of

log = structlog.get_logger("wiremq.server")


class ListeningServer(typing.Protocol):
    """What the protocols of the connections a server accepts use of it
    (``app.WiremqServer``)."""

    reactor: Any
    clock: Callable[[], float]
    outbox: Outbox
    runtime: TwistedRuntime
    core: Core | None
    connections: set[StompProtocol]  # those open
    listener: ListenerSettings
    bounds: ClientBounds
    websocket: WebSocketSettings
    slow_subscribers: SlowSubscriberSettings
    egress_limits: tuple[QueueLimits, ...]
    transmit_bound: int
    sockets: SocketGate  # the STOMP and WebSocket listeners' sockets
    fenced: Callable[[], bool] | None  # HA: whether this node's lease may be gone


class StompProtocol(Protocol):
    """Hands bytes to the client's connection; writes happen once per burst via the outbox."""

    def __init__(self, server: ListeningServer, socket: bool = False) -> None:
        """``socket``: whether this protocol is its socket's (counted in the server's
        ``sockets``), rather than one over a WebSocket channel (which counts)."""
        self.server = server
        self.socket = socket
        self._heartbeat_call: IDelayedCall | None = None
        self.on_lost: Deferred[None] | None = None  # fired by connectionLost (server shutdown)

    def connectionMade(self) -> None:
        """``self.transport`` is the socket's, or a TLS or WebSocket one over it: frames are
        written to it; the socket itself is tuned, paused and bounded."""
        server = self.server
        if self.socket:
            server.sockets.opened()
        transport = self.transport
        sock = socket_of(transport)
        sock.setTcpNoDelay(True)
        sock.setTcpKeepAlive(True)  # a peer gone without a word is noticed
        peer = cast(IPv4Address, sock.getPeer())
        self.egress = Egress(server.outbox, server.egress_limits)
        self.writer = SocketWriter(
            transport,
            self.egress,
            server.transmit_bound,
            server.clock,
            server.listener.closegrace,
            server.slow_subscribers.window,
            server.fenced,
        )
        assert server.core is not None  # made before any listener opens
        self.client = server.core.connect(
            self.egress,
            f"{peer.host}:{peer.port}",
            TransportReader(sock),
            server.clock(),
            lambda: certificate_name(transport),
        )
        self.client.on_connected = self._connected
        self.slow_verdict = Verdict.OK
        server.connections.add(self)

    def dataReceived(self, data: bytes) -> None:
        client = self.client
        runtime = self.server.runtime
        runtime.reading = True
        try:
            client.data_received(data, self.server.clock())
        finally:
            runtime.after_read()

    def _connected(self) -> None:
        """CONNECTED is on its way: heart-beats start."""
        self._schedule_heartbeat(self.client.tick(self.server.clock()))

    def _schedule_heartbeat(self, deadline: float | None) -> None:
        if deadline is not None:
            delay = max(0.0, deadline - self.server.clock())
            self._heartbeat_call = self.server.reactor.callLater(delay, self._heartbeat)

    def _heartbeat(self) -> None:
        """Send a heart-beat or drop a silent client, and come back when the next is due.

        A check that raises closes the connection: left open, its heart-beats would no
        longer be checked, and a silent client would hold it forever."""
        self._heartbeat_call = None
        try:
            deadline = self.client.tick(self.server.clock())
        except Exception as error:
            log.exception(
                "heartbeat.failed", session=self.client.session.session_id, error=str(error)
            )
            self.transport.abortConnection()  # type: ignore[union-attr]
            return
        self._schedule_heartbeat(deadline)
        self.server.outbox.flush()

    def connectionLost(self, reason: Failure | None = None) -> None:
        if self._heartbeat_call is not None and self._heartbeat_call.active():
            self._heartbeat_call.cancel()
        self.writer.stopProducing()
        self.client.connection_lost()
        self.server.connections.discard(self)
        if self.socket:
            self.server.sockets.closed()
        self.server.outbox.flush()
        if self.on_lost is not None:
            self.on_lost.callback(None)


class TransportReader:
    """Stops and restarts reading a connection's socket: the producer side of flow control."""

    def __init__(self, transport: tcp.Connection) -> None:
        self.transport = transport

    def pause(self) -> None:
        self.transport.pauseProducing()

    def resume(self) -> None:
        self.transport.resumeProducing()


class StompFactory(Factory):
    def __init__(self, server: ListeningServer) -> None:
        self.server = server

    def buildProtocol(self, addr: object) -> StompProtocol:
        return StompProtocol(self.server, socket=True)
