"""The broker: destinations, the pipelines, message ids and the connected clients.

Plain Python with no event loop; ``server/`` builds one, wires its chains from
config.xml and feeds it connections.
"""

from __future__ import annotations

import itertools
import os
from typing import TYPE_CHECKING

import structlog

from wiremq.config.settings import Settings
from wiremq.modules.destinations import QUEUE_PREFIX, TOPIC_PREFIX, Destination, Queue, Topic
from wiremq.modules.durable import ReplayManager
from wiremq.modules.expiry import ExpiryHandler
from wiremq.modules.message import Message
from wiremq.modules.persistence import Persistence
from wiremq.modules.pipeline import Chain
from wiremq.modules.runtime import Runtime
from wiremq.modules.stomp.frames import ProtocolError
from wiremq.modules.transaction import TransactionManager
from wiremq.stores.volqueue import VolQueueStore

if TYPE_CHECKING:
    from wiremq.modules.subscription import Subscription

log = structlog.get_logger("wiremq.broker")


class Broker:
    """Everything shared between connections."""

    def __init__(
        self, settings: Settings, runtime: Runtime, persistence: Persistence | None = None
    ) -> None:
        self.settings = settings
        self.runtime = runtime
        self.persistence = persistence
        self.vol_store: VolQueueStore[Message] = VolQueueStore()
        self.transactions = TransactionManager()
        self.expiry = ExpiryHandler(self)
        self.replays = ReplayManager(self)
        self.queues: dict[str, Queue] = {}
        self.topics: dict[str, Topic] = {}
        self.chains: dict[str, Chain] = {}
        self.clients: set[object] = set()
        self.active_durables: dict[tuple[str, str], Subscription] = {}
        self._id_prefix = f"wmq-{os.urandom(4).hex()}-"
        self._ids = itertools.count(1)
        self._sessions = itertools.count(1)

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
        subscriptions = self.persistence.load_durable_subscriptions()
        log.info(
            "broker.restored",
            queues=len(self.queues),
            stored_queue_messages=self.persistence.queues.total_count(),
            durable_subscriptions=len(subscriptions),
        )

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
