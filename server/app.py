"""Wiring: config -> the message server's core on the Twisted runtime -> the STOMP listener."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Protocol, cast

import psutil
import structlog
from twisted.internet import defer
from twisted.internet.address import IPv4Address
from twisted.internet.interfaces import IListeningPort

from wiremq.config.groups import (
    CleanupIntervalSettings,
    ClientBounds,
    DiskSpaceSettings,
    EgressSettings,
    IdleDestinationSettings,
    JournalSettings,
    ListenerSettings,
    LiveBufferSettings,
    SecuritySettings,
    ServerSettings,
    SettingsGroup,
    SlowSubscriberSettings,
    TlsSettings,
    WalSettings,
    WebSocketSettings,
)
from wiremq.config.xmlconfig import ConfigError, ServerConfig
from wiremq.modules.client.egress import Outbox
from wiremq.modules.core import Core
from wiremq.modules.flow.disk import DiskSpace
from wiremq.modules.flow.egress_queues import queue_limits
from wiremq.modules.flow.slowness import SlowSubscriberPolicy, Verdict, egress_load_factor
from wiremq.modules.journal.schema import PERSQUEUE, TOPICS
from wiremq.modules.persistence.cleanup import CatchUp, Periodic, StoreCleanup
from wiremq.modules.stomp.frames import ProtocolError
from wiremq.server.descriptors import SocketGate, TooFewDescriptors, fit_descriptors
from wiremq.server.logging import configure_logging
from wiremq.server.protocol import StompFactory, StompProtocol
from wiremq.server.runtime import TwistedRuntime
from wiremq.server.stores import open_store, watched
from wiremq.server.tls import TlsContextFactory
from wiremq.server.websocket import WebSocketFactory
from wiremq.server.writer import abort_if_open
from wiremq.stores.api import QUEUE_PREFIX, TOPIC_PREFIX, MessageStore
from wiremq.stores.messagestore import RecordLog

log = structlog.get_logger("wiremq.server")


class HaNodeState(Protocol):
    """What a server (and its console) asks of its node of an HA pair (``ha.HaNode``)."""

    def state(self) -> dict[str, Any]: ...


JOURNAL_FOLDER = "journal"  # in the data folder


class ResidentMemory:
    """The server process's resident memory (RSS), in bytes: MemWatch's measured figure.

    Reading it opens /proc/self/statm; a reading that fails (no descriptor left, say)
    gives the last figure, with one warning until a reading succeeds again, instead of
    a traceback at every sample."""

    def __init__(self) -> None:
        self.process = psutil.Process()
        self.last = 0
        self.failing = False

    def __call__(self) -> int:
        try:
            self.last = int(self.process.memory_info().rss)
        except (OSError, psutil.Error) as error:
            if not self.failing:
                self.failing = True
                log.warning("memory.unreadable", error=str(error), keeping=self.last)
            return self.last
        if self.failing:
            self.failing = False
            log.info("memory.readable", rss=self.last)
        return self.last


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
        wal = WalSettings.read(settings, "WriteAheadLog")
        self.server = ServerSettings.read(settings, "Server")
        self.runtime = TwistedRuntime(
            reactor,
            self.outbox,
            wal.syncpoll,
            wal.syncpollholdoff,
            wal.syncpollpressure,
            self.server.replypoll,
        )
        self.connections: set[StompProtocol] = set()
        self.listening: dict[str, IListeningPort] = {}  # by scheme: stomp, stomp+ssl, ws, wss
        self.listeners: list[IListeningPort] = []  # others (the console): closed at stop
        self.store: MessageStore | None = None
        self.core: Core | None = None
        self.cleanups: list[StoreCleanup | Periodic | CatchUp] = []  # periodic tasks
        self.listener = ListenerSettings.read(settings, "StompListener")
        self.bounds = ClientBounds.read(settings, "StompListener")
        self.websocket = WebSocketSettings.read(settings, "WebSocketListener")
        self.slow_subscribers = SlowSubscriberSettings.read(settings, "SlowSubscriber")
        egress = EgressSettings.read(settings, "ClientEgress")
        self.egress_limits = queue_limits(egress)
        self.transmit_bound = egress.tcptransmitbytes
        self.started_at = time.time()
        self.resident_memory = ResidentMemory()
        # The sockets of the STOMP and WebSocket listeners (made again at start, once
        # maxconnections fits the descriptors: ``fit_descriptors``).
        self.sockets = SocketGate(self.bounds.maxconnections + self.bounds.maxpendingconnections)
        self.ha: HaNodeState | None = None  # this server's node of an HA pair (server/ha.py)
        # In HA mode: whether the lease may be gone (socket writers then write nothing).
        self.fenced: Callable[[], bool] | None = None
        settings.on_change(self._settings_changed)

    def _settings_changed(self, groups: frozenset[str]) -> None:
        """Parameters changed while the server runs (the core follows on its own): the log
        level, and the periodic tasks' intervals."""
        if "Server" in groups:
            server = self.server = ServerSettings.read(self.settings, "Server")
            configure_logging(server.loglevel, server.logformat)
            self.runtime.reply_poll = server.replypoll
        if "WriteAheadLog" in groups and self.ha is None:  # HA: no local log to poll around
            wal = WalSettings.read(self.settings, "WriteAheadLog")
            self.runtime.sync_poll = wal.syncpoll
            self.runtime.sync_poll_holdoff = wal.syncpollholdoff
            self.runtime.sync_poll_pressure = wal.syncpollpressure
        for cleanup in self.cleanups:
            cleanup.interval_changed()

    @property
    def port(self) -> int:
        """The plain STOMP port."""
        return self.ports["stomp"]

    @property
    def ports(self) -> dict[str, int]:
        """The port of each listener, by scheme (stomp, stomp+ssl, ws, wss)."""
        return {
            scheme: int(cast(IPv4Address, listening.getHost()).port)
            for scheme, listening in self.listening.items()
        }

    def start(
        self, record_log: RecordLog | None = None, client_name: str | None = None
    ) -> dict[str, int]:
        """Open the store, restore what it holds, start listening; returns the bound ports.
        ``record_log``, ``client_name``: in HA mode, the shared database's log and the name
        of this process's connections (``server/ha.py``)."""
        data = Path(self.server.datadir)
        data.mkdir(parents=True, exist_ok=True)
        disk = DiskSpace(self.settings, watched(self.settings))
        disk.check()  # on a full disk the reserve is given back first: the open may write
        self.store = open_store(self.settings, record_log, client_name)
        try:
            self._fit_descriptors()
            journal = data / JOURNAL_FOLDER
            self.core = Core(
                self.settings,
                self.runtime,
                self.store,
                self.config.pipelines,
                journal if JournalSettings.read(self.settings, "Journal").enabled else None,
                self.config.memory_levels,
                self.resident_memory,
                disk,
            )
            self.core.restore()
            self._listen()
        except BaseException:
            for listening in self.listening.values():
                listening.stopListening()
            self.listening = {}
            self.runtime.stop_threads()
            self.store.close()
            self.store = None
            raise
        self._start_cleanups(self.core)
        self.core.journal.open()
        users = self.core.users
        log.info(
            "server.listening",
            host=self.listener.host,
            ports=self.ports,
            data=str(data.resolve()),
            config=self.config.path or "defaults",
            users=len(users) if users.configured else None,
        )
        if not users.configured:
            log.warning(
                "security.open",
                detail=f"no users file ({users.file.path}): every client may do everything",
            )
        return self.ports

    def _fit_descriptors(self) -> None:
        """Make the connections fit the descriptors the process may open (see
        ``server/descriptors.py``), before anything listens; the gate of the STOMP and
        WebSocket listeners at what is in force then."""
        try:
            fit = fit_descriptors(self.settings)
        except TooFewDescriptors as error:
            raise ConfigError("file descriptors", str(error)) from None
        if fit.raised_from is not None:
            log.info("descriptors.raised", soft_limit=fit.limit, was=fit.raised_from)
        if fit.lowered is not None:
            log.warning(
                "descriptors.short",
                detail=fit.needs.advice(fit.limit, fit.hard),
                maxconnections_in_force=fit.lowered.connections,
                maxpendingconnections_in_force=fit.lowered.pending,
            )
        self.bounds = bounds = ClientBounds.read(self.settings, "StompListener")
        self.sockets = SocketGate(bounds.maxconnections + bounds.maxpendingconnections)

    def _listen(self) -> None:
        """Open the listeners that are on: STOMP over TCP and TLS, STOMP over WebSocket
        (ws:// and wss://); every TLS listener has the TLS group's certificate."""
        listener, websocket = self.listener, self.websocket
        tls: TlsContextFactory | None = None
        if listener.tlsport != -1 or websocket.tlsport != -1:
            tls = TlsContextFactory(
                TlsSettings.read(self.settings, "TLS"), self.config.path or "configuration"
            )
        stomp = StompFactory(self)
        web = WebSocketFactory(self, lambda: StompProtocol(self))
        for scheme, port, factory, host, secure in (
            ("stomp", listener.port, stomp, listener.host, False),
            ("stomp+ssl", listener.tlsport, stomp, listener.host, True),
            ("ws", websocket.port, web, websocket.host, False),
            ("wss", websocket.tlsport, web, websocket.host, True),
        ):
            if port == -1:
                continue
            if secure:
                listening = self.reactor.listenSSL(port, factory, tls, interface=host)
            else:
                listening = self.reactor.listenTCP(port, factory, interface=host)
            self.listening[scheme] = self.sockets.watch(listening)

    def _start_cleanups(self, core: Core) -> None:
        settings, runtime = self.settings, self.runtime
        core.memwatch.start()
        destinations = core.destinations
        persistence = core.persistence
        assert persistence is not None

        tasks: list[StoreCleanup | Periodic | CatchUp] = [
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
        ]
        # The periodic tasks: what sets each one's period (a field of typed settings, read at
        # the start of each wait and when parameters change), and what each does.
        volqueue = partial(CleanupIntervalSettings.read, settings, "VolQueueStoreImpl")
        live_buffers = partial(LiveBufferSettings.read, settings, "DestinationManager")
        idle = partial(IdleDestinationSettings.read, settings, "DestinationManager")
        slow = partial(SlowSubscriberSettings.read, settings, "SlowSubscriber")
        security = partial(SecuritySettings.read, settings, "Security")
        disk = partial(DiskSpaceSettings.read, settings, "DiskSpace")
        for group, period, action in (
            (volqueue, "cleanupinterval", destinations.sweep_volatile),
            (live_buffers, "qlbcleanupinterval", destinations.sweep_live_buffers),
            (live_buffers, "tlbcleanupinterval", destinations.sweep_topic_buffers),
            (idle, "idletimetolive", destinations.sweep_idle),
            (slow, "checkinterval", self.check_slow_subscribers),
            (security, "usersfilecheckinterval", core.follow_users),
            (disk, "checkinterval", core.flow.disk.check),
        ):
            tasks.append(Periodic(runtime, partial(_period, group, period), action))
        if self.server.packinterval > 0:
            tasks.append(Periodic(runtime, lambda: self.server.packinterval, self.pack))
        for task in tasks + self.cleanups:
            task.start()
        self.cleanups = tasks + self.cleanups

    def add_task(self, task: Periodic) -> None:
        """A periodic task that runs while the server does (the console's sampler): started
        with the server (now, if it runs) and stopped with it."""
        self.cleanups.append(task)
        if self.core is not None:
            task.start()

    def pack(self) -> None:
        """Pack the store on a worker of its own: commits go on meanwhile. A pack first
        copies the live messages: it waits while the disk has not the room for them."""
        store = self.store
        if store is None or self.core is None:
            return
        live = store.totals(QUEUE_PREFIX)[1] + store.totals(TOPIC_PREFIX)[1]
        if not self.core.flow.disk.room_for(live):
            log.info("store.pack_postponed", live_bytes=live, reason="not enough free disk")
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

    def flow_state(self, destinations: bool = True, busiest: int | None = None) -> dict[str, Any]:
        """The core's flow-control state plus each connection's socket-side view (without
        each destination's: ``destinations`` False; the ``busiest`` alone: ``Core.flow_state``)."""
        assert self.core is not None
        state = self.core.flow_state(destinations, busiest)
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
        memory = state["memory"]  # MemWatch's figures
        assert isinstance(memory, dict)
        memory["rss_bytes"] = self.resident_memory()
        state["server"] = {
            "started_at": self.started_at,
            "uptime": round(time.time() - self.started_at, 3),
            "stomp_port": self.port,
            "config": self.config.path,
            "sockets": self.sockets.state(),
        }
        if self.ha is not None:
            state["ha"] = self.ha.state()
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
        for listening in [*self.listening.values(), *self.listeners]:
            waits.append(defer.maybeDeferred(listening.stopListening))
        self.listening = {}
        self.listeners = []
        yield defer.DeferredList(waits)
        for cleanup in self.cleanups:
            cleanup.stop()
        if self.core is not None:
            self.core.memwatch.stop()
            self.core.stopped()
        yield self.runtime.stop_workers()
        if self.store is not None:
            self.store.close()
            self.store = None
        statistics = (
            self.core.persistence.statistics() if self.core and self.core.persistence else {}
        )
        log.info("server.stopped", commits=statistics)


def _period(group: Callable[[], SettingsGroup], name: str) -> float:
    """A periodic task's period in seconds: field ``name`` of the typed settings ``group``
    reads now."""
    return float(getattr(group(), name))
