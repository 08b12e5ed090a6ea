"""A queue: each message to exactly one consumer, round-robin over its consumers.

Its non-persistent messages wait in the VolQueueStore; its persistent ones are
in the persistent store, and the most recent are also kept in memory, in the
queue live buffer (``cache``), up to persqueuebytehighwatermark. When a
persistent message does not fit there, it and every later one are left in
the store (``backlog_after``) and read back in order once the buffer has
drained. Messages of the two delivery modes waiting together go out in the
order they reached the queue; within one mode, always in order.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Collection

import structlog

from wiremq.config.groups import QueueStoreSettings
from wiremq.modules.destination import NOTHING, Destination, DestinationServices, count_into
from wiremq.modules.flow.watermarks import Watermark
from wiremq.modules.message import Message
from wiremq.modules.pipeline import P2P
from wiremq.modules.subscription import Subscription
from wiremq.stores.api import Batch, StoreTransaction
from wiremq.stores.records import StoredMessage

log = structlog.get_logger("wiremq.queue")


class Queue(Destination):
    domain = P2P
    OWN_WATERMARKS = (
        ("own_volatile", "VolQueueStore", "VolQueueStoreImpl", ""),
        ("store_watermark", "PersQueueStore", "PersQueueFileStore", ""),
    )

    def __init__(self, name: str, services: DestinationServices) -> None:
        super().__init__(name, services)
        self.fifo = services.volatile.fifo(name)  # its non-persistent messages (VolQueueStore)
        self._volatile_delta = [0, 0]  # messages, bytes in or out since the watermarks knew
        self.persistence = services.persistence
        self.reading = QueueStoreSettings.read(services.settings, "PersQueueFileStore")
        self.cache: deque[Message] = deque()  # the queue live buffer, in store order
        self.cache_bytes = 0
        self.backlog_after: int | None = None  # stored messages after this seq are not cached
        self.left_upto = 0  # the last stored message left in the store, not cached
        # A live buffer given back: its messages are read again from the store, and of the
        # stored messages up to ``given_back_upto`` only those (the others there are held
        # by consumers, or acknowledged and on their way out of the store).
        self.given_back: set[int] = set()
        self.given_back_upto = 0
        # Stored messages an operator took out of the backlog (deleted, moved) whose removal
        # a read may not see yet: its reads skip them.
        self.withheld: set[int] = set()
        self.reading_backlog = False
        self._arrivals = 0
        self._read_back = 0  # arrivals that were stored messages read back, not new ones
        # In round-robin order: each consumer offered a message moves to the end.
        self.consumers: OrderedDict[Subscription, None] = OrderedDict()
        self.volatile = services.flow.volatile
        self.own_volatile: Watermark | None = None
        self._make_own_watermarks()

    def configure(self) -> None:
        super().configure()
        self.reading = QueueStoreSettings.read(self.services.settings, "PersQueueFileStore")

    def held(self, kind: str) -> tuple[int, int]:
        if kind == "VolQueueStore":
            return len(self.fifo), self.fifo.bytes
        return super().held(kind)

    # -- arrival ---------------------------------------------------------------------------

    def enqueue(self, message: Message) -> None:
        self._arrivals += 1
        message.arrival = self._arrivals
        if message.store_seq:
            self._cache_or_leave(message)
        else:
            self.fifo.append(message)
            delta = self._volatile_delta
            delta[0] += 1
            delta[1] += message.size

    def _count_volatile(self) -> None:
        """Tell the VolQueueStore watermarks what came in and went out since they last knew:
        once per dispatch, not per message (a message passing straight through moves
        nothing)."""
        delta = self._volatile_delta
        if delta[0] or delta[1]:
            count_into((self.volatile, self.own_volatile), delta[0], delta[1])
            delta[0] = delta[1] = 0

    def _cache_or_leave(self, message: Message) -> None:
        persistence = self.persistence
        assert persistence is not None
        if (
            self.backlog_after is None
            and self.cache_bytes + message.size <= persistence.queue_cache_limit
            and persistence.cache_bytes + message.size <= persistence.cache_limit
        ):
            self._cache_append(message)
        else:
            if self.backlog_after is None:
                self.backlog_after = message.store_seq - 1  # it, and all after, stay in the store
            self.left_upto = message.store_seq

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

    def dispatch(self) -> None:
        """Hand waiting messages to ready consumers, one each in turn: the older of the
        two delivery modes' heads first (inlined: this runs for every message)."""
        consumers = self.consumers
        count = len(consumers)
        fifo = self.fifo
        if not count:
            self._count_volatile()
            return
        runtime = self.services.runtime
        rotate = consumers.move_to_end
        cache = self.cache
        now_ms = 0
        taken = taken_bytes = 0  # non-persistent messages taken, for the watermarks
        expired: list[Message] = []
        while fifo or cache:
            if not cache or (fifo and fifo[0].arrival < cache[0].arrival):
                message, cached = fifo[0], False
            else:
                message, cached = cache[0], True
            consumer: Subscription | None = None
            if message.expires and message.expires <= (now_ms := now_ms or runtime.now_ms()):
                expired.append(message)
            else:
                for _ in range(count):
                    consumer = next(iter(consumers))
                    rotate(consumer)  # offered a message: its turn is over
                    if consumer.ready_for(message):
                        break
                    consumer.waiting = True
                else:
                    break  # no consumer is ready: the message waits
            if cached:
                cache.popleft()
                self._cache_count(-message.size)
            else:
                fifo.popleft()
                taken += 1
                taken_bytes += message.size
            if consumer is not None:
                consumer.deliver(message)
        delta = self._volatile_delta
        delta[0] -= taken
        delta[1] -= taken_bytes
        self._count_volatile()
        self.last_dispatch = runtime.monotonic()
        if expired:
            self.expired(expired)
        if self.backlog_after is not None and not self.reading_backlog and not cache:
            self._read_backlog()

    def subscribe(self, subscription: Subscription) -> None:
        super().subscribe(subscription)
        self.dispatch()

    def _holds_nothing(self) -> bool:
        persistence = self.persistence
        return (
            not self.fifo
            and not self.cache
            and self.backlog_after is None
            and not self.reading_backlog
            and (persistence is None or not persistence.store.count(self.name)[0])
        )

    def remove(self) -> None:
        super().remove()
        self.services.volatile.drop(self.name)

    def unsubscribe(self, subscription: Subscription, unwritten: list[Message]) -> None:
        """What the consumer held goes back to the front: every unacknowledged message in
        a client mode, what was never written to it in auto mode (the rest is taken)."""
        del self.consumers[subscription]
        self._consumer_gone(subscription)
        if subscription.unacked is None:
            held = sorted(unwritten, key=lambda m: m.arrival)
        else:
            held = subscription.take_unacked()
        self.services.journal.ended(subscription, held)
        self.requeue(held, set(unwritten))

    def acknowledged(self, subscription: Subscription, messages: list[Message]) -> StoreTransaction:
        return self._removal(messages)

    def rejected(
        self, subscription: Subscription, messages: list[Message], requeue: bool
    ) -> StoreTransaction:
        if requeue:
            self.requeue(messages)
            return NOTHING
        return self._removal(messages)  # dropped on purpose: it leaves the store too

    def _removal(self, messages: list[Message]) -> StoreTransaction:
        stored = tuple((self.name, m.store_seq) for m in messages if m.store_seq)
        return StoreTransaction(removals=stored) if stored else NOTHING

    def requeue(self, messages: list[Message], unwritten: Collection[Message] = ()) -> None:
        """Put messages back at the front and deliver them again, flagged as redelivered
        unless they were never written to a consumer."""
        if not messages:
            return
        for message in messages:
            if message not in unwritten:
                message.mark_redelivered()
        volatile = [m for m in messages if not m.store_seq]
        if volatile:
            self.fifo.push_front(volatile)
            self._volatile_delta[0] += len(volatile)
            self._volatile_delta[1] += sum(m.size for m in volatile)
        for message in reversed([m for m in messages if m.store_seq]):
            self._cache_append(message, front=True)
        self.dispatch()

    # -- the store backlog -----------------------------------------------------------------

    def _read_backlog(self) -> None:
        persistence = self.persistence
        assert persistence is not None and self.backlog_after is not None
        self.reading_backlog = True
        room = max(1, persistence.queue_cache_limit - self.cache_bytes)
        persistence.read(
            self.name,
            self.backlog_after,
            self.reading.readmsgamount,
            room,
            self._backlog_read,
            self._backlog_failed,
        )

    def _backlog_read(self, batch: Batch) -> None:
        self.reading_backlog = False
        kept = self._not_handed_out(batch.messages)
        for seq, stored in kept:
            message = Message.from_stored(stored, seq)
            self._arrivals += 1
            message.arrival = self._arrivals
            self._cache_append(message)
        self._read_back += len(kept)
        expired = self._not_handed_out(batch.expired)
        if expired and self.reading.expiryonread:
            name = self.name
            self.services.expiry.expired_stored([((name, seq), m) for seq, m in expired])
        if batch.last_seq >= self.given_back_upto:
            self.given_back.clear()  # read past them all (any not met left the store)
        # A message committed and left in the store while the read ran may be after what
        # the read saw: the backlog ends only once a read has seen every one left.
        at_end = batch.at_end and self.left_upto <= batch.last_seq
        self.backlog_after = None if at_end else batch.last_seq
        if self.withheld:
            self.withheld = set() if at_end else {s for s in self.withheld if s > batch.last_seq}
        self.dispatch()

    def _not_handed_out(
        self, read: list[tuple[int, StoredMessage]]
    ) -> list[tuple[int, StoredMessage]]:
        """What a backlog read found, less the stored messages this queue handed out before
        it gave its live buffer back (they are still in the store until acknowledged), and
        those an operator took."""
        if self.withheld:
            read = [(seq, m) for seq, m in read if seq not in self.withheld]
        given_back = self.given_back
        if not given_back:
            return read
        upto = self.given_back_upto
        kept = [(seq, m) for seq, m in read if seq > upto or seq in given_back]
        for seq, _ in kept:
            given_back.discard(seq)
        return kept

    def _backlog_failed(self, error: Exception) -> None:
        self.reading_backlog = False
        log.error("queue.read_failed", queue=self.name, error=str(error))

    # -- expiry and live-buffer cleanup ----------------------------------------------------

    def expired(self, messages: list[Message]) -> None:
        """Expired messages met in memory: never delivered; handled per the destination.

        Unless expiryonread, stored ones stay until the store's cleanup removes them.
        """
        expiry = self.services.expiry
        volatile = [m for m in messages if not m.store_seq]
        if volatile:
            expiry.expired(self.name, volatile)
        if self.reading.expiryonread:
            stored = [((self.name, m.store_seq), m.to_stored(0)) for m in messages if m.store_seq]
            if stored:
                expiry.expired_stored(stored)

    def sweep_volatile(self, now_ms: int) -> None:
        """The VolQueueStore's cleanup: remove expired non-persistent messages."""
        expired = self.fifo.remove_if(lambda m: m.expired(now_ms))
        if expired:
            self._volatile_delta[0] -= len(expired)
            self._volatile_delta[1] -= sum(m.size for m in expired)
            self._count_volatile()
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
        idle = self.services.runtime.monotonic() - self.last_dispatch > idle_for
        if self.cache and idle and not self.reading_backlog:
            self._give_back()

    def _give_back(self) -> None:
        """Drop the live buffer; its messages are read from the store again, in store order.

        Stored messages it handed out and that are not yet removed (held by a consumer, or
        acknowledged with the removal on its way to the store) lie among them in the store:
        the reads skip them by remembering exactly which ones were given back. Every
        message after ``given_back_upto`` was never handed out.
        """
        seqs = [m.store_seq for m in self.cache]
        self.given_back.update(seqs)
        upto = max(seqs) if self.backlog_after is None else self.backlog_after
        self.given_back_upto = max(self.given_back_upto, upto)
        self.left_upto = max(self.left_upto, upto)
        self._clear_cache()
        self.backlog_after = min(self.given_back) - 1

    def _clear_cache(self) -> None:
        self._cache_count(-self.cache_bytes)
        self.cache.clear()

    @property
    def received(self) -> int:
        return self._arrivals - self._read_back

    # -- operator actions (the console) ----------------------------------------------------

    def waiting(self) -> list[Message]:
        """The messages waiting in memory, in the order they are delivered."""
        return sorted([*self.fifo, *self.cache], key=lambda m: m.arrival)

    def take_waiting(self, wanted: Callable[[Message], bool]) -> list[Message]:
        """Take the messages waiting in memory that are ``wanted`` out of the queue (those
        delivered and not yet acknowledged are not waiting); stored ones stay in the store
        for the caller to remove."""
        volatile = self.fifo.remove_if(wanted)
        if volatile:
            self._volatile_delta[0] -= len(volatile)
            self._volatile_delta[1] -= sum(m.size for m in volatile)
            self._count_volatile()
        cached = [m for m in self.cache if wanted(m)]
        if cached:
            kept = [m for m in self.cache if not wanted(m)]
            self._clear_cache()
            for message in kept:
                self._cache_append(message)
        return volatile + cached

    def backlog_start(self) -> int | None:
        """Where the stored messages not in memory begin (after this position), or None if
        every waiting message is in memory."""
        return self.backlog_after

    def waiting_stored(
        self, read: list[tuple[int, StoredMessage]]
    ) -> list[tuple[int, StoredMessage]]:
        """Of what a read of the store after ``backlog_start`` found, the messages that wait
        here (not those delivered, and not acknowledged, nor taken by an operator)."""
        upto, given_back, withheld = self.given_back_upto, self.given_back, self.withheld
        return [
            (seq, m)
            for seq, m in read
            if (not given_back or seq > upto or seq in given_back) and seq not in withheld
        ]

    def withhold(self, positions: list[int]) -> None:
        """Stored messages an operator takes out of the backlog: no read hands them out,
        even one that ran before their removal was committed."""
        self.withheld.update(positions)

    def backlog_purged(self, upto: int) -> None:
        """Every stored message waiting up to ``upto`` was removed: unless messages were
        left in the store after it meanwhile, there is no backlog any more."""
        if self.left_upto <= upto and not self.reading_backlog and self.backlog_after is not None:
            self.backlog_after = None
            self.given_back.clear()
            self.withheld.clear()

    def state(self) -> dict[str, object]:
        held = [m for s in self.consumers if s.unacked for m in s.unacked.values()]
        held_volatile = [m for m in held if not m.store_seq]
        stored_messages, stored_bytes = self.stored()
        messages = len(self.fifo) + len(held_volatile) + stored_messages
        nbytes = self.fifo.bytes + sum(m.size for m in held_volatile) + stored_bytes
        return {
            **self._state("queue", messages, nbytes),
            "unacked": len(held),
            "consumers": len(self.consumers),
            "ready_consumers": sum(1 for c in self.consumers if c.ready),
            "volatile_messages": len(self.fifo),
            "volatile_bytes": self.fifo.bytes,
            "live_buffer_messages": len(self.cache),
            "live_buffer_bytes": self.cache_bytes,
            "backlog_in_store": self.backlog_after is not None,
        }
