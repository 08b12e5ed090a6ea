"""The message server's pieces, built and wired together: the composition root.

Nothing here runs anything: ``server/`` builds a ``Core`` on the Twisted
runtime and feeds it connections; the tests build one on a fake clock. Each
piece is handed only the others it uses; this is the one place that holds
them all.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import structlog

from wiremq.config.groups import (
    AdminSettings,
    ClientBounds,
    ListenerSettings,
    MemWatchSettings,
    ServerSettings,
    SpoolSettings,
    SweepSettings,
    TransactionMemorySettings,
    WorkPoolSettings,
    XASettings,
)
from wiremq.config.settings import Settings
from wiremq.config.xmlconfig import DOMAINS, LevelSpec, ModuleSpec, default_memory_levels
from wiremq.modules.client.connection import Admissions, ClientConnection, ConnectionServices
from wiremq.modules.client.core_session import Sessions
from wiremq.modules.client.egress import Egress
from wiremq.modules.client.reading import ReadControl
from wiremq.modules.destinations.copies import Copier
from wiremq.modules.destinations.deadletter import DeadLetters
from wiremq.modules.destinations.destination import Destination, DestinationServices
from wiremq.modules.destinations.durable import ReplayManager
from wiremq.modules.destinations.expiry import Expiry
from wiremq.modules.destinations.fates import FateCounts
from wiremq.modules.destinations.registry import Destinations
from wiremq.modules.destinations.subscription import UnackedLimit
from wiremq.modules.destinations.survey import Survey
from wiremq.modules.durables import DurableSubscriptions
from wiremq.modules.flow.control import FlowControl
from wiremq.modules.flow.disk import DiskSpace
from wiremq.modules.flow.egress_queues import WORK_UNIT
from wiremq.modules.flow.spool import Spool
from wiremq.modules.flow.unfinished import UnfinishedFrames
from wiremq.modules.ids import Ids
from wiremq.modules.journal.recorder import Journal, RecordingJournal
from wiremq.modules.journal.schema import SERVER_STOPPED
from wiremq.modules.memory.memwatch import MemWatch
from wiremq.modules.memory.workpool import WorkPool, WorkPools
from wiremq.modules.operations import Operations
from wiremq.modules.persistence.store import Persistence
from wiremq.modules.pipeline.catalog import build_chain, build_memory_levels
from wiremq.modules.pipeline.chain import ModuleContext, Pipelines
from wiremq.modules.pipeline.transaction_manager import TransactionManager
from wiremq.modules.pipeline.xa import PREPARED_AREA, XAController
from wiremq.modules.publisher import Publisher
from wiremq.modules.runtime import Runtime
from wiremq.modules.security.authentication import Authenticator
from wiremq.modules.security.users import Users, UsersFile
from wiremq.modules.stomp.session import SessionSettings
from wiremq.stores.api import QUEUE_PREFIX, TOPIC_PREFIX, MessageStore
from wiremq.stores.volqueue import VolQueueStore

log = structlog.get_logger("wiremq.core")


class Core:
    """Every piece of one message server (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        runtime: Runtime,
        store: MessageStore | None,
        pipelines: dict[str, list[ModuleSpec]],
        journal_folder: Path | None = None,
        memory_levels: list[LevelSpec] | None = None,
        measure_memory: Callable[[], int] | None = None,
        disk: DiskSpace | None = None,
    ) -> None:
        """``journal_folder``: where the audit journal is written (none: not written);
        ``memory_levels``: MemWatch's (None: the manual's); ``measure_memory``: the
        process's resident bytes (None: MemWatch goes by its estimate); ``disk``: the
        free-disk watermark of the stores' filesystems (None: none)."""
        self.settings = settings
        self.runtime = runtime
        self.store = store
        self.ids = Ids()
        self.pipelines = Pipelines()
        destinations: list[Destinations] = []  # made below: the flow control asks it later
        self.flow = FlowControl(
            settings, lambda domain: destinations[0].blocking_producers(domain), disk
        )
        self.journal = (
            RecordingJournal(settings, runtime, journal_folder, self.flow)
            if journal_folder is not None
            else Journal()
        )
        self.persistence = Persistence(store, runtime, settings) if store is not None else None
        self.copier = Copier(settings, runtime.now_ms)
        self.fates = FateCounts()
        self.dead_letters = DeadLetters(
            settings,
            self.persistence,
            self.pipelines.submit,
            self.journal,
            self.copier,
            self.fates,
        )
        self.expiry = Expiry(settings, self.dead_letters, self.journal, self.fates)
        self.replays = ReplayManager(settings, runtime)
        if self.persistence is not None:
            self.replays.attach(self.persistence, self.expiry)
        self.unacked = UnackedLimit(
            SpoolSettings.read(settings, "MessageSpool").maxdeliveredunacked, runtime
        )
        self.volatile = VolQueueStore()
        memwatch = MemWatchSettings.read(settings, "MemWatch")
        self.pools = WorkPools(
            *(
                WorkPool(
                    group,
                    WorkPoolSettings.read(settings, group),
                    memwatch.messagethreshold,
                    runtime,
                )
                for group in ("QueueThreadPool", "TopicThreadPool")
            )
        )
        self.destinations = Destinations(
            DestinationServices(
                settings,
                runtime,
                self.flow,
                self.persistence,
                self.expiry,
                self.dead_letters,
                self.unacked,
                self.replays,
                self.volatile,
                self.journal,
                self.pools,
                self.fates,
            )
        )
        destinations.append(self.destinations)
        self.survey = Survey(self.destinations)  # the console's rates and busiest
        self.spool = Spool(settings, self.flow, self.destinations, store)
        if self.persistence is not None:
            self.persistence.on_changed = self.spool.store_changed
            self.persistence.writer.on_segment = self.flow.disk.check
        bounds = ClientBounds.read(settings, "StompListener")
        self.transactions = TransactionManager(
            bounds.maxtransactions,
            TransactionMemorySettings.read(settings, "TransactionMemSizeManager"),
            runtime.monotonic,
            self.journal,
            self.persistence,
        )
        for domain in DOMAINS:
            self.pipelines.chains[domain] = build_chain(
                domain, pipelines[domain], lambda domain=domain: self.module_context(domain)
            )
        self.clients: set[ClientConnection] = set()
        self.users = Users(UsersFile(ServerSettings.read(settings, "Server").datadir))
        self.authenticator = Authenticator(self.users, settings, runtime, bounds.maxconnections)
        self._users_followed = self.users.generation  # the users file the clients follow
        self.memwatch = MemWatch(
            memwatch,
            build_memory_levels(
                memory_levels if memory_levels is not None else default_memory_levels(),
                memwatch,
                runtime,
            ),
            runtime,
            measure_memory,
            self.memory_estimate,
        )
        self.unfinished = UnfinishedFrames(bounds.maxunfinishedbytes, bounds.maxconnections)
        self.xa = XAController(
            XASettings.read(settings, "XATransactionController"),
            self.transactions,
            self.persistence,
            self.destinations,
            self.pipelines.submit,
            runtime,
        )
        self.sessions = Sessions(
            self.ids,
            self.pipelines,
            self.destinations,
            self.transactions,
            self.xa,
            self.persistence,
            self.journal,
            self.authenticator,
            bounds.maxsubscriptions,
        )
        self.connection_services = ConnectionServices(
            SessionSettings.of(ListenerSettings.read(settings, "StompListener")),
            runtime,
            self.ids,
            self.clients,
            Admissions(),
            self.unfinished,
            bounds,
            self.memwatch,
            self.sessions,
        )

        self.publisher = Publisher(
            self.destinations, self.pipelines.submit, self.ids.message, runtime.now_ms
        )
        self.durables = DurableSubscriptions(
            self.persistence,
            self.destinations,
            self.journal,
            lambda: AdminSettings.read(settings, "Admin").countlimit,
        )
        self.operations = Operations(
            self.destinations,
            self.clients,
            self.persistence,
            self.pipelines.submit,
            self.journal,
            self.copier,
        )
        settings.on_change(self._settings_changed)

    def _settings_changed(self, groups: frozenset[str]) -> None:
        """Parameters changed while the server runs: each piece that keeps typed settings
        reads them again (watermarks are judged again at once), and the store watermarks
        switched on meanwhile get the store's counts."""
        self.flow.configure()
        self.destinations.configure()
        self.replays.configure(self.settings)
        if self.store is not None:
            self.spool.store_changed([d.name for d in self.destinations])

    def follow_users(self) -> None:
        """Read the users file again if it changed; the connected clients' rights then
        follow it (``ClientConnection.rights_changed``). Without a users file (removed)
        everyone may do everything, as new connections find."""
        self.authenticator.refresh()
        users = self.users
        if users.generation == self._users_followed:
            return
        self._users_followed = users.generation
        if users.configured:
            for client in list(self.clients):
                client.rights_changed()

    def module_context(self, domain: str) -> ModuleContext:
        """What a module of ``domain``'s pipeline is given."""
        return ModuleContext(
            domain,
            self.settings,
            self.runtime,
            self.destinations,
            self.flow,
            self.transactions,
            self.spool,
            self.persistence,
            self.journal,
        )

    def restore(self) -> None:
        """Recreate the queues that have stored messages (read back on demand) and the
        destinations config.xml declares, count what the store holds in its watermarks,
        load the durable subscriptions and the prepared XA branches."""
        if self.persistence is None or self.store is None:
            self.destinations.restore({})
            return
        store = self.store
        held = {
            name: store.count(name)[0]
            for name in store.destinations(QUEUE_PREFIX)
            if name != PREPARED_AREA
        }
        queues = {name: count for name, count in held.items() if count}
        self.destinations.restore(queues)
        self.spool.store_changed([*queues, *store.destinations(TOPIC_PREFIX)])
        subscriptions = self.persistence.load_durable_subscriptions()
        self.xa.restore(store)
        log.info(
            "broker.restored",
            queues=len(queues),
            stored_queue_messages=store.totals(QUEUE_PREFIX)[0],
            durable_subscriptions=len(subscriptions),
        )

    def stopped(self) -> None:
        """The clients are gone and the server stops: the non-persistent messages still in
        the queues are lost (journaled), the journal writes what is left."""
        for queue in self.destinations.queues.values():
            lost = [m for m in queue.waiting() if not m.persistent]
            if lost:
                self.journal.discarded(lost, SERVER_STOPPED)
        self.journal.close()

    def connect(
        self,
        egress: Egress,
        peer: str,
        reader: ReadControl,
        now: float,
        certificate: Callable[[], str | None] | None = None,
    ) -> ClientConnection:
        """A new client connection (``certificate``: see ``ClientConnection``)."""
        return ClientConnection(self.connection_services, egress, peer, reader, now, certificate)

    def memory_estimate(self) -> dict[str, int]:
        """The bytes the server knows it holds, by where (an estimate: a message in a
        live buffer and in a client's egress counts in both, an egress entry by its work
        units of 2,048 bytes)."""
        flow = self.flow
        persistence = self.persistence
        return {
            "unfinished frames": self.unfinished.total,
            "open transactions": self.transactions.memory.total,
            "pipeline buffers": sum(
                gate.gauge.bytes for domain in DOMAINS for gate in flow.gates[domain][2:]
            )
            + self.spool.pending.total_bytes(),
            "queue live buffers": persistence.live_buffer_bytes if persistence is not None else 0,
            "VolQueueStore": flow.volatile.gauge.bytes,
            "topic live buffers": flow.live.gauge.bytes,
            "durable replays": self.replays.reading_bytes,
            "client egress": WORK_UNIT * sum(c.egress.queues.queued_work for c in self.clients),
        }

    def _busiest(self, count: int) -> list[Destination]:
        """The ``count`` destinations holding the most messages, after the survey's next
        visit (which keeps as many as the charts and ``/metrics`` show)."""
        admin = AdminSettings.read(self.settings, "Admin")
        self.survey.visit(
            self.runtime.monotonic(),
            SweepSettings.read(self.settings, "DestinationManager").sweepslice,
            max(count, admin.chartdestinations, admin.metricsdestinations),
        )
        return self.survey.busiest(count)

    def flow_state(
        self, destinations: bool = True, busiest: int | None = None
    ) -> dict[str, object]:
        """Every flow-control state in one place: the admin console's view; without each
        destination's (``destinations`` False: the overview of a server with thousands), or
        with those of the ``busiest`` holding the most messages alone (the console's
        sample, ``/metrics``, ``/api/state``: ``survey.py`` looks at a slice per call)."""
        if busiest is not None:
            listed = [d.state() for d in self._busiest(busiest)]
            shown = {
                "queues": [s for s in listed if s["kind"] == "queue"],
                "topics": [s for s in listed if s["kind"] == "topic"],
            }
        elif destinations:
            shown = {
                "queues": [q.state() for q in self.destinations.queues.values()],
                "topics": [t.state() for t in self.destinations.topics.values()],
            }
        else:
            shown = {}
        return {
            "watermarks": [w.state() for w in self.flow.watermarks()],
            **shown,
            "clients": [c.state() for c in self.clients],
            "unfinished_frame_bytes": self.unfinished.total,
            "unfinished_frame_bytes_peak": self.unfinished.peak,
            "memory": self.memwatch.state(),
            "transactions": {  # where both say bytes and open, the memory's figures
                **self.transactions.state(),
                **self.transactions.memory.state(),
                "xa": self.xa.state(),
            },
            "work_pools": self.pools.state(),
            "delivered_unacked": self.unacked.count,
            "delivered_unacked_limit": self.unacked.limit,
            "slow_disconnects": self.flow.slow_disconnects,
            "spool": self.spool.state(),
            "disk": self.flow.disk.state(),
            "commits": self.persistence.statistics() if self.persistence is not None else {},
            "journal": self.journal.statistics(),
            "totals": {
                **self.destinations.totals(),
                "connections": len(self.clients),
                "queues": len(self.destinations.queues),
                "topics": len(self.destinations.topics),
            },
        }
