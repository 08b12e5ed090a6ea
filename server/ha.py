"""One node of an HA pair: a standby until it takes the lease, then the active, until it
steps down.

``wiremq serve`` with ``HA.enabled`` makes a ``HaNode`` beside the server. At
start it checks both stores' PostgreSQL URIs (a clear error naming the one it
cannot use, its password masked) and makes the lease's tables if need be; the
console listens; the STOMP and WebSocket ports stay closed. Its lease thread
(``stores/lease.py`` holds the rules) tries the lease every ``HA.tryinterval``;
once it has it, the reactor takes over: it opens the stores from the shared
database alone (the log in ``wiremq_log`` under this node's epoch,
``stores/dblog.py``; what the databases lack is applied from it), restores what
they hold (queues, durable subscriptions, prepared XA branches) and only then
opens its listeners.

The active's lease thread renews the lease every ``HA.renewinterval`` and sets
the event loop's deadline (``syncpoll.SyncPoller``): the monotonic time at which
its last successful renewal was sent plus ``HA.leasetime`` less ``HA.margin``.
The first turn of the loop past it, before any socket event is handled, steps
down; so does a renewal that finds the lease another node's, a write the
database refused (the fencing trigger), and a failed takeover. Meanwhile the
socket writers write nothing (``SocketWriter.fenced``). Stepping down
re-executes the process as a fresh standby: every client connection, listener
and database session ends at once (every descriptor is closed on exec),
nothing of the old active survives in memory, and the new process waits for
the lease like any standby. What was receipted is in the database; what was
not is gone with the process, as after ``kill -9``.

The journal tells the same however an active ends: its records go to their
file on the thread that writes the log's records, each commit's record after
the journal's records made before it (``StoreWriter.before_write``), so every
change in the database was journaled before it got there, and an active that
is killed or steps down loses only records of what never reached it (the audit
reads such a run's end for what it is: docs/journal.md, "Across an HA pair").

While the database does not answer a write (a restart, a failover of
PostgreSQL itself), the log's writer tries again (``DatabaseLog``) and a gate
stops every producer (flow control, as a full store does) until it answers; a
longer outage than the lease allows makes the active step down, since it can no
longer know whether another node took over.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

import structlog

from wiremq.config.groups import HaSettings, StoreSettings, WalSettings, WatermarkLimits
from wiremq.config.settings import Settings
from wiremq.modules.flow.control import P2P, PUBSUB
from wiremq.modules.flow.watermarks import Watermark
from wiremq.server.stores import open_store
from wiremq.server.syncpoll import SyncPoller
from wiremq.stores.dblog import DatabaseLog
from wiremq.stores.errors import StoreError, StoreOpenError
from wiremq.stores.hadatabase import close_quietly, connect
from wiremq.stores.lease import Lease, LeaseView
from wiremq.stores.messagestore import WalStore

if TYPE_CHECKING:
    from wiremq.server.app import WiremqServer

log = structlog.get_logger("wiremq.ha")

STANDBY, TAKING_OVER, ACTIVE, STOPPING = "standby", "taking-over", "active", "stopping"
STARTING = "starting"  # a standby that has not read the lease yet: it cannot name the active
FAILOVERS_SHOWN = 20  # the failover history's length in the console
_PAST = 1e-9  # a deadline that has passed: step down at the loop's next turn
STEPPED_DOWN = "WIREMQ_STEPPED_DOWN"  # why the process was re-executed, for its log


def node_name(settings: HaSettings) -> str:
    """This node's name: ``HA.node``, or the host name."""
    return settings.node or socket.gethostname()


class HaNode:
    """See the module docstring. Made and started by ``wiremq serve``; the reactor's
    thread runs everything but the lease thread (``_run``)."""

    def __init__(self, server: WiremqServer) -> None:
        self.server = server
        self.settings = settings = HaSettings.read(server.settings, "HA")
        self.queues = StoreSettings.read(server.settings, "PersQueueFileStore")
        self.topics = StoreSettings.read(server.settings, "TopicFileStore")
        self.name = node_name(settings)
        # Every database connection of this process bears this name, so that the node
        # that deposes it can end them (PostgreSQL allows 63 bytes).
        self.session = f"wiremq {self.name[:40]} {os.getpid()} {os.urandom(3).hex()}"
        self.lease = Lease(
            self.queues.storageuri,
            self.name,
            self.session,
            settings.leasetime,
            self.queues.connecttimeout,
        )
        self.role = STANDBY
        self.view: LeaseView | None = None  # as the lease thread last read it
        self.since = time.time()  # when the role began
        self.reason: str | None = None  # why this node took the lease over
        self.takeover_seconds: float | None = None  # from taking the lease to serving
        self._stopping = threading.Event()
        self._deadline_lock = threading.Lock()  # a deadline is never set once stopping
        self._thread: threading.Thread | None = None
        self._poller: SyncPoller | None = None
        self._gate: Watermark | None = None
        self._unreachable = False  # the lease thread's last try or renewal failed (logged once)
        server.ha = self
        server.runtime.sync_poll = 0.0  # no local log to poll around (docs/ha.md)
        # The journal's files are written by the thread that writes the log's records,
        # each commit's record after the journal's records made before it (_take_over).
        server.runtime.shared["journal"] = "writer"

    # -- starting ---------------------------------------------------------------------------

    def check(self) -> None:
        """Both stores' databases answer and the lease's tables are there; otherwise a
        ``StoreOpenError`` naming the parameter and the URI (its password masked)."""
        try:
            self.lease.open()
        except StoreError as error:
            raise StoreOpenError(f"PersQueueFileStore.storageuri: {error}") from None
        if self.topics.storageuri != self.queues.storageuri:
            try:
                probe = connect(
                    self.topics.storageuri,
                    self.session,
                    self.topics.connecttimeout,
                    self.settings.leasetime,
                )
            except StoreError as error:
                raise StoreOpenError(f"TopicFileStore.storageuri: {error}") from None
            close_quietly(probe)

    def start(self) -> None:
        """Wait for the lease as a standby (the lease thread); the console answers."""
        poller = SyncPoller.install(self.server.reactor)
        if poller is None:
            raise StoreOpenError("HA needs Twisted's epoll reactor (Linux)")
        self._poller = poller
        poller.on_deadline = self.step_down
        self.server.fenced = poller.expired
        why = os.environ.pop(STEPPED_DOWN, None)
        log.info("ha.standby", node=self.name, stepped_down=why)
        self._thread = threading.Thread(target=self._run, name="wiremq-lease", daemon=True)
        self._thread.start()

    # -- the lease thread -------------------------------------------------------------------

    def _run(self) -> None:
        settings = self.settings
        reason = None
        while reason is None:
            sent = time.monotonic()
            try:
                reason = self.lease.try_take()
            except StoreError as error:
                self._failed("ha.lease_unreachable", error)
            else:
                self._answered()
            self._refresh_view()
            if reason is None and self._stopping.wait(settings.tryinterval):
                return
        self._set_deadline(sent)  # the takeover set the expiry as a renewal does
        self._renew()
        self.server.reactor.callFromThread(self._take_over, reason, sent)
        while not self._stopping.wait(settings.renewinterval):
            self._renew()

    def _renew(self) -> None:
        try:
            sent = self.lease.renew()
        except StoreError as error:
            self._failed("ha.renewal_failed", error)
            return
        self._answered()
        if sent is None:
            self.lose("the lease is another node's now")
        else:
            self._set_deadline(sent)
            self._refresh_view()

    def _set_deadline(self, sent: float) -> None:
        """The lease, renewed by a statement sent at ``sent`` (monotonic), lasts until at
        least ``sent`` + the lease by the database's clock: this node serves until that
        less the margin."""
        with self._deadline_lock:
            if not self._stopping.is_set() and self._poller is not None:
                self._poller.deadline = sent + self.settings.leasetime - self.settings.margin

    def _failed(self, event: str, error: StoreError) -> None:
        """The database did not answer the lease thread: logged once until it does."""
        if not self._unreachable:
            log.warning(event, node=self.name, error=str(error))
        self._unreachable = True

    def _answered(self) -> None:
        if self._unreachable:
            log.info("ha.lease_reachable", node=self.name)
        self._unreachable = False

    def _refresh_view(self) -> None:
        with contextlib.suppress(StoreError):  # the last one read stays until it answers
            self.view = self.lease.view(FAILOVERS_SHOWN)

    def lose(self, why: str) -> None:
        """The lease is gone (any thread): step down at the event loop's next turn."""
        log.warning("ha.lease_lost", node=self.name, epoch=self.lease.epoch, why=why)
        with self._deadline_lock:
            if self._poller is not None and not self._stopping.is_set():
                self._poller.deadline = _PAST
                self.server.reactor.callFromThread(lambda: None)  # wake the loop for it

    # -- the reactor ------------------------------------------------------------------------

    def _take_over(self, reason: str, taken: float) -> None:
        if self._stopping.is_set():
            return
        self.role, self.reason, self.since = TAKING_OVER, reason, time.time()
        log.info("ha.taking_over", node=self.name, epoch=self.lease.epoch, reason=reason)
        try:
            self.server.start(self.database_log(), self.session)
        except Exception as error:  # anything that stops it from serving: let another try
            log.exception("ha.takeover_failed", node=self.name, error=str(error))
            self.step_down(f"the takeover failed: {error}")
        self._gate = self._store_gate()
        core = self.server.core
        assert core is not None and core.persistence is not None
        core.persistence.writer.before_write = core.journal.flush
        self.role, self.since = ACTIVE, time.time()
        self.takeover_seconds = round(time.monotonic() - taken, 3)
        log.info(
            "ha.active",
            node=self.name,
            epoch=self.lease.epoch,
            reason=reason,
            seconds=self.takeover_seconds,
            ports=self.server.ports,
        )

    def database_log(self) -> DatabaseLog:
        """The store's log in the shared database, written under this node's epoch."""
        return DatabaseLog(
            self.queues.storageuri,
            epoch=self.lease.epoch,
            client_name=self.session,
            connect_timeout=self.queues.connecttimeout,
            lease_time=self.settings.leasetime,
            retry_interval=self.settings.tryinterval,
            keep_bytes=WalSettings.read(self.server.settings, "WriteAheadLog").segmentsize,
            on_reachable=self._reachable,
            on_fenced=self._fenced,
        )

    def _store_gate(self) -> Watermark:
        """A gate that stops every producer while the database does not take the log."""
        core = self.server.core
        assert core is not None
        flow = core.flow
        gate = Watermark(
            "Store unreachable",
            WatermarkLimits(1, 0, -1, -1),
            lambda: flow.producers[P2P] | flow.producers[PUBSUB],
        )
        flow.add_gate(P2P, gate)
        flow.add_gate(PUBSUB, gate)
        return gate

    def _reachable(self, reachable: bool) -> None:
        """Told by the log's writer (its thread) when the database stops or starts taking
        records: producers are held meanwhile."""

        def tell() -> None:
            gate = self._gate
            if gate is None:
                return
            if reachable:
                gate.remove(1, 0)
            else:
                gate.add(1, 0)

        self.server.reactor.callFromThread(tell)

    def _fenced(self) -> None:
        """The database refused a record (the writer's thread): step down; the write is
        never reported, so no client hears of it."""
        self.lose("the database refused a record of this node's epoch")
        threading.Event().wait()  # until the process is re-executed

    def step_down(self, why: str = "its lease ran out") -> NoReturn:
        """Stop serving at once and start again as a standby (see the module docstring)."""
        log.warning("ha.stepping_down", node=self.name, epoch=self.lease.epoch, why=why)
        restart(why)

    # -- stopping ---------------------------------------------------------------------------

    def stop_serving(self) -> None:
        """A clean stop begins: no deadline any more (the server closes what it holds)."""
        with self._deadline_lock:
            self._stopping.set()
            self.role = STOPPING
            if self._poller is not None:
                self._poller.deadline = 0.0

    def stop(self) -> None:
        """After the server stopped: end the lease thread and give the lease up, so that a
        standby takes over at its next try."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        if self.lease.epoch:
            try:
                self.lease.release()
            except StoreError as error:
                log.warning("ha.release_failed", node=self.name, error=str(error))
        self.lease.close()

    # -- the console ------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """The role, the lease and the failover history, as the console shows them."""
        view = self.view
        return {
            "role": STARTING if self.role == STANDBY and view is None else self.role,
            "node": self.name,
            "since": self.since,
            "epoch": self.lease.epoch or None,
            "reason": self.reason,
            "takeover_seconds": self.takeover_seconds,
            "active": None if view is None else view.holder,
            "lease_epoch": None if view is None else view.epoch,
            "lease_expires_in": _rounded(None if view is None else view.expires_in),
            "lease_released": None if view is None else view.released,
            "failovers": []
            if view is None
            else [
                {
                    "epoch": t.epoch,
                    "node": t.node,
                    "at": t.at,
                    "previous": t.previous,
                    "reason": t.reason,
                }
                for t in view.history
            ],
        }


def _rounded(seconds: float | None) -> float | None:
    """Seconds as the console shows them (to the millisecond)."""
    return None if seconds is None else round(seconds, 3)


def restart(why: str) -> NoReturn:
    """Re-execute this process as it was started, every descriptor but stdio closed."""
    sys.stdout.flush()
    sys.stderr.flush()
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2:
            with contextlib.suppress(OSError):  # the listing's own descriptor, gone already
                os.set_inheritable(fd, False)
    os.environ[STEPPED_DOWN] = why
    os.execv(sys.executable, sys.orig_argv)


@contextmanager
def stopped_store(settings: Settings) -> Iterator[WalStore]:
    """The store of a server that is stopped (``wiremq export``), closed afterwards; of an HA
    pair, through the lease (``stopped_pair_store``)."""
    if HaSettings.read(settings, "HA").enabled:
        with stopped_pair_store(settings) as store:
            yield store
        return
    store = open_store(settings)
    try:
        yield store
    finally:
        store.close()


@contextmanager
def stopped_pair_store(settings: Settings) -> Iterator[WalStore]:
    """The store of an HA pair whose nodes are all stopped (``wiremq export``): this process
    takes the lease (a ``StoreError`` while a node holds it), opens the store from the
    shared database, and gives the lease back once the store is closed."""
    ha = HaSettings.read(settings, "HA")
    queues = StoreSettings.read(settings, "PersQueueFileStore")
    session = f"wiremq export {os.getpid()} {os.urandom(3).hex()}"
    lease = Lease(
        queues.storageuri, f"{node_name(ha)} (export)", session, ha.leasetime, queues.connecttimeout
    )
    lease.open()
    try:
        if lease.try_take() is None:
            holder = lease.view(0).holder
            raise StoreError(f"{holder} holds the HA lease: stop every node of the pair first")
        log = DatabaseLog(
            queues.storageuri,
            epoch=lease.epoch,
            client_name=session,
            connect_timeout=queues.connecttimeout,
            lease_time=ha.leasetime,
            retry_interval=ha.tryinterval,
            keep_bytes=WalSettings.read(settings, "WriteAheadLog").segmentsize,
        )
        store = open_store(settings, log, session)
        try:
            yield store
        finally:
            store.close()
        lease.release()
    finally:
        lease.close()
