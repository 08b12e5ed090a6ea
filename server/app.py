"""Wiring: config -> broker and chains -> STOMP listener on the reactor."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import structlog
from twisted.internet import defer
from twisted.internet.address import IPv4Address
from twisted.internet.interfaces import IListeningPort

from wiremq.config.xmlconfig import DOMAINS, ServerConfig
from wiremq.modules.broker import Broker
from wiremq.modules.catalog import build_chain
from wiremq.modules.egress import Outbox
from wiremq.modules.pipeline import ModuleContext
from wiremq.modules.stomp.codec import DecoderLimits
from wiremq.modules.stomp.session import SessionSettings
from wiremq.server.protocol import StompFactory, StompProtocol

log = structlog.get_logger("wiremq.server")


class WiremqServer:
    """One message server: a broker, its pipelines and its STOMP listener."""

    def __init__(self, config: ServerConfig, reactor: Any = None) -> None:
        if reactor is None:
            from twisted.internet import reactor as default_reactor

            reactor = default_reactor
        self.reactor = reactor
        self.config = config
        self.settings = settings = config.settings
        self.clock: Callable[[], float] = time.monotonic
        self.broker = Broker(settings)
        self.outbox = Outbox()
        self.connections: set[StompProtocol] = set()
        self.listening: IListeningPort | None = None
        self.session_settings = SessionSettings(
            heartbeat_send_ms=settings.get_int("StompListener", "heartbeatsend"),
            heartbeat_receive_ms=settings.get_int("StompListener", "heartbeatreceive"),
            heartbeat_grace=settings.get_float("StompListener", "heartbeatgrace"),
            limits=DecoderLimits(
                max_body_bytes=settings.get_int("StompListener", "maxbodysize"),
                max_headers=settings.get_int("StompListener", "maxheaders"),
                max_header_bytes=settings.get_int("StompListener", "maxheaderlength"),
            ),
        )
        for domain in DOMAINS:
            self.broker.chains[domain] = build_chain(
                domain,
                config.pipelines[domain],
                lambda domain=domain: ModuleContext(self.broker, settings, domain, self.call_soon),
            )

    def call_soon(self, function: Callable[[], None]) -> None:
        """Run ``function`` on the next reactor turn, then write what it queued."""
        self.reactor.callLater(0, self._run_and_flush, function)

    def _run_and_flush(self, function: Callable[[], None]) -> None:
        function()
        self.outbox.flush()

    @property
    def port(self) -> int:
        assert self.listening is not None
        return int(cast(IPv4Address, self.listening.getHost()).port)

    def start(self) -> int:
        """Create the data folder and start listening; returns the bound port."""
        data = Path(self.settings.get_str("Server", "datadir"))
        data.mkdir(parents=True, exist_ok=True)
        self.listening = self.reactor.listenTCP(
            self.settings.get_int("StompListener", "port"),
            StompFactory(self),
            interface=self.settings.get_str("StompListener", "host"),
        )
        log.info(
            "server.listening",
            host=self.settings.get_str("StompListener", "host"),
            port=self.port,
            data=str(data.resolve()),
            config=self.config.path or "defaults",
        )
        return self.port

    def stop(self) -> defer.Deferred[None]:
        """Stop listening and close every connection; fires when all are closed."""
        waits: list[defer.Deferred[Any]] = []
        for connection in list(self.connections):
            connection.on_lost = defer.Deferred()
            waits.append(connection.on_lost)
            connection.transport.loseConnection()  # type: ignore[union-attr]
        log.info("server.stopping", connections=len(waits))
        if self.listening is not None:
            waits.append(defer.maybeDeferred(self.listening.stopListening))
        return defer.DeferredList(waits).addCallback(lambda _: None)
