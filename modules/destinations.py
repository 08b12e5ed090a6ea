"""Queues and topics: where messages wait and how they reach consumers.

A queue gives each message to exactly one consumer, round-robin over its
consumers. Its non-persistent messages wait in the VolQueueStore; its
persistent ones are in the PersQueueStore, and the most recent are also kept
in memory, in the queue live buffer (``cache``), up to
persqueuebytehighwatermark. When a persistent message does not fit there, it
and every later one are left in the store (``backlog_after``) and read back in
order once the buffer has drained. Across the two delivery modes messages go
out in arrival order; within one, always in order.

A topic gives each message to every current subscriber. Durable subscribers
replaying their backlog from the TopicStore skip the live copies of stored
messages: the replay delivers them, in order.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections import deque
from typing import TYPE_CHECKING

import structlog

from wiremq.modules.message import Message
from wiremq.modules.pipeline import P2P, PUBSUB
from wiremq.modules.subscription import Subscription
from wiremq.stores.results import Batch

if TYPE_CHECKING:
    from wiremq.modules.broker import Broker

QUEUE_PREFIX = "/queue/"
TOPIC_PREFIX = "/topic/"

log = structlog.get_logger("wiremq.destinations")


class Destination(ABC):
    """A named queue or topic with its consumers."""

    domain: str

    def __init__(self, name: str, broker: Broker) -> None:
        self.name = name
        self.broker = broker
        self.consumers: list[Subscription] = []
        self.max_ttl = int(broker.settings.for_destination(name, "maxttl"))

    def subscribe(self, subscription: Subscription) -> None:
        self.consumers.append(subscription)

    @abstractmethod
    def unsubscribe(self, subscription: Subscription) -> None:
        """Remove a consumer; what it had not acknowledged is handled per domain."""

    @abstractmethod
    def distribute(self, message: Message) -> None:
        """Deliver a message that has passed the storage step."""

    @abstractmethod
    def acknowledged(self, subscription: Subscription, messages: list[Message]) -> None:
        """A consumer acknowledged these messages (or took them in auto mode)."""

    @abstractmethod
    def rejected(self, messages: list[Message], requeue: bool) -> None:
        """Messages a consumer NACKed."""


class Queue(Destination):
    domain = P2P

    def __init__(self, name: str, broker: Broker) -> None:
        super().__init__(name, broker)
        self.store = broker.vol_store
        self.persistence = broker.persistence
        self.cache: deque[Message] = deque()  # the queue live buffer, in store order
        self.cache_bytes = 0
        self.backlog_after: int | None = None  # stored messages after this seq are not cached
        self.reading = False
        self.last_dispatch = time.monotonic()
        self._arrivals = 0
        self._next = 0  # round-robin position among consumers

    # -- arrival ---------------------------------------------------------------------------

    def arrived(self, message: Message) -> None:
        """Number a message as it reaches the storage step, so that messages of both
        delivery modes waiting together go out in the order they were sent."""
        self._arrivals += 1
        message.arrival = self._arrivals

    def store_volatile(self, message: Message) -> None:
        """Keep a non-persistent message in the VolQueueStore (the storage step)."""
        self.arrived(message)
        self.store.append(self.name, message)

    def distribute(self, message: Message) -> None:
        if message.persistent and message.store_seq:
            self._cache_or_leave(message)
        self.dispatch()

    def _cache_or_leave(self, message: Message) -> None:
        persistence = self.persistence
        assert persistence is not None
        if (
            self.backlog_after is None
            and self.cache_bytes + message.size <= persistence.queue_cache_limit
            and persistence.cache_bytes + message.size <= persistence.cache_limit
        ):
            self._cache_append(message)
        elif self.backlog_after is None:
            self.backlog_after = message.store_seq - 1  # it, and all after it, stay in the store

    def _cache_append(self, message: Message) -> None:
        self.cache.append(message)
        self.cache_bytes += message.size
        assert self.persistence is not None
        self.persistence.cache_bytes += message.size

    def _cache_pop(self) -> Message:
        message = self.cache.popleft()
        self.cache_bytes -= message.size
        assert self.persistence is not None
        self.persistence.cache_bytes -= message.size
        return message

    # -- delivery --------------------------------------------------------------------------

    def _next_message(self) -> Message | None:
        if not self.cache:
            return self.store.pop(self.name)
        volatile = self.store.peek(self.name)
        if volatile is not None and volatile.arrival < self.cache[0].arrival:
            return self.store.pop(self.name)
        return self._cache_pop()

    def dispatch(self) -> None:
        """Hand waiting messages to consumers, one each in turn."""
        consumers = self.consumers
        count = len(consumers)
        if not count:
            return
        turn = self._next
        now_ms = 0
        expired: list[Message] = []
        message = self._next_message()
        while message is not None:
            if message.expires:
                now_ms = now_ms or self.broker.runtime.now_ms()
                if message.expires <= now_ms:
                    expired.append(message)
                    message = self._next_message()
                    continue
            consumers[turn % count].deliver(message)
            turn += 1
            message = self._next_message()
        self._next = turn % count
        self.last_dispatch = time.monotonic()
        if expired:
            self.expired(expired)
        if self.backlog_after is not None and not self.reading:
            self._read_backlog()

    def subscribe(self, subscription: Subscription) -> None:
        super().subscribe(subscription)
        self.dispatch()

    def unsubscribe(self, subscription: Subscription) -> None:
        self.consumers.remove(subscription)
        self.requeue(subscription.take_unacked())

    def acknowledged(self, subscription: Subscription, messages: list[Message]) -> None:
        self._remove_stored(messages)

    def rejected(self, messages: list[Message], requeue: bool) -> None:
        if requeue:
            self.requeue(messages)
        else:
            self._remove_stored(messages)  # dropped on purpose: it leaves the store too

    def _remove_stored(self, messages: list[Message]) -> None:
        persistence = self.persistence
        if persistence is None:
            return
        for message in messages:
            if message.store_seq:
                persistence.removals.add((self.name, message.store_seq))

    def requeue(self, messages: list[Message]) -> None:
        """Put messages back at the front, flagged as redelivered, and deliver them again."""
        if not messages:
            return
        for message in messages:
            message.mark_redelivered()
        volatile = [m for m in messages if not m.store_seq]
        if volatile:
            self.store.push_front(self.name, volatile)
        for message in reversed([m for m in messages if m.store_seq]):
            self.cache.appendleft(message)
            self.cache_bytes += message.size
            assert self.persistence is not None
            self.persistence.cache_bytes += message.size
        self.dispatch()

    # -- the store backlog -----------------------------------------------------------------

    def _read_backlog(self) -> None:
        persistence = self.persistence
        assert persistence is not None and self.backlog_after is not None
        self.reading = True
        after = self.backlog_after
        settings = self.broker.settings
        limit = settings.get_int("PersQueueFileStore", "readmsgamount")
        room = max(1, persistence.queue_cache_limit - self.cache_bytes)
        on_read = settings.get("PersQueueFileStore", "expiryonread") is True
        now_ms = self.broker.runtime.now_ms()
        persistence.queue_worker.submit(
            lambda: persistence.queues.read(
                self.name,
                now_ms=now_ms,
                after_seq=after,
                limit=limit,
                max_bytes=room,
                expiry_on_read=on_read,
            ),
            self._backlog_read,
            self._backlog_failed,
        )

    def _backlog_read(self, batch: Batch) -> None:
        self.reading = False
        for seq, stored in batch.messages:
            message = Message.from_stored(stored, seq)
            self.arrived(message)
            self._cache_append(message)
        if batch.expired and batch.expired_removed:
            self.broker.expiry.expired(
                self.name, [Message.from_stored(m, 0) for m in batch.expired]
            )
        self.backlog_after = None if batch.at_end else batch.last_seq
        self.dispatch()

    def _backlog_failed(self, error: Exception) -> None:
        self.reading = False
        log.error("queue.read_failed", queue=self.name, error=str(error))

    # -- expiry and live-buffer cleanup ----------------------------------------------------

    def expired(self, messages: list[Message]) -> None:
        """Expired messages met in memory: never delivered; handled per the destination."""
        volatile = [m for m in messages if not m.store_seq]
        self.broker.expiry.expired(self.name, volatile)
        stored = [m.store_seq for m in messages if m.store_seq]
        persistence = self.persistence
        # Unless expiryonread, stored ones stay until the store's cleanup process removes them.
        on_read = self.broker.settings.get("PersQueueFileStore", "expiryonread") is True
        if stored and persistence is not None and on_read:
            persistence.expire_queue_messages(
                self.name,
                stored,
                lambda removed: self.broker.expiry.expired(
                    self.name, [Message.from_stored(m, 0) for m in removed]
                ),
            )

    def sweep_volatile(self, now_ms: int) -> None:
        """The VolQueueStore's cleanup: remove expired non-persistent messages."""
        expired = self.store.remove_if(self.name, lambda m: m.expired(now_ms))
        if expired:
            self.expired(expired)

    def sweep_cache(self, now_ms: int, idle_for: float) -> None:
        """The queue live buffer's cleanup: drop expired messages, and give back the
        whole buffer of a queue that has not delivered anything for ``idle_for`` seconds
        (its messages are read from the store again when a consumer comes)."""
        if not self.cache:
            return
        expired = [m for m in self.cache if m.expired(now_ms)]
        if expired:
            kept = [m for m in self.cache if not m.expired(now_ms)]
            self._clear_cache()
            for message in kept:
                self._cache_append(message)
            self.expired(expired)
        if self.cache and time.monotonic() - self.last_dispatch > idle_for:
            first = self.cache[0].store_seq
            self._clear_cache()
            self.backlog_after = first - 1

    def _clear_cache(self) -> None:
        assert self.persistence is not None
        self.persistence.cache_bytes -= self.cache_bytes
        self.cache.clear()
        self.cache_bytes = 0


class Topic(Destination):
    domain = PUBSUB

    def distribute(self, message: Message) -> None:
        if message.expires and message.expired(self.broker.runtime.now_ms()):
            self.broker.expiry.expired(self.name, [message])
            return
        stored = message.store_seq
        for subscription in self.consumers:
            if stored and subscription.replaying:
                continue  # its replay from the store delivers this one, in order
            subscription.deliver(message)

    def subscribe(self, subscription: Subscription) -> None:
        super().subscribe(subscription)
        if subscription.durable_key is not None:
            self.broker.replays.start(self, subscription)

    def unsubscribe(self, subscription: Subscription) -> None:
        self.consumers.remove(subscription)
        subscription.take_unacked()  # a durable subscriber gets them again from the store
        if subscription.durable_key is not None:
            self.broker.replays.stop(subscription)

    def acknowledged(self, subscription: Subscription, messages: list[Message]) -> None:
        """Move a durable subscriber's stored position past what it has acknowledged.

        The position is just before its oldest stored message still unacknowledged,
        so that nothing unacknowledged is skipped when it comes back.
        """
        key = subscription.durable_key
        persistence = self.broker.persistence
        if key is None or persistence is None:
            return
        position = max((m.store_seq for m in messages), default=0)
        if subscription.unacked:
            oldest = next((m.store_seq for m in subscription.unacked.values() if m.store_seq), 0)
            if oldest:
                position = oldest - 1
        if position > subscription.acked_position:
            subscription.acked_position = position
            persistence.acknowledgements.add((key, position))

    def rejected(self, messages: list[Message], requeue: bool) -> None:
        """A topic keeps nothing to deliver again now; a durable subscriber gets
        stored messages it did not acknowledge again when it comes back."""
