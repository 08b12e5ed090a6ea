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

import itertools
from abc import ABC, abstractmethod
from collections import deque
from typing import TYPE_CHECKING

import structlog

from wiremq.config.registry import Value
from wiremq.modules.flow.watermarks import Producer, Watermark, enabled, limits
from wiremq.modules.message import Message
from wiremq.modules.pipeline import P2P, PUBSUB
from wiremq.modules.subscription import DISCARDABLE, Subscription
from wiremq.stores.records import StoredMessage
from wiremq.stores.results import Batch

if TYPE_CHECKING:
    from wiremq.modules.broker import Broker

QUEUE_PREFIX = "/queue/"
TOPIC_PREFIX = "/topic/"

log = structlog.get_logger("wiremq.destinations")


def _count(watermarks: tuple[Watermark | None, ...], messages: int, nbytes: int) -> None:
    """Count messages into (positive) or out of (negative) every watermark given."""
    for watermark in watermarks:
        if watermark is not None:
            if messages > 0:
                watermark.add(messages, nbytes)
            else:
                watermark.remove(-messages, -nbytes)


class Destination(ABC):
    """A named queue or topic with its consumers, its producers and the watermarks
    (``gates``) whose trips stop those producers."""

    domain: str

    def __init__(self, name: str, broker: Broker) -> None:
        self.name = name
        self.broker = broker
        self.consumers: list[Subscription] = []
        self.producers: set[Producer] = set()
        self.max_ttl = int(self.setting("maxttl"))
        # Spool-check limits (not changeable at run time, so read once).
        self.max_msg_size = int(self.setting("maxmsgsize"))
        self.spool_quota = int(self.setting("spoolquota"))
        self.low_priority_limit = int(self.setting("lowpriorityrejectlimit"))
        self.shut_down = self.setting("shutdown") is True
        # A full store refuses persistent SENDs here (an ERROR) instead of stopping producers.
        self.fail_when_full = self.setting("whenfull") == "fail"
        store_gate = broker.store_watermarks[self.domain]
        self.gates: list[Watermark] = [
            g
            for g in broker.domain_gates[self.domain]
            if not (self.fail_when_full and g is store_gate)
        ]
        self.store_watermark: Watermark | None = None  # its persistent store's, if any

    def setting(self, name: str) -> Value:
        """A ``Destination`` parameter as it applies here."""
        return self.broker.settings.for_destination(self.name, name)

    def _own_watermark(
        self, kind: str, group: str, prefix: str = "", stops: bool = True
    ) -> Watermark | None:
        """A per-destination watermark of ``group``, if its parameters switch one on;
        ``stops`` says whether its trips stop this destination's producers."""
        scope = limits(self.broker.settings, group, prefix)
        if not enabled(scope):
            return None
        producers = (lambda: self.producers) if stops else set
        watermark = Watermark(f"{kind} {self.name}", scope, producers)
        if stops:
            self.gates.append(watermark)
        return watermark

    def add_producer(self, producer: Producer) -> None:
        """A client sends here: it is stopped at once if a watermark is tripped."""
        self.producers.add(producer)
        self.broker.producers[self.domain].add(producer)
        for gate in self.gates:
            gate.producer_joined(producer)

    def remove_producer(self, producer: Producer) -> None:
        self.producers.discard(producer)
        for gate in self.gates:
            gate.forget(producer)

    def subscribe(self, subscription: Subscription) -> None:
        self.consumers.append(subscription)

    @abstractmethod
    def consumer_ready(self) -> None:
        """A consumer that was skipped for not being ready may be ready now."""

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
        self.last_dispatch = broker.runtime.monotonic()
        self._arrivals = 0
        self._next = 0  # round-robin position among consumers
        self.volatile = broker.vol_watermark
        self.own_volatile = self._own_watermark("VolQueueStore", "VolQueueStoreImpl")
        self.store_watermark = self._own_watermark(
            "PersQueueStore", "PersQueueFileStore", stops=not self.fail_when_full
        )

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
        self._count_volatile(1, message.size)

    def _count_volatile(self, messages: int, nbytes: int) -> None:
        """Messages entering (positive) or leaving (negative) the VolQueueStore."""
        _count((self.volatile, self.own_volatile), messages, nbytes)

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

    def _cache_append(self, message: Message, front: bool = False) -> None:
        if front:
            self.cache.appendleft(message)
        else:
            self.cache.append(message)
        self._cache_count(message.size)

    def _cache_count(self, nbytes: int) -> None:
        """Bytes entering (positive) or leaving (negative) the live buffer."""
        self.cache_bytes += nbytes
        assert self.persistence is not None
        self.persistence.cache_bytes += nbytes

    # -- delivery --------------------------------------------------------------------------

    def _peek(self) -> Message | None:
        """The next message to deliver: the older of the two delivery modes' heads."""
        volatile = self.store.peek(self.name)
        if not self.cache:
            return volatile
        cached = self.cache[0]
        if volatile is not None and volatile.arrival < cached.arrival:
            return volatile
        return cached

    def _take(self, message: Message) -> None:
        """Remove the message ``_peek`` returned."""
        if self.cache and self.cache[0] is message:
            self.cache.popleft()
            self._cache_count(-message.size)
        else:
            self.store.pop(self.name)
            self._count_volatile(-1, -message.size)

    def dispatch(self) -> None:
        """Hand waiting messages to ready consumers, one each in turn."""
        consumers = self.consumers
        count = len(consumers)
        if not count:
            return
        turn = self._next
        now_ms = 0
        expired: list[Message] = []
        message = self._peek()
        while message is not None:
            if message.expires:
                now_ms = now_ms or self.broker.runtime.now_ms()
                if message.expires <= now_ms:
                    self._take(message)
                    expired.append(message)
                    message = self._peek()
                    continue
            for _ in range(count):
                consumer = consumers[turn % count]
                turn += 1
                if consumer.ready_for(message):
                    break
                consumer.waiting = True
            else:
                break  # no consumer is ready: the message waits
            self._take(message)
            consumer.deliver(message)
            message = self._peek()
        self._next = turn % count
        self.last_dispatch = self.broker.runtime.monotonic()
        if expired:
            self.expired(expired)
        if self.backlog_after is not None and not self.reading and not self.cache:
            self._read_backlog()

    consumer_ready = dispatch

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
            self._count_volatile(len(volatile), sum(m.size for m in volatile))
        for message in reversed([m for m in messages if m.store_seq]):
            self._cache_append(message, front=True)
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
            self.broker.expiry.expired_stored(self.name, batch.expired)
            self.broker.store_changed(P2P, [self.name])
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

            def removed(found: list[StoredMessage]) -> None:
                self.broker.expiry.expired_stored(self.name, found)
                self.broker.store_changed(P2P, [self.name])

            persistence.expire_queue_messages(self.name, stored, removed)

    def sweep_volatile(self, now_ms: int) -> None:
        """The VolQueueStore's cleanup: remove expired non-persistent messages."""
        expired = self.store.remove_if(self.name, lambda m: m.expired(now_ms))
        if expired:
            self._count_volatile(-len(expired), -sum(m.size for m in expired))
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
        if self.cache and self.broker.runtime.monotonic() - self.last_dispatch > idle_for:
            first = self.cache[0].store_seq
            self._clear_cache()
            self.backlog_after = first - 1

    def _clear_cache(self) -> None:
        self._cache_count(-self.cache_bytes)
        self.cache.clear()

    def state(self) -> dict[str, object]:
        return {
            "name": self.name,
            "consumers": len(self.consumers),
            "ready_consumers": sum(1 for c in self.consumers if c.ready),
            "producers": len(self.producers),
            "volatile_messages": self.store.count(self.name),
            "volatile_bytes": self.store.byte_count(self.name),
            "live_buffer_messages": len(self.cache),
            "live_buffer_bytes": self.cache_bytes,
            "backlog_in_store": self.backlog_after is not None,
            "watermarks": [g.state() for g in self.gates],
        }


class Topic(Destination):
    """A topic and its live buffer.

    Messages a subscriber cannot take yet wait in the live buffer; each
    subscriber has a cursor into it, and a message leaves the buffer once every
    subscriber has passed it. The buffer's watermarks (per topic and over all
    topics) stop publishers. What a subscriber that cannot keep up does to the
    others is its policy (``slowsubscriberpolicy``): ``block`` holds messages in
    the buffer for it, ``discard-oldest`` lets its own egress queue drop its
    oldest non-persistent messages, ``disconnect`` disconnects it.
    """

    domain = PUBSUB

    def __init__(self, name: str, broker: Broker) -> None:
        super().__init__(name, broker)
        self.buffer: deque[Message | None] = deque()  # None: an expired message's place
        self.first = 0  # index of buffer[0] in the topic's message sequence
        self.live = broker.tlb_watermark
        self.own_live = self._own_watermark("TopicLiveBuffer", "DestinationManager", "topic")
        self.store_watermark = self._own_watermark(
            "TopicStore", "TopicFileStore", stops=not self.fail_when_full
        )
        self.policy = str(self.setting("slowsubscriberpolicy"))

    def distribute(self, message: Message) -> None:
        if message.expires and message.expired(self.broker.runtime.now_ms()):
            self.broker.expiry.expired(self.name, [message])
            return
        consumers = self.consumers
        if not self.buffer and all(
            s.ready_for(message) or (message.store_seq and s.replaying) for s in consumers
        ):  # the common case: everyone keeps up, nothing is buffered
            stored = message.store_seq
            for subscription in consumers:
                subscription.cursor += 1
                if not (stored and subscription.replaying):
                    subscription.deliver(message)
            self.first += 1
            return
        self.buffer.append(message)
        self._count_live(1, message.size)
        self.consumer_ready()

    def consumer_ready(self) -> None:
        """Move every subscriber on as far as it can take, then trim the buffer.

        A subscriber under the ``disconnect`` policy still behind once the frames
        queued meanwhile are written is checked then (``_disconnect_lagging``), so
        that a burst larger than its window does not count against it.
        """
        for subscription in self.consumers:
            self._pump(subscription)
        end = self.first + len(self.buffer)
        for subscription in self.consumers:
            if subscription.policy == "disconnect" and subscription.cursor < end:
                subscription.egress.outbox.wake(self._disconnect_lagging)
                break
        self._trim()

    def _disconnect_lagging(self) -> None:
        """Disconnect the ``disconnect``-policy subscribers that, even after what was
        queued for them was written, are behind by a live-buffer high watermark."""
        for subscription in self.consumers:
            self._pump(subscription)
        for subscription in list(self.consumers):
            if subscription.policy == "disconnect" and self._too_far_behind(subscription.cursor):
                self.broker.disconnect_slow(subscription)
        self._trim()

    def _too_far_behind(self, cursor: int) -> bool:
        """Whether what waits from ``cursor`` on reaches a live-buffer high watermark
        (messages or bytes; this topic's own if it has one, else the global one)."""
        watermark = self.own_live if self.own_live is not None else self.live
        if watermark is None:
            return False
        waiting = [
            m for m in itertools.islice(self.buffer, cursor - self.first, None) if m is not None
        ]
        gauge = watermark.gauge
        by_messages = gauge.msg_threshold.enabled and len(waiting) >= gauge.msg_threshold.high
        by_bytes = gauge.byte_threshold.enabled and (
            sum(m.size for m in waiting) >= gauge.byte_threshold.high
        )
        return by_messages or by_bytes

    def _pump(self, subscription: Subscription) -> None:
        """Deliver from the subscriber's cursor as far as it can take.

        A ``discard-oldest`` subscriber that cannot take a non-persistent message
        loses it (counted as a discard, indicated on its next message) instead of
        holding the buffer.
        """
        buffer = self.buffer
        end = self.first + len(buffer)
        while subscription.cursor < end:
            message = buffer[subscription.cursor - self.first]
            if message is not None and not (message.store_seq and subscription.replaying):
                if not subscription.ready_for(message):
                    queue = message.egress_queue
                    if subscription.policy != "discard-oldest" or queue not in DISCARDABLE:
                        subscription.waiting = True
                        return
                    subscription.egress.queues.count_discard(queue)
                else:
                    subscription.deliver(message)
            subscription.cursor += 1

    def _trim(self) -> None:
        end = self.first + len(self.buffer)
        low = min((s.cursor for s in self.consumers), default=end)
        buffer = self.buffer
        while self.first < low:
            message = buffer.popleft()
            self.first += 1
            if message is not None:
                self._count_live(-1, -message.size)

    def _count_live(self, messages: int, nbytes: int) -> None:
        """Messages entering (positive) or leaving (negative) the live buffer."""
        _count((self.live, self.own_live), messages, nbytes)

    def sweep_live_buffer(self, now_ms: int) -> None:
        """tlbcleanupinterval: expired messages leave the live buffer (never delivered)."""
        expired = []
        for index, message in enumerate(self.buffer):
            if message is not None and message.expired(now_ms):
                self.buffer[index] = None
                self._count_live(-1, -message.size)
                expired.append(message)
        if expired:
            self.broker.expiry.expired(self.name, expired)

    def subscribe(self, subscription: Subscription) -> None:
        subscription.cursor = self.first + len(self.buffer)  # only what comes from now on
        subscription.policy = self.policy
        super().subscribe(subscription)
        if subscription.durable_key is not None:
            self.broker.replays.start(self, subscription)

    def unsubscribe(self, subscription: Subscription) -> None:
        self.consumers.remove(subscription)
        subscription.take_unacked()  # a durable subscriber gets them again from the store
        if subscription.durable_key is not None:
            self.broker.replays.stop(subscription)
        self._trim()

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

    def state(self) -> dict[str, object]:
        return {
            "name": self.name,
            "subscribers": len(self.consumers),
            "ready_subscribers": sum(1 for c in self.consumers if c.ready),
            "producers": len(self.producers),
            "live_buffer_messages": sum(1 for m in self.buffer if m is not None),
            "live_buffer_bytes": sum(m.size for m in self.buffer if m is not None),
            "policy": self.policy,
            "watermarks": [g.state() for g in self.gates],
        }
