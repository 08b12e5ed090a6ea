"""Wiring: config -> the message server's core on the Twisted runtime -> the STOMP listener."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import structlog
from twisted.internet import defer
from twisted.internet.address import IPv4Address
from twisted.internet.interfaces import IListeningPort

from wiremq.config.groups import (
    CleanupIntervalSettings,
    EgressSettings,
    IdleDestinationSettings,
    JournalSettings,
    ListenerSettings,
    LiveBufferSettings,
    ServerSettings,
    SlowSubscriberSettings,
)
from wiremq.config.xmlconfig import ServerConfig
from wiremq.modules.cleanup import CatchUp, Periodic, StoreCleanup
from wiremq.modules.core import Core
from wiremq.modules.egress import Outbox
from wiremq.modules.flow.egress_queues import queue_limits
from wiremq.modules.flow.slowness import SlowSubscriberPolicy, Verdict, egress_load_factor
from wiremq.modules.journal.schema import PERSQUEUE, TOPICS
from wiremq.modules.stomp.frames import ProtocolError
from wiremq.server.protocol import StompFactory, StompProtocol
from wiremq.server.runtime import TwistedRuntime
from wiremq.server.stores import open_store
from wiremq.server.writer import abort_if_open
from wiremq.stores.api import QUEUE_PREFIX, TOPIC_PREFIX, MessageStore

log = structlog.get_logger("wiremq.server")

JOURNAL_FOLDER = "journal"  # in the data folder


class WiremqServer:
    """One message server: its core, its store and its STOMP listener."""

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
        self.store: MessageStore | None = None
        self.core: Core | None = None
        self.cleanups: list[StoreCleanup | Periodic | CatchUp] = []
        self.server = ServerSettings.read(settings, "Server")
        self.listener = ListenerSettings.read(settings, "StompListener")
        self.slow_subscribers = SlowSubscriberSettings.read(settings, "SlowSubscriber")
        egress = EgressSettings.read(settings, "ClientEgress")
        self.egress_limits = queue_limits(egress)
        self.transmit_bound = egress.tcptransmitbytes

    @property
    def port(self) -> int:
        assert self.listening is not None
        return int(cast(IPv4Address, self.listening.getHost()).port)

    def start(self) -> int:
        """Open the store, restore what it holds, start listening; returns the bound port."""
        data = Path(self.server.datadir)
        data.mkdir(parents=True, exist_ok=True)
        self.store = open_store(self.settings)
        try:
            journal = data / JOURNAL_FOLDER
            self.core = Core(
                self.settings,
                self.runtime,
                self.store,
                self.config.pipelines,
                journal if JournalSettings.read(self.settings, "Journal").enabled else None,
            )
            self.core.restore()
            self.listening = self.reactor.listenTCP(
                self.listener.port, StompFactory(self), interface=self.listener.host
            )
        except BaseException:
            self.runtime.stop_threads()
            self.store.close()
            self.store = None
            raise
        self._start_cleanups(self.core)
        self.core.journal.open()
        log.info(
            "server.listening",
            host=self.listener.host,
            port=self.port,
            data=str(data.resolve()),
            config=self.config.path or "defaults",
        )
        return self.port

    def _start_cleanups(self, core: Core) -> None:
        settings, runtime = self.settings, self.runtime
        destinations = core.destinations
        persistence = core.persistence
        assert persistence is not None

        self.cleanups = [
            CatchUp(runtime, settings, persistence),
            StoreCleanup(
                PERSQUEUE,
                QUEUE_PREFIX,
                "PersQueueFileStore",
                runtime,
                settings,
                persistence,
                core.expiry,
                core.journal,
            ),
            StoreCleanup(
                TOPICS,
                TOPIC_PREFIX,
                "TopicFileStore",
                runtime,
                settings,
                persistence,
                core.expiry,
                core.journal,
            ),
            Periodic(
                runtime,
                lambda: CleanupIntervalSettings.read(settings, "VolQueueStoreImpl").cleanupinterval,
                destinations.sweep_volatile,
            ),
            Periodic(
                runtime,
                lambda: LiveBufferSettings.read(settings, "DestinationManager").qlbcleanupinterval,
                destinations.sweep_live_buffers,
            ),
            Periodic(
                runtime,
                lambda: LiveBufferSettings.read(settings, "DestinationManager").tlbcleanupinterval,
                destinations.sweep_topic_buffers,
            ),
            Periodic(
                runtime,
                lambda: IdleDestinationSettings.read(settings, "DestinationManager").idletimetolive,
                destinations.sweep_idle,
            ),
            Periodic(
                runtime,
                lambda: SlowSubscriberSettings.read(settings, "SlowSubscriber").checkinterval,
                self.check_slow_subscribers,
            ),
        ]
        if self.server.packinterval > 0:
            self.cleanups.append(Periodic(runtime, lambda: self.server.packinterval, self.pack))
        for cleanup in self.cleanups:
            cleanup.start()

    def pack(self) -> None:
        """Pack the store on a worker of its own: commits go on meanwhile."""
        store = self.store
        if store is None:
            return
        started = time.monotonic()
        self.runtime.worker("pack").submit(
            store.pack,
            lambda _: log.info("store.packed", seconds=round(time.monotonic() - started, 3)),
            lambda error: log.error("store.pack_failed", error=str(error)),
        )

    def check_slow_subscribers(self) -> None:
        """Events before (and, when configured, when) slow subscribers are disconnected."""
        policy = SlowSubscriberPolicy.of(
            SlowSubscriberSettings.read(self.settings, "SlowSubscriber")
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
        """The core's flow-control state plus each connection's socket-side view."""
        assert self.core is not None
        state = self.core.flow_state()
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
        """Stop listening, close every connection, let store work finish, close the store."""
        waits: list[defer.Deferred[Any]] = []
        for connection in list(self.connections):
            connection.on_lost = defer.Deferred()
            waits.append(connection.on_lost)
            transport = connection.transport
            transport.loseConnection()  # type: ignore[union-attr]
            # A client that does not read would keep its unsent frames, and us, forever.
            self.reactor.callLater(self.listener.closegrace, abort_if_open, transport)
        log.info("server.stopping", connections=len(waits))
        if self.listening is not None:
            waits.append(defer.maybeDeferred(self.listening.stopListening))
            self.listening = None
        yield defer.DeferredList(waits)
        for cleanup in self.cleanups:
            cleanup.stop()
        if self.core is not None:
            self.core.stopped()
        yield self.runtime.stop_workers()
        if self.store is not None:
            self.store.close()
            self.store = None
        statistics = (
            self.core.persistence.statistics() if self.core and self.core.persistence else {}
        )
        log.info("server.stopped", commits=statistics)
