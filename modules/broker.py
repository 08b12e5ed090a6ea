"""The broker: destinations, the pipelines, message ids and the connected clients.

Plain Python with no event loop; ``server/`` builds one, wires its chains from
config.xml and feeds it connections.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import structlog

from wiremq.config.settings import Settings
from wiremq.modules.destinations import QUEUE_PREFIX, TOPIC_PREFIX, Destination, Queue, Topic
from wiremq.modules.durable import ReplayManager
from wiremq.modules.expiry import ExpiryHandler
from wiremq.modules.flow.spool import Spool
from wiremq.modules.flow.watermarks import Producer, Watermark, limits
from wiremq.modules.groupcommit import GroupCommit
from wiremq.modules.message import Message
from wiremq.modules.persistence import Persistence
from wiremq.modules.pipeline import P2P, PUBSUB, Chain
from wiremq.modules.runtime import Runtime
from wiremq.modules.stomp.frames import ProtocolError
from wiremq.modules.storage import StorageModule
from wiremq.modules.transaction import TransactionManager
from wiremq.stores.volqueue import VolQueueStore

if TYPE_CHECKING:
    from wiremq.modules.client import ClientConnection
    from wiremq.modules.subscription import Subscription

log = structlog.get_logger("wiremq.broker")


class Broker:
    """Everything shared between connections."""

    def __init__(
        self, settings: Settings, runtime: Runtime, persistence: Persistence | None = None
    ) -> None:
        self.settings = settings
        self.runtime = runtime
        self.persistence: Persistence | None = None
        if persistence is not None:
            self.attach(persistence)
        self.vol_store: VolQueueStore[Message] = VolQueueStore()
        # Flow control: who produces to each domain, and the global watermarks that stop them.
        self.producers: dict[str, set[Producer]] = {P2P: set(), PUBSUB: set()}

        def domain(name: str) -> Callable[[], set[Producer]]:
            return lambda: self.producers[name]

        self.vol_watermark = Watermark(
            "VolQueueStore", limits(settings, "VolQueueStoreImpl", "global"), domain(P2P)
        )
        self.tlb_watermark = Watermark(
            "TopicLiveBuffer", limits(settings, "DestinationManager", "topicglobal"), domain(PUBSUB)
        )
        self.store_watermarks = {
            P2P: Watermark(
                "PersQueueStore",
                limits(settings, "PersQueueFileStore", "global"),
                lambda: self._blocking_producers(self.queues),
            ),
            PUBSUB: Watermark(
                "TopicStore",
                limits(settings, "TopicFileStore", "global"),
                lambda: self._blocking_producers(self.topics),
            ),
        }
        self.domain_gates: dict[str, list[Watermark]] = {
            P2P: [self.vol_watermark, self.store_watermarks[P2P]],
            PUBSUB: [self.tlb_watermark, self.store_watermarks[PUBSUB]],
        }
        self.delivered_unacked = 0  # client-mode deliveries not yet acknowledged, all consumers
        self.unacked_limit = settings.get_int("MessageSpool", "maxdeliveredunacked")
        self._unacked_waiters: set[Destination] = set()
        self.slow_disconnects = 0
        self.transactions = TransactionManager()
        self.expiry = ExpiryHandler(self)
        self.spool = Spool(self)
        self.replays = ReplayManager(self)
        self.queues: dict[str, Queue] = {}
        self.topics: dict[str, Topic] = {}
        self.chains: dict[str, Chain] = {}
        self.clients: set[ClientConnection] = set()
        self.active_durables: dict[tuple[str, str], Subscription] = {}
        self._id_prefix = f"wmq-{os.urandom(4).hex()}-"
        self._ids = itertools.count(1)
        self._sessions = itertools.count(1)

    def attach(self, persistence: Persistence) -> None:
        """Use these persistent stores; their commits keep the store watermarks current."""
        self.persistence = persistence
        persistence.on_store_changed = self.store_changed

    def next_message_id(self) -> str:
        return f"{self._id_prefix}{next(self._ids)}"

    def next_session_id(self) -> str:
        return f"{self._id_prefix}s{next(self._sessions)}"

    def destination(self, name: str) -> Destination:
        """The queue or topic ``name`` names, created on first use."""
        found = self.queues.get(name) or self.topics.get(name)
        if found is not None:
            return found
        if name.startswith(QUEUE_PREFIX):
            kind, suffix = "queue", name[len(QUEUE_PREFIX) :]
        elif name.startswith(TOPIC_PREFIX):
            kind, suffix = "topic", name[len(TOPIC_PREFIX) :]
        else:
            raise ProtocolError(
                "unknown destination",
                f"{name[:200]!r} is neither /queue/NAME nor /topic/NAME",
            )
        if not suffix or "*" in suffix or ">" in suffix:
            raise ProtocolError(
                "invalid destination",
                f"{name[:200]!r}: a {kind} needs a name without wildcards (* or >)",
            )
        destination: Destination
        if kind == "queue":
            destination = self.queues[name] = Queue(name, self)
        else:
            destination = self.topics[name] = Topic(name, self)
        log.info("destination.created", destination=name)
        return destination

    def restore(self) -> None:
        """Recreate the queues that have stored messages; they are read back on demand."""
        if self.persistence is None:
            return
        for name in self.persistence.queues.destinations():
            if self.persistence.queues.count(name):
                queue = self.destination(name)
                assert isinstance(queue, Queue)
                queue.backlog_after = 0
        self.store_changed(P2P, self.persistence.queues.destinations())
        self.store_changed(PUBSUB, self.persistence.topics.destinations())
        subscriptions = self.persistence.load_durable_subscriptions()
        log.info(
            "broker.restored",
            queues=len(self.queues),
            stored_queue_messages=self.persistence.queues.total_count(),
            durable_subscriptions=len(subscriptions),
        )

    @staticmethod
    def _blocking_producers(destinations: dict[str, Destination]) -> set[Producer]:
        """Producers a full store stops: those of destinations that block when full
        (a ``whenfull=fail`` destination refuses its persistent SENDs instead)."""
        return {p for d in destinations.values() if not d.fail_when_full for p in d.producers}

    def add_gate(self, domain: str, watermark: Watermark) -> None:
        """A watermark that stops every producer of ``domain`` (a pipeline buffer's)."""
        self.domain_gates[domain].append(watermark)
        for destination in [*self.queues.values(), *self.topics.values()]:
            if destination.domain == domain:
                destination.gates.append(watermark)

    def forget_producer(self, producer: Producer) -> None:
        """A client went away: it is no longer a producer anywhere."""
        for destinations in (self.queues, self.topics):
            for destination in destinations.values():
                if producer in destination.producers:
                    destination.remove_producer(producer)
        for domain, producers in self.producers.items():
            producers.discard(producer)
            for gate in self.domain_gates[domain]:
                gate.forget(producer)

    def unacked_limit_reached(self, subscription: Subscription) -> bool:
        """The server-wide delivered-but-unacknowledged limit (MessageSpool.maxdeliveredunacked)."""
        if self.unacked_limit < 0 or self.delivered_unacked < self.unacked_limit:
            return False
        self._unacked_waiters.add(subscription.destination)
        return True

    def acknowledged_count(self, count: int) -> None:
        """``count`` client-mode deliveries were acknowledged (or given back)."""
        before = self.delivered_unacked
        self.delivered_unacked -= count
        if before >= self.unacked_limit > self.delivered_unacked >= 0 and self._unacked_waiters:
            waiters, self._unacked_waiters = self._unacked_waiters, set()
            for destination in waiters:
                self.runtime.call_soon(destination.consumer_ready)

    def disconnect_slow(self, subscription: Subscription) -> None:
        """A subscriber under the ``disconnect`` policy fell behind: its client is dropped."""
        self.slow_disconnects += 1
        log.info(
            "client.slow_disconnected",
            destination=subscription.destination.name,
            subscription=subscription.sub_id,
        )
        subscription.client.detach(subscription)
        subscription.client.drop(
            ProtocolError(
                "slow subscriber",
                f"{subscription.destination.name} disconnects subscribers that fall behind",
            )
        )

    def store_accepted(self, destination: Destination, message: Message) -> None:
        """A persistent message is on its way into the store: count it in its watermarks now,
        so that producers are stopped while commits lag behind reading."""
        size = message.stored_size
        if destination.store_watermark is not None:
            destination.store_watermark.add(1, size)
        self.store_watermarks[destination.domain].add(1, size)

    def store_changed(self, domain: str, destinations: Iterable[str]) -> None:
        """Bring the store watermarks up to date after a commit changed ``destinations``."""
        persistence = self.persistence
        if persistence is None:
            return
        store = persistence.queues if domain == P2P else persistence.topics
        known = self.queues if domain == P2P else self.topics
        pending = self.spool.pending
        for name in set(destinations):
            destination = known.get(name)
            if destination is not None:
                if destination.store_watermark is not None:
                    messages, nbytes = pending.of(name)
                    destination.store_watermark.sync(
                        store.count(name) + messages, store.byte_count(name) + nbytes
                    )
                self.spool.usage_changed(destination)
        messages, nbytes = pending.of_domain(domain)
        self.store_watermarks[domain].sync(
            store.total_count() + messages, store.total_bytes() + nbytes
        )
        self.spool.spool_usage_changed()

    def commit_statistics(self) -> dict[str, dict[str, int]]:
        """Commits made by each group commit and the items they carried."""
        batchers: dict[str, GroupCommit[Any, Any]] = {}
        for domain, chain in self.chains.items():
            storage = chain.module(StorageModule)
            if isinstance(storage, StorageModule) and storage.buffer is not None:
                batchers[f"{domain} appends"] = storage.buffer
        if self.persistence is not None:
            batchers["queue removals"] = self.persistence.removals
            batchers["durable acknowledgements"] = self.persistence.acknowledgements
        return {
            name: {"commits": batcher.batches, "items": batcher.items}
            for name, batcher in batchers.items()
        }

    def flow_state(self) -> dict[str, object]:
        """Every flow-control state in one place: the admin console's view."""
        watermarks = [
            self.vol_watermark,
            self.tlb_watermark,
            *self.store_watermarks.values(),
            *(g for gates in self.domain_gates.values() for g in gates[2:]),
        ]
        return {
            "watermarks": [w.state() for w in watermarks],
            "queues": [q.state() for q in self.queues.values()],
            "topics": [t.state() for t in self.topics.values()],
            "clients": [c.state() for c in self.clients],
            "delivered_unacked": self.delivered_unacked,
            "delivered_unacked_limit": self.unacked_limit,
            "slow_disconnects": self.slow_disconnects,
            "spool": self.spool.state(),
            "commits": self.commit_statistics(),
        }

    def submit(self, message: Message) -> None:
        """Start a message down its domain's chain."""
        assert message.target is not None
        self.chains[message.target.domain].head.handle(message)

    def sweep_volatile(self) -> None:
        """The VolQueueStore's cleanup process."""
        now_ms = self.runtime.now_ms()
        for queue in list(self.queues.values()):
            queue.sweep_volatile(now_ms)

    def sweep_live_buffers(self) -> None:
        """The queue live buffers' cleanup (qlbcleanupinterval / qlbcleanuptimetolive)."""
        now_ms = self.runtime.now_ms()
        idle_for = self.settings.get_float("DestinationManager", "qlbcleanuptimetolive")
        for queue in list(self.queues.values()):
            queue.sweep_cache(now_ms, idle_for)

    def sweep_topic_buffers(self) -> None:
        """The topic live buffers' cleanup (tlbcleanupinterval)."""
        now_ms = self.runtime.now_ms()
        for topic in list(self.topics.values()):
            topic.sweep_live_buffer(now_ms)
