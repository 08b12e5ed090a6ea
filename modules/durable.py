"""Durable topic subscriptions: registering them in the TopicStore and replaying their backlog.

A durable subscriber that comes back first catches up from the store, in
batches of replaymsgamount messages / replaybyteamount bytes with replaysleep
between batches, with at most DurableTopicSubscriberThreadPool.maxthreads
replays running at once and DurableTopicSubscriptionManager
.globaldursubbytelimit bytes being read for all of them together. A replay
also waits while its client has more than one batch not yet written to its
socket. Replayed messages are handed over only as the subscriber's window
allows; the rest of a batch waits here. When the store has nothing more, the
subscriber switches to live delivery (``Subscription.replaying`` goes False).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from wiremq.modules.message import Message
from wiremq.modules.subscription import Subscription
from wiremq.stores.durable import SubscriptionInfo
from wiremq.stores.results import Batch

if TYPE_CHECKING:
    from wiremq.modules.broker import Broker
    from wiremq.modules.destinations import Topic
    from wiremq.modules.persistence import Persistence

log = structlog.get_logger("wiremq.durable")


class ReplayManager:
    """Starts, paces and bounds the replays of durable subscribers."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.active: set[Subscription] = set()
        self.waiting: deque[tuple[Topic, Subscription]] = deque()
        self.reading_bytes = 0  # replay reads in progress, all subscribers
        self._positions: dict[Subscription, int] = {}  # replay position per subscriber
        self._pending: dict[Subscription, deque[Message]] = {}  # read, not yet handed over

    @property
    def _persistence(self) -> Persistence:
        """The broker's; always present when durable subscriptions are."""
        persistence = self.broker.persistence
        assert persistence is not None
        return persistence

    def start(self, topic: Topic, subscription: Subscription) -> None:
        """Register the subscription in the store, then replay what it missed."""
        key = subscription.durable_key
        assert key is not None
        persistence = self._persistence
        persistence.topic_worker.submit(
            lambda: persistence.topics.subscribe(key[0], key[1], topic.name),
            lambda result: self._registered(topic, subscription, *result),
            lambda error: self._failed(subscription, error),
        )

    def stop(self, subscription: Subscription) -> None:
        """The subscriber went away; its replay ends at the next step."""
        self.waiting = deque(w for w in self.waiting if w[1] is not subscription)
        self._positions.pop(subscription, None)
        self._pending.pop(subscription, None)

    def _registered(
        self, topic: Topic, subscription: Subscription, info: SubscriptionInfo, created: bool
    ) -> None:
        if created:
            self._persistence.durable_topics[topic.name] += 1
            log.info("durable.created", client_id=info.client_id, name=info.name, topic=topic.name)
        if subscription not in topic.consumers:
            return
        subscription.acked_position = info.acked_seq
        self._positions[subscription] = info.acked_seq
        self.waiting.append((topic, subscription))
        self._start_waiting()

    def _start_waiting(self) -> None:
        limit = self.broker.settings.get_int("DurableTopicSubscriberThreadPool", "maxthreads")
        while self.waiting and len(self.active) < limit:
            topic, subscription = self.waiting.popleft()
            self.active.add(subscription)
            self._step(topic, subscription)

    def _finish(self, subscription: Subscription) -> None:
        self.active.discard(subscription)
        self._positions.pop(subscription, None)
        self._pending.pop(subscription, None)
        self._start_waiting()

    def _hand_over(self, subscription: Subscription) -> bool:
        """Deliver read messages while the window allows; True when none are left."""
        pending = self._pending.get(subscription)
        while pending:
            if not subscription.ready_for(pending[0]):
                return False
            subscription.deliver(pending.popleft())
        return True

    def _step(self, topic: Topic, subscription: Subscription) -> None:
        if subscription not in self._positions:
            self._finish(subscription)
            return
        if not self._hand_over(subscription):
            self._later(lambda: self._step(topic, subscription))
            return
        settings = self.broker.settings
        amount = settings.get_int("TopicFileStore", "replaybyteamount")
        budget = settings.get_int("DurableTopicSubscriptionManager", "globaldursubbytelimit")
        if self.reading_bytes and self.reading_bytes + amount > budget:
            self._later(lambda: self._step(topic, subscription))
            return
        key = subscription.durable_key
        assert key is not None
        after = self._positions[subscription]
        count = settings.get_int("TopicFileStore", "replaymsgamount")
        on_replay = settings.get("TopicFileStore", "expiryonreplay") is True
        now_ms = self.broker.runtime.now_ms()
        persistence = self._persistence
        self.reading_bytes += amount
        persistence.topic_worker.submit(
            lambda: persistence.topics.replay(
                key[0],
                key[1],
                now_ms=now_ms,
                after_seq=after,
                max_messages=count,
                max_bytes=amount,
                expiry_on_replay=on_replay,
            ),
            lambda batch: self._replayed(topic, subscription, batch, amount),
            lambda error: self._read_failed(subscription, error, amount),
        )

    def _later(self, step: Callable[[], None]) -> None:
        """Run ``step`` after replaysleep."""
        pause = self.broker.settings.get_int("TopicFileStore", "replaysleep") / 1000
        self.broker.runtime.call_later(pause, step)

    def _replayed(
        self, topic: Topic, subscription: Subscription, batch: Batch, amount: int
    ) -> None:
        self.reading_bytes -= amount
        if subscription not in self._positions:
            self._finish(subscription)
            return
        self._pending[subscription] = deque(
            Message.from_stored(stored, seq) for seq, stored in batch.messages
        )
        if batch.expired and batch.expired_removed:
            self.broker.expiry.expired_stored(topic.name, batch.expired)
        self._positions[subscription] = batch.last_seq
        if batch.at_end:
            self._go_live(topic, subscription)
        else:
            self._later(lambda: self._step(topic, subscription))

    def _go_live(self, topic: Topic, subscription: Subscription) -> None:
        """The store has nothing more: hand over the rest as the window allows, then go live."""
        if subscription not in self._positions:
            self._finish(subscription)
        elif self._hand_over(subscription):
            subscription.replaying = False
            self._finish(subscription)
        else:
            self._later(lambda: self._go_live(topic, subscription))

    def _read_failed(self, subscription: Subscription, error: Exception, amount: int) -> None:
        self.reading_bytes -= amount
        self._failed(subscription, error)
        self._finish(subscription)

    def _failed(self, subscription: Subscription, error: Exception) -> None:
        log.error("durable.replay_failed", subscription=subscription.durable_key, error=str(error))
