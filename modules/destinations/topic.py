"""A topic: each message to every current subscriber, through its live buffer.

A durable subscriber gets the stored messages it has not acknowledged from
its replay (``durable.py``), so it skips live copies of stored messages while
it replays and, after, those its replay already delivered.
"""

from __future__ import annotations

import collections
import itertools
from collections import deque

import structlog

from wiremq.modules.destinations.deadletter import REDELIVERY_LIMIT, REJECTED
from wiremq.modules.destinations.destination import (
    NOTHING,
    Destination,
    DestinationServices,
    count_into,
)
from wiremq.modules.destinations.subscription import DISCARDABLE, Subscription
from wiremq.modules.domains import PUBSUB
from wiremq.modules.flow.watermarks import Watermark
from wiremq.modules.journal.schema import NO_SUBSCRIBERS, SLOW_SUBSCRIBER, SUBSCRIBER_LEFT
from wiremq.modules.message import Message
from wiremq.stores.api import StoreTransaction
from wiremq.stores.durable import SubscriptionInfo

log = structlog.get_logger("wiremq.topic")


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
    OWN_WATERMARKS = (
        ("own_live", "TopicLiveBuffer", "DestinationManager", "topic"),
        ("store_watermark", "TopicStore", "TopicFileStore", ""),
    )

    def __init__(self, name: str, services: DestinationServices) -> None:
        super().__init__(name, services)
        self.buffer: deque[Message | None] = deque()  # None: an expired message's place
        self.first = 0  # index of buffer[0] in the topic's message sequence
        self.expired_on_arrival = 0  # received, and never in the buffer
        self.arrived = 0  # at the buffer's end since the last dispatch, not counted in it yet
        self.unwritten_dropped = 0  # messages dropped from subscribers that went away
        self.selecting = 0  # subscribers with a selector
        self.live = services.flow.live
        self.own_live: Watermark | None = None
        self._make_own_watermarks()
        # A large message goes through the buffer: its deliveries take the topic pool's
        # slots one subscriber at a time (``workpool``).
        self.large = services.pools.topics.large

    def held(self, kind: str) -> tuple[int, int]:
        if kind == "TopicLiveBuffer":
            waiting = [m for m in self.buffer if m is not None]
            return len(waiting), sum(m.size for m in waiting)
        return super().held(kind)

    def enqueue(self, messages: list[Message]) -> None:
        """Take messages into the live buffer; ``dispatch`` (after each batch) hands the
        run that arrived to every subscriber at once."""
        buffer = self.buffer
        for message in messages:
            if message.expires and message.expired(self.services.runtime.now_ms()):
                self.expired_on_arrival += 1
                self.services.expiry.expired(self.name, [message])
                continue
            buffer.append(message)
            self.arrived += 1

    def dispatch(self) -> None:
        """Move every subscriber on as far as it can take, then trim the buffer; what
        arrived since the last dispatch and still waits counts in the live buffer from
        now on (what everyone took at once never waited).

        A subscriber under the ``disconnect`` policy still behind once the frames
        queued meanwhile are written is checked then (``_disconnect_lagging``), so
        that a burst larger than its window does not count against it.
        """
        self.last_dispatch = self.services.runtime.monotonic()
        consumers = self.consumers
        arrived = self.arrived
        unselected: list[Message] | None = [] if arrived and self.selecting else None
        for subscription in consumers:
            self._pump(subscription, unselected)
        end = self.first + len(self.buffer)
        for subscription in consumers:
            if subscription.policy == "disconnect" and subscription.cursor < end:
                subscription.egress.outbox.wake(self._disconnect_lagging)
                break
        if arrived:
            self.arrived = 0
            self._no_one_took(end - arrived, unselected)
        self._trim(end - arrived)
        if arrived:  # what arrived and still waits counts in the live buffer from now on
            start = max(end - arrived, self.first) - self.first
            waiting = [m for m in itertools.islice(self.buffer, start, None) if m is not None]
            if waiting:
                self._count_live(len(waiting), sum(m.size for m in waiting))

    def _no_one_took(self, start: int, unselected: list[Message] | None) -> None:
        """Discard what no subscriber takes: with none, what arrived (from position
        ``start``); else what every one passed over in this dispatch (its selector:
        ``unselected`` holds each message once per subscriber that skipped it). A durable
        subscriber gets the stored ones from its replay."""
        if not self.consumers:
            offset = start - self.first
            dropped = [
                m
                for m in itertools.islice(self.buffer, offset, None)
                if m is not None and not m.store_seq
            ]
        elif unselected:
            everyone = len(self.consumers)
            passed = collections.Counter(map(id, unselected))
            dropped = list(
                {
                    id(m): m for m in unselected if passed[id(m)] == everyone and not m.store_seq
                }.values()
            )
        else:
            return
        if dropped:
            self.services.journal.discarded(dropped, NO_SUBSCRIBERS)
            self.fates.count("discarded", len(dropped))

    def _disconnect_lagging(self) -> None:
        """Disconnect the ``disconnect``-policy subscribers that, even after what was
        queued for them was written, are behind by a live-buffer high watermark."""
        for subscription in self.consumers:
            self._pump(subscription)
        for subscription in list(self.consumers):
            if subscription.policy == "disconnect" and self._too_far_behind(subscription.cursor):
                self.services.flow.slow_disconnects += 1
                subscription.slow_drop.disconnect_slow(subscription)
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

    def _pump(self, subscription: Subscription, unselected: list[Message] | None = None) -> None:
        """Deliver from the subscriber's cursor as far as it can take: the run that waits
        for it at once (``Subscription.deliver_run``); what its selector passes over is
        added to ``unselected`` if given.

        A ``discard-oldest`` subscriber that cannot take a non-persistent message
        loses it (counted as a discard, indicated on its next message) instead of
        holding the buffer.
        """
        buffer = self.buffer
        start = subscription.cursor - self.first
        if start >= len(buffer):
            return
        run = list(itertools.islice(buffer, start, None)) if start else list(buffer)
        taken = 0  # where in ``run`` the subscriber's cursor is
        while True:
            stopped = subscription.deliver_run(run, taken, unselected)
            subscription.cursor += stopped - taken
            if stopped == len(run):
                return
            message = run[stopped]  # one it is not ready for
            assert message is not None
            queue = message.egress_queue
            if subscription.policy != "discard-oldest" or queue not in DISCARDABLE:
                subscription.waiting = True
                return
            subscription.egress.queues.count_discard(queue)
            self.services.journal.discarded_for(subscription, (message,), SLOW_SUBSCRIBER)
            self.fates.count("discarded", 1)
            subscription.cursor += 1
            taken = stopped + 1

    def _trim(self, uncounted: int | None = None) -> None:
        """Drop what every subscriber has passed from the buffer; those from position
        ``uncounted`` on arrived in this dispatch and never counted in the live buffer."""
        buffer = self.buffer
        if not buffer:  # nothing to trim: no need to look at every subscriber
            return
        end = self.first + len(buffer)
        low = min((s.cursor for s in self.consumers), default=end)
        if uncounted is None:
            uncounted = end
        if low == end and uncounted <= self.first:  # a run everyone took: nothing counted
            buffer.clear()
            self.first = end
            return
        while self.first < low:
            message = buffer.popleft()
            if message is not None and self.first < uncounted:
                self._count_live(-1, -message.size)
            self.first += 1

    def _count_live(self, messages: int, nbytes: int) -> None:
        """Messages entering (positive) or leaving (negative) the live buffer."""
        count_into((self.live, self.own_live), messages, nbytes)

    def sweep_live_buffer(self, now_ms: int) -> None:
        """tlbcleanupinterval: expired messages leave the live buffer (never delivered)."""
        expired = []
        for index, message in enumerate(self.buffer):
            if message is not None and message.expired(now_ms):
                self.buffer[index] = None
                self._count_live(-1, -message.size)
                expired.append(message)
        if expired:
            self.services.expiry.expired(self.name, expired)

    def _holds_nothing(self) -> bool:
        """Nothing buffered, and no durable subscription keeps its messages."""
        persistence = self.services.persistence
        return not self.buffer and (persistence is None or not persistence.keeps(self.name))

    def subscribe(self, subscription: Subscription) -> None:
        subscription.cursor = self.first + len(self.buffer)  # only what comes from now on
        subscription.policy = self.policy.slowsubscriberpolicy
        super().subscribe(subscription)
        if subscription.accepts is not None:
            self.selecting += 1

    def registered(self, subscription: Subscription, info: SubscriptionInfo) -> None:
        """A durable subscriber's subscription is in the store: it replays what it missed."""
        self.services.replays.start(self, subscription, info)

    def unsubscribe(self, subscription: Subscription, unwritten: list[Message]) -> None:
        """A durable subscriber gets what it did not acknowledge again from the store when
        it comes back; the other messages never written to it are dropped, counted and
        logged."""
        del self.consumers[subscription]
        self._consumer_gone(subscription)
        if subscription.accepts is not None:
            self.selecting -= 1
        unacked = subscription.take_unacked()
        journal = self.services.journal
        journal.ended(subscription, unacked or unwritten)
        missed = self._missed(subscription)
        journal.discarded_for(subscription, missed, SUBSCRIBER_LEFT)
        durable = subscription.durable_key is not None
        lost = [m for m in unacked or unwritten if not (durable and m.store_seq)]
        self.fates.count("discarded", len(lost) + len(missed))
        if durable:
            self.services.replays.stop(subscription)
        dropped = [m for m in unwritten if not (durable and m.store_seq)]
        if dropped:
            self.unwritten_dropped += len(dropped)
            log.info(
                "subscription.unwritten_dropped",
                destination=self.name,
                subscription=subscription.sub_id,
                count=len(dropped),
                message_ids=[m.message_id for m in dropped[:20]],
            )
        self._trim()

    def _missed(self, subscription: Subscription) -> list[Message]:
        """What waits in the live buffer for a subscriber that leaves and that it will not
        get (a durable subscriber gets the stored ones from its replay)."""
        durable = subscription.durable_key is not None
        waiting = itertools.islice(self.buffer, max(0, subscription.cursor - self.first), None)
        return [m for m in waiting if m is not None and not (durable and m.store_seq)]

    def acknowledged(self, subscription: Subscription, messages: list[Message]) -> StoreTransaction:
        """Move a durable subscriber's stored position past what it has acknowledged.

        The position is just before its oldest stored message still unacknowledged,
        so that nothing unacknowledged is skipped when it comes back; the stored
        messages acknowledged past it are stored as single acknowledgements and
        remembered (``Persistence.acked_beyond``), so that its replays skip them.
        """
        key = subscription.durable_key
        if key is None:
            return NOTHING
        position = max((m.store_seq for m in messages), default=0)
        if subscription.unacked:
            oldest = next((m.store_seq for m in subscription.unacked.values() if m.store_seq), 0)
            if oldest:
                position = oldest - 1
        persistence = self.services.persistence
        assert persistence is not None
        beyond = persistence.acked_beyond
        past = [m.store_seq for m in messages if m.store_seq > position]
        if past:
            beyond.setdefault(key, set()).update(past)
        singles = tuple((key, seq) for seq in past)
        if position <= subscription.acked_position:
            return StoreTransaction(single_acknowledgements=singles) if singles else NOTHING
        subscription.acked_position = position
        kept = beyond.get(key)
        if kept:
            beyond[key] = {seq for seq in kept if seq > position}
        return StoreTransaction(
            acknowledgements=((key, position),), single_acknowledgements=singles
        )

    def rejected(
        self, subscription: Subscription, messages: list[Message], requeue: bool
    ) -> StoreTransaction:
        """NACKed messages go to that subscriber again, flagged as redelivered (a copy:
        the other subscribers share the message), unless that is more than
        ``maxredeliveries``; with requeue false, or past that, a copy goes to the dead
        message queue and the message is done with for the subscriber, which for a
        durable subscriber is an acknowledgement."""
        copies = [message.redelivery() for message in messages]
        limit = self.policy.maxredeliveries
        dead = copies if not requeue else [c for c in copies if 0 <= limit < c.redeliveries]
        if dead:
            reason = REJECTED if not requeue else REDELIVERY_LIMIT
            self.services.dead_letters.move(self.name, dead, reason, shared=True)
        if not requeue:
            return self.acknowledged(subscription, messages)
        if subscription.ended:  # a durable subscriber gets them from the store when back
            return NOTHING
        again = [c for c in copies if c not in dead]
        self.fates.count("redelivered", len(again))
        subscription.redeliver(again)
        done = [m for m, c in zip(messages, copies, strict=True) if c in dead]
        return self.acknowledged(subscription, done) if done else NOTHING

    @property
    def received(self) -> int:
        return self.expired_on_arrival + self.first + len(self.buffer)

    def depth(self) -> int:
        return self.held("TopicLiveBuffer")[0]

    def state(self) -> dict[str, object]:
        waiting, waiting_bytes = self.held("TopicLiveBuffer")
        return {
            **self._state("topic", waiting, waiting_bytes),
            "subscribers": len(self.consumers),
            "consumers": len(self.consumers),
            "ready_subscribers": sum(1 for c in self.consumers if c.ready),
            "live_buffer_messages": waiting,
            "live_buffer_bytes": waiting_bytes,
            "durable_subscriptions": self.durable_count(),
            "policy": self.policy.slowsubscriberpolicy,
            "unwritten_dropped": self.unwritten_dropped,
        }

    def durable_count(self) -> int:
        """Durable subscriptions of this topic (connected or not)."""
        persistence = self.services.persistence
        return persistence.durable_topics[self.name] if persistence is not None else 0
