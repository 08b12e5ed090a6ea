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
from wiremq.modules.cleanup import Periodic, StoreCleanup, SweepStep
from wiremq.modules.egress import Outbox
from wiremq.modules.flow.egress_queues import QueueLimits
from wiremq.modules.flow.slowness import SlowSubscriberPolicy, Verdict, egress_load_factor
from wiremq.modules.persistence import Persistence
from wiremq.modules.pipeline import P2P, PUBSUB, ModuleContext
from wiremq.modules.stomp.codec import DecoderLimits
from wiremq.modules.stomp.frames import ProtocolError
from wiremq.modules.stomp.session import SessionSettings
from wiremq.server.protocol import StompFactory, StompProtocol
from wiremq.server.runtime import TwistedRuntime
from wiremq.server.stores import OpenStores
from wiremq.server.writer import CLOSE_GRACE, abort_if_open
from wiremq.stores.model import grouped
from wiremq.stores.records import StoredMessage
from wiremq.stores.results import SweepResult
from wiremq.stores.topicstore import TopicStore

log = structlog.get_logger("wiremq.server")


class WiremqServer:
    """One message server: a broker, its pipelines, its stores and its STOMP listener."""

    def __init__(self, config: ServerConfig, reactor: Any = None) -> None:
        if reactor is None:
            from twisted.internet import reactor as default_reactor

            reactor = default_reactor
        self.reactor = reactor
        self.config = config
        self.settings = settings = config.settings
        self.clock: Callable[[], float] = time.monotonic
        self.outbox = Outbox()
        self.runtime = TwistedRuntime(reactor, self.outbox)
        self.connections: set[StompProtocol] = set()
        self.listening: IListeningPort | None = None
        self.stores: OpenStores | None = None
        self.cleanups: list[StoreCleanup | Periodic] = []
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
        self.broker = Broker(settings, self.runtime)
        depth = settings.get_int("ClientEgress", "maxdepth")
        burst = settings.get_int("ClientEgress", "minmsgburst")
        self.egress_limits = (
            *(QueueLimits(depth, burst) for _ in range(4)),  # C-1, D-3, D-2, D-1
            QueueLimits(depth, settings.get_int("ClientEgress", "g1minmsgburst")),  # G-1
        )
        self.transmit_bound = settings.get_int("ClientEgress", "tcptransmitbytes")

    @property
    def port(self) -> int:
        assert self.listening is not None
        return int(cast(IPv4Address, self.listening.getHost()).port)

    def start(self) -> int:
        """Open the stores, restore what they hold, start listening; returns the bound port."""
        settings = self.settings
        data = Path(settings.get_str("Server", "datadir"))
        data.mkdir(parents=True, exist_ok=True)
        self.stores = OpenStores(settings)
        try:
            persistence = Persistence(
                self.stores.queues, self.stores.topics, self.runtime, settings
            )
            self.broker.attach(persistence)
            for domain in DOMAINS:
                self.broker.chains[domain] = build_chain(
                    domain,
                    self.config.pipelines[domain],
                    lambda domain=domain: ModuleContext(self.broker, settings, domain),
                )
            self.broker.restore()
            self.listening = self.reactor.listenTCP(
                settings.get_int("StompListener", "port"),
                StompFactory(self),
                interface=settings.get_str("StompListener", "host"),
            )
        except BaseException:
            self.runtime.stop_threads()
            self.stores.close()
            self.stores = None
            raise
        self._start_cleanups(persistence)
        log.info(
            "server.listening",
            host=settings.get_str("StompListener", "host"),
            port=self.port,
            data=str(data.resolve()),
            config=self.config.path or "defaults",
        )
        return self.port

    def _start_cleanups(self, persistence: Persistence) -> None:
        settings, runtime, broker = self.settings, self.runtime, self.broker

        def expired_in(domain: str) -> Callable[[list[StoredMessage]], None]:
            """What a sweep of ``domain``'s store does with the expired messages it removed."""

            def expired(removed: list[StoredMessage]) -> None:
                by_destination = grouped((stored.destination, stored) for stored in removed)
                for destination, messages in by_destination.items():
                    broker.expiry.expired_stored(destination, messages)
                broker.store_changed(domain, by_destination)

            return expired

        def collected(removed: list[StoredMessage]) -> None:
            log.debug("topics.collected", messages=len(removed))
            broker.store_changed(PUBSUB, {m.destination for m in removed})

        queues, topics = persistence.queues, persistence.topics
        self.cleanups = [
            StoreCleanup(
                "persqueue",
                runtime,
                persistence.queue_worker,
                settings,
                "PersQueueFileStore",
                [(_sweep(queues.sweep_expired), expired_in(P2P))],
            ),
            StoreCleanup(
                "topics",
                runtime,
                persistence.topic_worker,
                settings,
                "TopicFileStore",
                [
                    (_sweep(topics.sweep_expired), expired_in(PUBSUB)),
                    (_collect(topics), collected),
                ],
            ),
            Periodic(
                runtime,
                lambda: settings.get_float("VolQueueStoreImpl", "cleanupinterval"),
                broker.sweep_volatile,
            ),
            Periodic(
                runtime,
                lambda: settings.get_float("DestinationManager", "qlbcleanupinterval"),
                broker.sweep_live_buffers,
            ),
            Periodic(
                runtime,
                lambda: settings.get_float("DestinationManager", "tlbcleanupinterval"),
                broker.sweep_topic_buffers,
            ),
            Periodic(
                runtime,
                lambda: settings.get_float("SlowSubscriber", "checkinterval"),
                self.check_slow_subscribers,
            ),
        ]
        if settings.get_float("Server", "packinterval") > 0:
            self.cleanups.append(
                Periodic(runtime, lambda: settings.get_float("Server", "packinterval"), self.pack)
            )
        for cleanup in self.cleanups:
            cleanup.start()

    def pack(self) -> None:
        """Pack the databases on a worker of their own: commits go on meanwhile."""
        stores = self.stores
        if stores is None:
            return
        started = time.monotonic()
        self.runtime.worker("pack").submit(
            stores.pack,
            lambda _: log.info("store.packed", seconds=round(time.monotonic() - started, 3)),
            lambda error: log.error("store.pack_failed", error=str(error)),
        )

    def check_slow_subscribers(self) -> None:
        """Events before (and, when configured, when) slow subscribers are disconnected."""
        settings = self.settings
        policy = SlowSubscriberPolicy(
            warn_share=settings.get_float("SlowSubscriber", "warnshare"),
            disconnect_share=settings.get_float("SlowSubscriber", "disconnectshare"),
            disconnect_enabled=settings.get("SlowSubscriber", "disconnect") is True,
            disconnect_load_factor=settings.get_float("SlowSubscriber", "loadfactor"),
        )
        connections = list(self.connections)
        load = egress_load_factor(c.egress.queues for c in connections)
        for connection in connections:
            share = connection.writer.slowness.share()
            verdict = policy.verdict(share, load)
            if verdict is connection.slow_verdict:
                continue
            connection.slow_verdict = verdict
            session = connection.client.session
            if verdict is Verdict.OK:
                log.info("client.slow_cleared", session=session.session_id, share=share)
            elif verdict is Verdict.WARN:
                log.warning("client.slow", session=session.session_id, share=share, load=load)
            else:
                log.warning(
                    "client.slow_disconnected", session=session.session_id, share=share, load=load
                )
                connection.client.drop(
                    ProtocolError("slow subscriber", "disconnected for falling behind")
                )
        self.outbox.flush()

    def flow_state(self) -> dict[str, Any]:
        """The broker's flow-control state plus each connection's socket-side view."""
        state = self.broker.flow_state()
        connections = list(self.connections)
        state["egress_load_factor"] = egress_load_factor(c.egress.queues for c in connections)
        state["sockets"] = [
            {
                "session": c.client.session.session_id,
                "blocked": c.writer.paused,
                "slowness": c.writer.slowness.share(),
                "verdict": c.slow_verdict.name,
            }
            for c in connections
        ]
        return state

    @defer.inlineCallbacks
    def stop(self) -> Any:
        """Stop listening, close every connection, let store work finish, close the stores."""
        waits: list[defer.Deferred[Any]] = []
        for connection in list(self.connections):
            connection.on_lost = defer.Deferred()
            waits.append(connection.on_lost)
            transport = connection.transport
            transport.loseConnection()  # type: ignore[union-attr]
            # A client that does not read would keep its unsent frames, and us, forever.
            self.reactor.callLater(CLOSE_GRACE, abort_if_open, transport)
        log.info("server.stopping", connections=len(waits))
        if self.listening is not None:
            waits.append(defer.maybeDeferred(self.listening.stopListening))
        yield defer.DeferredList(waits)
        for cleanup in self.cleanups:
            cleanup.stop()
        yield self.runtime.stop_workers()
        if self.stores is not None:
            self.stores.close()
            self.stores = None
        log.info("server.stopped", commits=self.broker.commit_statistics())


def _sweep(sweep_expired: Callable[..., SweepResult]) -> SweepStep:
    return lambda now_ms, size, seconds: sweep_expired(
        now_ms, max_messages=size, max_seconds=seconds, transaction_size=size
    )


def _collect(topics: TopicStore) -> SweepStep:
    return lambda now_ms, size, seconds: topics.collect_garbage(
        max_messages=size, max_seconds=seconds, transaction_size=size
    )
