"""The persistent stores as the broker uses them: workers, batched removals, durable registry.

Each store is used from its own worker thread only (one writer per store).
Acknowledged queue messages are removed, and durable subscribers' positions
moved, in group commits (fastdeletionsize / fastacknowledgesize).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

import structlog

from wiremq.config.settings import Settings
from wiremq.modules.groupcommit import GroupCommit
from wiremq.modules.pipeline import P2P, PUBSUB
from wiremq.modules.runtime import Runtime
from wiremq.stores.durable import SubscriptionInfo
from wiremq.stores.persqueue import PersQueueStore
from wiremq.stores.records import StoredMessage
from wiremq.stores.topicstore import TopicStore

log = structlog.get_logger("wiremq.persistence")

QueuePosition = tuple[str, int]  # queue, sequence number
DurableKey = tuple[str, str]  # client id, subscription name


class Persistence:
    """PersQueueStore and TopicStore with their workers, shared by every destination."""

    def __init__(
        self,
        queues: PersQueueStore,
        topics: TopicStore,
        runtime: Runtime,
        settings: Settings,
    ) -> None:
        self.queues = queues
        self.topics = topics
        self.runtime = runtime
        self.settings = settings
        self.queue_worker = runtime.worker("persqueue")
        self.topic_worker = runtime.worker("topics")
        delay = settings.get_int("P2PStore", "maxdelay") / 1000
        # Told which destinations a commit changed (the broker updates its watermarks).
        self.on_store_changed: Callable[[str, Iterable[str]], None] = lambda domain, names: None
        self.removals: GroupCommit[QueuePosition, int] = GroupCommit(
            runtime,
            self.queue_worker,
            self._remove,
            lambda batch, count: self.on_store_changed(P2P, {queue for queue, _ in batch}),
            lambda batch, error: log.error("store.remove_failed", error=str(error)),
            size=lambda item: 0,
            max_items=settings.get_int("PersQueueFileStore", "fastdeletionsize"),
            max_bytes=1 << 62,
            max_delay=delay,
        )
        self.acknowledgements: GroupCommit[tuple[DurableKey, int], None] = GroupCommit(
            runtime,
            self.topic_worker,
            self._acknowledge,
            lambda batch, result: self.on_store_changed(PUBSUB, self.durable_topics),
            lambda batch, error: log.error("store.acknowledge_failed", error=str(error)),
            size=lambda item: 0,
            max_items=settings.get_int("TopicFileStore", "fastacknowledgesize"),
            max_bytes=1 << 62,
            max_delay=settings.get_int("PubSubStore", "maxdelay") / 1000,
        )
        self.durable_topics: Counter[str] = Counter()  # topics with durable subscriptions
        self.cache_bytes = 0  # persistent queue messages held in memory, all queues
        self.cache_limit = settings.get_int(
            "DestinationManager", "globalpersqueuebytehighwatermark"
        )
        self.queue_cache_limit = settings.get_int(
            "DestinationManager", "persqueuebytehighwatermark"
        )

    def load_durable_subscriptions(self) -> list[SubscriptionInfo]:
        """Read the durable subscriptions at start-up (before the event loop runs)."""
        subscriptions = self.topics.subscriptions()
        self.durable_topics = Counter(info.topic for info in subscriptions)
        return subscriptions

    def _remove(self, positions: list[QueuePosition]) -> int:
        by_queue: dict[str, list[int]] = {}
        for queue, seq in positions:
            by_queue.setdefault(queue, []).append(seq)
        return self.queues.remove_batch(by_queue)

    def _acknowledge(self, positions: list[tuple[DurableKey, int]]) -> None:
        highest: dict[DurableKey, int] = {}
        for key, seq in positions:
            if seq > highest.get(key, 0):
                highest[key] = seq
        self.topics.acknowledge_batch(highest)

    def expire_queue_messages(
        self, queue: str, seqs: list[int], then: Callable[[list[StoredMessage]], None]
    ) -> None:
        """Remove expired messages now (expiryonread); ``then`` gets those actually removed."""
        self.queue_worker.submit(
            lambda: self.queues.expire({queue: seqs}),
            then,
            lambda error: log.error("store.expire_failed", queue=queue, error=str(error)),
        )

    def close(self) -> None:
        self.queues.close()
        self.topics.close()
