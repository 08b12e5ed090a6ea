"""A queue: each message to exactly one consumer, the one that selects it and can take it.

Messages wait in memory in one ``Levels`` (``main``): higher priority first,
in arrival order within a priority, both delivery modes together. Its
non-persistent messages are counted in the VolQueueStore; its persistent ones
are in the persistent store too, and kept in memory (the queue live buffer)
up to persqueuebytehighwatermark: the rest stay in the store and are read
back (``backlog.py``).

A queue dispatches one of two ways:

- *plain*, while every consumer takes everything (no selector, no exclusive
  consumer, no message group): each waiting message in order to the next
  ready consumer, round-robin (``dispatch``, inlined: this runs for every
  message);
- *selective* otherwise (``_dispatch_selective``): consumers with one selector
  share a ``Filter`` whose own list holds the waiting messages it selects, so
  a consumer finds its next message at the head of its list whatever waits
  before it that it does not select: a message nobody selects waits without
  holding back the ones behind it, and no consumer is starved however large
  the backlog. An arriving message is tested once against the selectors that
  can match it (``Matcher``), handed at once to a ready consumer that selects
  it, else listed; then every ready consumer takes the head of its list in
  turn. Message groups (``groups.py``) and an exclusive consumer
  (``activemq.exclusive``: only the first such consumer gets messages while
  it lives) are served here too.

A message that comes back unacknowledged (a NACK, or its consumer went away
after it was written) counts a redelivery (``x-delivery-count``); past
``maxredeliveries`` it goes to the dead message queue (``dead_letter``),
otherwise back to its place, after ``redeliverydelay`` (growing by
``redeliverybackoff``) if one is set.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection

import structlog

from wiremq.config.groups import QueueStoreSettings
from wiremq.modules.destinations.backlog import Read, StoreBacklog
from wiremq.modules.destinations.deadletter import REDELIVERY_LIMIT, REJECTED
from wiremq.modules.destinations.destination import (
    NOTHING,
    Destination,
    DestinationServices,
    count_into,
)
from wiremq.modules.destinations.filters import Filter, Matcher
from wiremq.modules.destinations.groups import CLOSES_GROUP, GROUP_SEQUENCE, Groups
from wiremq.modules.destinations.levels import Levels, before, delivery_order
from wiremq.modules.destinations.subscription import Subscription
from wiremq.modules.flow.watermarks import Watermark
from wiremq.modules.message import GROUP, PRIORITY, Message
from wiremq.modules.pipeline.chain import P2P
from wiremq.stores.api import Batch, Match, StoreTransaction
from wiremq.stores.records import JMS_DEFAULT_PRIORITY, StoredMessage

log = structlog.get_logger("wiremq.queue")

DEFAULT = JMS_DEFAULT_PRIORITY


class Queue(Destination):
    domain = P2P
    OWN_WATERMARKS = (
        ("own_volatile", "VolQueueStore", "VolQueueStoreImpl", ""),
        ("store_watermark", "PersQueueStore", "PersQueueFileStore", ""),
    )

    def __init__(self, name: str, services: DestinationServices) -> None:
        super().__init__(name, services)
        self.main = Levels(home=True)  # every message waiting in memory
        self.main.checks = False  # a plain queue's list: see levels.py
        self._plain_level = self.main.levels[DEFAULT]
        self.counter = services.volatile.counter(name)  # its non-persistent ones, counted
        self._volatile_delta = [0, 0]  # messages, bytes in or out since the watermarks knew
        self.persistence = services.persistence
        self.reading = QueueStoreSettings.read(services.settings, "PersQueueFileStore")
        self.cache_bytes = 0  # persistent messages in memory (the queue live buffer)
        self.backlog = StoreBacklog(self.reading)
        self.arrivals = 0  # numbers messages in arrival order
        self._read_back = 0  # arrivals that were stored messages read back, not new ones
        # The delivery counts of redelivered messages given back to the store (which keeps
        # no delivery state), by position, until they are read back.
        self.given_back_redeliveries: dict[int, int] = {}
        # In round-robin order: each consumer offered a message moves to the end.
        self.consumers: OrderedDict[Subscription, None] = OrderedDict()
        self.everyone = Filter(None, self.main)  # the consumers without a selector
        self.filters: dict[str, Filter] = {}  # the others, by selector text
        self.matcher = Matcher()
        self.groups = Groups()
        self.exclusive: list[Subscription] = []  # exclusive consumers, the first one active
        self.selective = False  # dispatched the selective way (see the module docstring)
        self.fresh: list[Message] = []  # arrived, not yet routed (selective dispatch)
        self.expiring: list[Message] = []  # met expired during a selective dispatch
        self.uses_groups = False  # a group message came: dispatched the selective way from now
        self.serve_all = False  # every consumer is to look at its list (not only new arrivals)
        self.served = 0  # selective dispatch: consumers served, for fairness between filters
        self.delayed = 0  # messages waiting out a redelivery delay
        self.volatile = services.flow.volatile
        self.own_volatile: Watermark | None = None
        self._make_own_watermarks()

    def configure(self) -> None:
        super().configure()
        self.reading = self.backlog.settings = QueueStoreSettings.read(
            self.services.settings, "PersQueueFileStore"
        )

    def held(self, kind: str) -> tuple[int, int]:
        if kind == "VolQueueStore":  # what it counted (the rest comes with its next count)
            return self.counter.messages, self.counter.bytes
        return super().held(kind)

    @property
    def backlog_after(self) -> int | None:
        """Stored messages after this one are not in memory (None: none is left out)."""
        return self.backlog.after

    # -- arrival ---------------------------------------------------------------------------

    def enqueue(self, message: Message) -> None:
        self.arrivals = message.arrival = self.arrivals + 1
        if message.store_seq:
            if not self._keep_in_memory(message):
                return
        else:
            delta = self._volatile_delta
            delta[0] += 1
            delta[1] += message.size
        headers = message.headers
        if self.selective or PRIORITY in headers or GROUP in headers:
            self._arrive(message)
        else:  # the common case, inlined: nothing but the default level of a plain queue
            self._plain_level.append(message)

    def _arrive(self, message: Message) -> None:
        """A message is in memory now: listed, or kept for routing (selective dispatch)."""
        self._placed(message)
        if message.group is not None:
            self.uses_groups = True
            self._set_selective(True)
        if self.selective:
            self.fresh.append(message)
        else:
            self.main.append(message)

    @staticmethod
    def _placed(message: Message) -> None:
        """What the selective way reads of a message: its priority and its group."""
        message.level = message.priority
        message.group = message.headers.get(GROUP)

    def _keep_in_memory(self, message: Message) -> bool:
        """Whether a new persistent message stays in memory: the live buffer has room and
        nothing is left in the store before it, or (within the global bound) a selective
        consumer that has seen all its store holds selects it (so it need not be searched
        for there); else it is left in the store."""
        persistence = self.persistence
        assert persistence is not None
        size = message.size
        backlog = self.backlog
        if persistence.cache_bytes + size <= persistence.cache_limit and (
            (backlog.after is None and self.cache_bytes + size <= persistence.queue_cache_limit)
            or (backlog.after is not None and self.filters and self._awaited(message))
        ):
            self._cache_count(size)
            return True
        backlog.leave(message.store_seq, message.priority)
        return False

    def _awaited(self, message: Message) -> bool:
        """Whether a selective consumer that has seen everything its queue left in the store
        selects ``message``: kept in memory (and remembered as read out of order)."""
        leaves = self.backlog.leaves
        if any(f.store_seen == leaves for f in self.matcher.matching(message)):
            self.backlog.pulled[message.store_seq] = message.message_id
            return True
        return False

    def _count_volatile(self) -> None:
        """Tell the VolQueueStore and its watermarks what came in and went out since they
        last knew: once per dispatch, not per message (a message passing straight through
        moves nothing)."""
        delta = self._volatile_delta
        if delta[0] or delta[1]:
            count_into((self.volatile, self.own_volatile), delta[0], delta[1])
            counter = self.counter
            counter.messages += delta[0]
            counter.bytes += delta[1]
            delta[0] = delta[1] = 0

    def _cache_count(self, nbytes: int) -> None:
        """Bytes of persistent messages entering (positive) or leaving (negative) memory."""
        self.cache_bytes += nbytes
        assert self.persistence is not None
        self.persistence.cache_bytes += nbytes

    def _counted_out(self, message: Message) -> None:
        """A message leaves memory (delivered, expired, given back)."""
        if message.store_seq:
            self._cache_count(-message.size)
        else:
            delta = self._volatile_delta
            delta[0] -= 1
            delta[1] -= message.size

    def _counted_in(self, message: Message) -> None:
        """A message comes back into memory (redelivered)."""
        if message.store_seq:
            self._cache_count(message.size)
        else:
            delta = self._volatile_delta
            delta[0] += 1
            delta[1] += message.size

    # -- plain dispatch --------------------------------------------------------------------

    def dispatch(self) -> None:
        """Hand waiting messages to ready consumers, one each in turn, in priority order
        (inlined: this runs for every message)."""
        if self.selective:
            self._dispatch_selective()
            return
        consumers = self.consumers
        count = len(consumers)
        if not count:
            self._count_volatile()
            return
        if self.backlog.after is not None and self._higher_in_store():
            return
        runtime = self.services.runtime
        rotate = consumers.move_to_end
        main = self.main
        levels = main.levels
        now_ms = 0
        taken = taken_bytes = cached_bytes = 0  # what left memory, for the counts
        expired: list[Message] = []
        blocked = False
        for priority in range(main.high, main.low - 1, -1):
            level = levels[priority]
            while level:
                message = level[0]
                if message.expires and message.expires <= (now_ms := now_ms or runtime.now_ms()):
                    level.popleft()
                    expired.append(message)
                    continue
                for _ in range(count):
                    consumer = next(iter(consumers))
                    rotate(consumer)  # offered a message: its turn is over
                    if consumer.ready_for(message):
                        break
                    consumer.waiting = True
                else:
                    blocked = True  # no consumer is ready: the message waits
                    break
                level.popleft()
                if message.store_seq:
                    cached_bytes += message.size
                else:
                    taken += 1
                    taken_bytes += message.size
                consumer.deliver(message)
            if blocked:
                break
        if cached_bytes:
            self._cache_count(-cached_bytes)
        for message in expired:
            self._counted_out(message)
        delta = self._volatile_delta
        delta[0] -= taken
        delta[1] -= taken_bytes
        while main.high > DEFAULT and not levels[main.high]:
            main.high -= 1
        while main.low < DEFAULT and not levels[main.low]:
            main.low += 1
        self._dispatched(expired)

    def _higher_in_store(self) -> bool:
        """Whether the store holds messages of a higher priority than any waiting in
        memory: then they are read first, and nothing is delivered until they are in."""
        top = self.backlog.higher_priority(self.cache_bytes == 0, self._best_waiting())
        if top is None:
            return False
        self._count_volatile()
        if not self.backlog.reading:
            self._read_more()
        return True

    def _best_waiting(self) -> int:
        """The highest priority waiting in memory (-1: none)."""
        return max([self.main.best(), *(m.level for m in self.fresh)])

    def _dispatched(self, expired: list[Message]) -> None:
        self._count_volatile()
        self.last_dispatch = self.services.runtime.monotonic()
        if expired:
            self.expired(expired)
        if self.backlog.after is not None and not self.backlog.reading:
            self._read_more()

    # -- selective dispatch ----------------------------------------------------------------

    def _set_selective(self, selective: bool) -> None:
        """Switch the way of dispatching (at a subscription change or a group message)."""
        if selective == self.selective:
            return
        self.selective = selective
        main = self.main
        if selective:  # from now on entries may go stale: each message knows its home
            for message in main:
                self._placed(message)
                message.home = main
            main.checks = True
        else:  # the plain way lists no stale entry, and reads no home
            main.compact()
            main.checks = False

    def _needs_selective(self) -> bool:
        return bool(self.filters or self.exclusive or self.uses_groups)

    def consumer_ready(self) -> None:
        """A consumer skipped for not being ready may be ready now: every consumer looks at
        its list (an arrival alone only needs the consumers the arrival is for)."""
        self.serve_all = True
        self.dispatch()

    def _dispatch_selective(self) -> None:
        """Route what arrived, and, after anything else changed, let every consumer take
        from its list. A consumer that can take something listed for it was skipped when
        it could not, and its wake-up (``consumer_ready``) serves everyone; so arrivals
        alone cost what routing them costs, however many consumers and messages wait."""
        deliver = bool(self.consumers) and not (
            self.backlog.after is not None and self._higher_in_store()
        )
        if self.fresh:
            fresh, self.fresh = self.fresh, []
            if any(m.level != DEFAULT for m in fresh):
                fresh.sort(key=lambda m: -m.level)  # stable: arrival order within one
            for message in fresh:
                self._route(message, False, deliver)
        if not deliver:
            self.serve_all = True  # what was listed meanwhile waits for the consumers
        elif self.serve_all:
            self.serve_all = False
            self._serve()
        expired, self.expiring = self.expiring, []
        self._dispatched(expired)

    def _expired_now(self, message: Message) -> bool:
        return message.expires != 0 and message.expires <= self.services.runtime.now_ms()

    def _route(self, message: Message, back: bool, deliver: bool = True) -> None:
        """A message in memory to place: handed at once (if ``deliver``) to a ready consumer
        that selects it and has nothing older waiting, else listed where its consumers look
        (``back``: it came back, so it goes to its place among the waiting ones)."""
        if message.expires and self._expired_now(message):
            self._drop_expired(message)
            return
        group = message.group
        if group is not None:
            owner = self.groups.owner(group)
            if owner is not None:
                self._for_owner(owner, message, deliver)
                return
        matching = self.matcher.matching(message) if self.filters else []
        consumer = self._ready_for(message, matching) if deliver else None
        if consumer is not None:
            self._take(consumer, message, None)
            return
        message.home = main = self.main
        add = Levels.insert if back else Levels.append
        add(main, message)
        for filter_ in matching:
            add(filter_.pending, message)

    def _for_owner(self, owner: Subscription, message: Message, deliver: bool = True) -> None:
        """A message of a group ``owner`` owns: to the owner now if it can take it, else
        kept for it (or, if the owner does not select it, until the owner goes)."""
        groups = self.groups
        selected = owner.filter is not None and owner.filter.accepts(message)
        if deliver and selected and self._eligible(owner):
            reserved = groups.reserved.get(owner)
            if reserved is None or not reserved:
                if owner.ready_for(message):
                    self._take(owner, message, None)
                    return
                owner.waiting = True
        groups.reserve(owner, message, selected)

    def _eligible(self, consumer: Subscription) -> bool:
        """Whether the consumer gets messages now (another one is not exclusive)."""
        return not self.exclusive or self.exclusive[0] is consumer

    def _ready_for(self, message: Message, matching: list[Filter]) -> Subscription | None:
        """A consumer that selects ``message``, has nothing older waiting for it, and can
        take it now; round-robin within a filter, the least recently served filter first."""
        if self.exclusive:
            consumer = self.exclusive[0]
            filter_ = consumer.filter
            if (filter_ is self.everyone or filter_ in matching) and self._idle(consumer):
                if consumer.ready_for(message):
                    return consumer
                consumer.waiting = True
            return None
        candidates = matching
        if self.everyone.consumers:
            candidates = [*matching, self.everyone]
        if len(candidates) > 1:
            candidates = sorted(candidates, key=lambda f: f.served)
        for filter_ in candidates:
            if filter_.pending.head() is not None:
                continue  # older messages wait for these consumers: they go first
            consumers = filter_.consumers
            for _ in range(len(consumers)):
                consumer = next(iter(consumers))
                consumers.move_to_end(consumer)
                if consumer in self.groups.reserved and self.groups.reserved[consumer]:
                    continue
                if consumer.ready_for(message):
                    return consumer
                consumer.waiting = True
        return None

    def _idle(self, consumer: Subscription) -> bool:
        """Nothing waits for ``consumer`` (listed for its filter, or kept for it)."""
        assert consumer.filter is not None
        reserved = self.groups.reserved.get(consumer)
        return consumer.filter.pending.head() is None and (reserved is None or not reserved)

    def _serve(self) -> None:
        """Every consumer that can takes the head of its list in turn, until none can."""
        if self.exclusive:
            consumer = self.exclusive[0]
            while (found := self._next_for(consumer)) is not None:
                message, source = found
                if not consumer.ready_for(message):
                    consumer.waiting = True
                    return
                self._take(consumer, message, source)
            return
        consumers = self.consumers
        count = len(consumers)
        idle = 0
        while idle < count:
            consumer = next(iter(consumers))
            consumers.move_to_end(consumer)
            found = self._next_for(consumer)
            if found is None:
                idle += 1
                continue
            message, source = found
            if not consumer.ready_for(message):
                consumer.waiting = True
                idle += 1
                continue
            self._take(consumer, message, source)
            idle = 0

    def _next_for(self, consumer: Subscription) -> tuple[Message, Levels] | None:
        """The next message for ``consumer`` and the list it is at the head of: the first
        its filter lists or kept for it, whichever goes first. A group message owned by
        another consumer is moved to that owner on the way."""
        filter_ = consumer.filter
        assert filter_ is not None
        pending = filter_.pending
        groups = self.groups
        while True:
            message = pending.head()
            if message is not None:
                if message.expires and self._expired_now(message):
                    pending.pop(message)
                    self._drop_expired(message)
                    continue
                group = message.group
                if group is not None:
                    owner = groups.owner(group)
                    if owner is not None and owner is not consumer:
                        pending.pop(message)
                        self._for_owner(owner, message)
                        continue
            reserved = groups.reserved.get(consumer) if groups else None
            if reserved is not None:
                mine = reserved.head()
                if mine is not None and mine.expires and self._expired_now(mine):
                    reserved.pop(mine)
                    self._drop_expired(mine)
                    continue
                if mine is not None and (message is None or before(mine, message)):
                    return mine, reserved
            return None if message is None else (message, pending)

    def _take(self, consumer: Subscription, message: Message, source: Levels | None) -> None:
        """Deliver ``message`` (found at the head of ``source``, if listed) to ``consumer``."""
        if source is not None:
            source.pop(message)  # its entries in other lists go stale
        message.home = None
        self._counted_out(message)
        assert consumer.filter is not None
        self.served += 1
        consumer.filter.served = self.served
        group = message.group
        if group is None:
            consumer.deliver(message)
            return
        groups = self.groups
        first = groups.taken(group, consumer)
        if first:
            consumer.deliver_first_of_group(message)
        else:
            consumer.deliver(message)
        if message.headers.get(GROUP_SEQUENCE) == CLOSES_GROUP:
            for released in groups.close(group):
                self._route(released, True)
            self.serve_all = True

    def _drop_expired(self, message: Message) -> None:
        """An expired message met while dispatching: it leaves memory, never delivered."""
        message.home = None
        self._counted_out(message)
        self.expiring.append(message)

    # -- consumers -------------------------------------------------------------------------

    def subscribe(self, subscription: Subscription) -> None:
        super().subscribe(subscription)
        selector = subscription.selector
        if selector is not None or subscription.exclusive:
            self._set_selective(True)  # before its filter lists what waits
        if selector is None:
            filter_ = self.everyone
        else:
            filter_ = self.filters.get(selector.text) or self._new_filter(subscription)
        subscription.filter = filter_
        filter_.consumers[subscription] = None
        if subscription.exclusive:
            self.exclusive.append(subscription)
        self._set_selective(self._needs_selective())
        self.serve_all = True
        self.dispatch()

    def _new_filter(self, subscription: Subscription) -> Filter:
        """The first consumer with its selector: the waiting messages it selects are listed
        for it (the only time they are all looked at for it)."""
        selector = subscription.selector
        assert selector is not None
        filter_ = Filter(selector, Levels(home=False))
        for message in self.main:
            if filter_.accepts(message):
                filter_.pending.append(message)
        filter_.store_after = self.backlog.after or 0
        self.filters[selector.text] = filter_
        self.matcher.add(filter_)
        return filter_

    def _holds_nothing(self) -> bool:
        persistence = self.persistence
        return (
            not self.main
            and not self.fresh
            and not self.groups
            and not self.groups.reserved
            and not self.delayed
            and self.backlog.after is None
            and not self.backlog.reading
            and (persistence is None or not persistence.store.count(self.name)[0])
        )

    def remove(self) -> None:
        super().remove()
        self.services.volatile.drop(self.name)

    def unsubscribe(self, subscription: Subscription, unwritten: list[Message]) -> None:
        """What the consumer held goes back to its place: every unacknowledged message in a
        client mode, what was never written to it in auto mode (the rest is taken); the
        message groups it owned, and what waited for it, go to other consumers."""
        del self.consumers[subscription]
        self._consumer_gone(subscription)
        filter_ = subscription.filter
        assert filter_ is not None
        del filter_.consumers[subscription]
        if filter_ is not self.everyone and not filter_.consumers:
            del self.filters[filter_.selector.text]  # type: ignore[union-attr]
            self.matcher.remove(filter_)
        if subscription in self.exclusive:
            self.exclusive.remove(subscription)
        released = self.groups.release(subscription)
        self._set_selective(self._needs_selective())
        for message in released:
            self._put_back(message)
        self.serve_all = True
        if subscription.unacked is None:
            held = sorted(unwritten, key=lambda m: m.arrival)
        else:
            held = subscription.take_unacked()
        self.services.journal.ended(subscription, held)
        self.requeue(held, set(unwritten))
        if self.serve_all:
            self.dispatch()

    def _put_back(self, message: Message) -> None:
        """A message in memory goes (back) to its place among the waiting ones."""
        if self.selective:
            self._route(message, True)
        else:
            self.main.insert(message)

    # -- acknowledgements and redelivery ---------------------------------------------------

    def acknowledged(self, subscription: Subscription, messages: list[Message]) -> StoreTransaction:
        return self._removal(messages)

    def rejected(
        self, subscription: Subscription, messages: list[Message], requeue: bool
    ) -> StoreTransaction:
        """A NACK: the messages are delivered again (``requeue``), or moved to the dead
        message queue at once (``requeue:false``)."""
        if requeue:
            self.requeue(messages)
            return NOTHING
        for message in messages:
            message.mark_redelivered()  # one more delivery, counted on the dead copy
        self.dead_letter(messages, REJECTED)
        return NOTHING

    def _removal(self, messages: list[Message]) -> StoreTransaction:
        stored = tuple((self.name, m.store_seq) for m in messages if m.store_seq)
        return StoreTransaction(removals=stored) if stored else NOTHING

    def requeue(self, messages: list[Message], unwritten: Collection[Message] = ()) -> None:
        """Messages come back from a consumer: those written to it count a redelivery and,
        past ``maxredeliveries``, go to the dead message queue; the rest go back to their
        place (after the redelivery delay, if any), delivered again flagged as redelivered
        unless they were never written."""
        if not messages:
            return
        policy = self.policy
        limit = policy.maxredeliveries
        back: list[Message] = []
        dead: list[Message] = []
        later: dict[float, list[Message]] = {}
        for message in messages:
            if message not in unwritten:
                message.mark_redelivered()
                if 0 <= limit < message.redeliveries:
                    dead.append(message)
                    continue
                delay = self._redelivery_delay(message.redeliveries)
                if delay:
                    later.setdefault(delay, []).append(message)
                    continue
            back.append(message)
        if dead:
            self.dead_letter(dead, REDELIVERY_LIMIT)
        for delay, waiting in later.items():
            self.delayed += len(waiting)
            self.services.runtime.call_later(delay, lambda w=waiting: self._delay_over(w))
        self._return(back)

    def _redelivery_delay(self, redeliveries: int) -> float:
        """Seconds the ``redeliveries``-th redelivery waits: redeliverydelay, times
        redeliverybackoff for each one before it, at most maxredeliverydelay."""
        policy = self.policy
        if not policy.redeliverydelay:
            return 0.0
        delay = policy.redeliverydelay * policy.redeliverybackoff ** (redeliveries - 1)
        if policy.maxredeliverydelay >= 0:
            delay = min(delay, policy.maxredeliverydelay)
        return delay / 1000

    def _delay_over(self, messages: list[Message]) -> None:
        self.delayed -= len(messages)
        self._return(messages)

    def _return(self, messages: list[Message]) -> None:
        """Messages back in memory at their place, then dispatched."""
        if not messages:
            return
        for message in messages:
            self._placed(message)
        for message in sorted(messages, key=delivery_order):
            self._counted_in(message)
            self._put_back(message)
        self.serve_all = True
        self.dispatch()

    def dead_letter(self, messages: list[Message], reason: str) -> None:
        """Messages that will not be delivered from this queue again go to its dead message
        queue (``deadletter.py``)."""
        self.services.dead_letters.move(self.name, messages, reason)

    # -- the store backlog -----------------------------------------------------------------

    def _read_more(self) -> None:
        """Read from the store what consumers need next, if they need any (``backlog.py``)."""
        if not self.consumers:
            return
        persistence = self.persistence
        assert persistence is not None
        hungry = [
            f
            for f in self.filters.values()
            if f.pending.head() is None and any(c.ready for c in f.consumers)
        ]
        read = self.backlog.next_read(self.cache_bytes == 0, self._best_waiting(), hungry, _selects)
        if read is None:
            return
        self.backlog.reading = True
        limit = persistence.queue_cache_limit
        room = max(1, limit - self.cache_bytes if read.match is None else limit)
        persistence.read(
            self.name,
            read.after,
            self.reading.readmsgamount,
            room,
            lambda batch: self._backlog_read(read, batch),
            self._backlog_failed,
            read.match,
            read.examine,
        )

    def _backlog_read(self, read: Read, batch: Batch) -> None:
        messages, expired = self.backlog.read_done(read, batch)
        self._read_back += len(messages)
        persistence = self.services.persistence
        assert persistence is not None
        restored = persistence.restored_upto.get(self.name, 0)
        for seq, stored in messages:
            message = Message.from_stored(stored, seq)
            redeliveries = self.given_back_redeliveries.pop(seq, 0)
            if redeliveries:
                message.redelivered_before(redeliveries)
            elif seq <= restored:  # stored before a restart or takeover: maybe delivered
                message.redelivered_before(1)
            self.arrivals = message.arrival = self.arrivals + 1
            self._cache_count(message.size)
            self._arrive(message)
        if expired and self.reading.expiryonread:
            self.services.expiry.expired_stored([((self.name, seq), m) for seq, m in expired])
        self.dispatch()

    def _backlog_failed(self, error: Exception) -> None:
        self.backlog.read_failed()
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

    def waiting(self) -> list[Message]:
        """The messages waiting in memory, in the order they would be delivered (a
        browser's view)."""
        kept = self.groups.waiting()  # only in the selective way, where each has its level
        return sorted([*self.main, *kept], key=delivery_order) if kept else list(self.main)

    def _waiting(self) -> list[Message]:
        """Every message waiting in memory (in main, or kept for a group's owner)."""
        return [*self.main, *self.groups.waiting()]

    def _take_out(self, messages: list[Message]) -> None:
        """Messages leave memory without being delivered (expired, given back)."""
        for message in messages:
            message.home = None
            self._counted_out(message)
        self.main.discard(messages)
        self.groups.compact()
        self._count_volatile()

    def sweep_volatile(self, now_ms: int) -> int:
        """The VolQueueStore's cleanup: remove expired non-persistent messages; returns how
        many it looked at (the journal's cleanup run counts them)."""
        volatile = [m for m in self._waiting() if not m.store_seq]
        expired = [m for m in volatile if m.expired(now_ms)]
        if expired:
            self._take_out(expired)
            self.expired(expired)
        return len(volatile)

    def sweep_cache(self, now_ms: int, idle_for: float) -> None:
        """The queue live buffer's cleanup: drop expired persistent messages, and give back
        every one of a queue that has not delivered anything for ``idle_for`` seconds
        (they are read from the store again when a consumer comes)."""
        stored = [m for m in self._waiting() if m.store_seq]
        if not stored:
            return
        expired = [m for m in stored if m.expired(now_ms)]
        if expired:
            self._take_out(expired)
            self.expired(expired)
        idle = self.services.runtime.monotonic() - self.last_dispatch > idle_for
        if idle and not self.backlog.reading:
            kept = [m for m in stored if not m.expired(now_ms)]
            if kept:
                self._take_out(kept)
                self.backlog.give_back([m.store_seq for m in kept])
                self.given_back_redeliveries.update(
                    (m.store_seq, m.redeliveries) for m in kept if m.redelivered
                )
                after = self.backlog.after or 0
                for filter_ in self.filters.values():
                    filter_.store_after = min(filter_.store_after, after)

    @property
    def received(self) -> int:
        return self.arrivals - self._read_back

    # -- operator actions (the console) ----------------------------------------------------

    def take_waiting(self, wanted: Callable[[Message], bool]) -> list[Message]:
        """Take the messages waiting in memory that are ``wanted`` out of the queue (those
        delivered and not yet acknowledged are not waiting); stored ones stay in the store
        for the caller to remove."""
        taken = [m for m in self._waiting() if wanted(m)]
        if taken:
            self._take_out(taken)
        return taken

    @property
    def left_upto(self) -> int:
        """The last stored message left in the store (0: unknown, after a restart)."""
        return self.backlog.left_upto

    def backlog_start(self) -> int | None:
        """Where the stored messages not in memory begin (after this position), or None if
        every waiting message is in memory."""
        return self.backlog.after

    def waiting_stored(
        self, read: list[tuple[int, StoredMessage]]
    ) -> list[tuple[int, StoredMessage]]:
        """Of what a read of the store after ``backlog_start`` found, the messages that wait
        here (not those in memory or delivered, not acknowledged, nor taken by an
        operator)."""
        return self.backlog.left_in_store(read)

    def withhold(self, positions: list[int]) -> None:
        """Stored messages an operator takes out of the backlog: no read hands them out,
        even one that ran before their removal was committed."""
        self.backlog.withheld.update(positions)
        for seq in positions:
            self.given_back_redeliveries.pop(seq, None)

    def backlog_purged(self, upto: int) -> None:
        """Every stored message waiting up to ``upto`` was removed: unless messages were
        left in the store after it meanwhile, there is no backlog any more."""
        self.backlog.purged(upto)
        self.given_back_redeliveries = {
            seq: count for seq, count in self.given_back_redeliveries.items() if seq > upto
        }

    def state(self) -> dict[str, object]:
        waiting = self._waiting()
        volatile = [m for m in waiting if not m.store_seq]
        held = [m for s in self.consumers if s.unacked for m in s.unacked.values()]
        held_volatile = [m for m in held if not m.store_seq]
        stored_messages, stored_bytes = self.stored()
        messages = len(volatile) + len(held_volatile) + stored_messages
        nbytes = sum(m.size for m in [*volatile, *held_volatile]) + stored_bytes
        return {
            **self._state("queue", messages, nbytes),
            "unacked": len(held),
            "consumers": len(self.consumers),
            "ready_consumers": sum(1 for c in self.consumers if c.ready),
            "selectors": sorted(self.filters),
            "exclusive_consumer": self.exclusive[0].sub_id if self.exclusive else None,
            "message_groups": len(self.groups.owners),
            "volatile_messages": len(volatile),
            "volatile_bytes": sum(m.size for m in volatile),
            "live_buffer_messages": len(waiting) - len(volatile),
            "live_buffer_bytes": self.cache_bytes,
            "backlog_in_store": self.backlog.after is not None,
            "redelivery_delayed": self.delayed,
        }


class StoredView:
    """What a selector reads of a stored message, while the store is searched."""

    __slots__ = ("headers", "priority", "timestamp", "message_id", "expires")
    persistent = True
    redelivered = False
    redeliveries = 0

    def __init__(self, stored: StoredMessage) -> None:
        self.headers = dict(stored.headers)
        self.priority = stored.priority
        self.timestamp = stored.timestamp
        self.message_id = stored.message_id
        self.expires = stored.expires


def _selects(filter_: Filter) -> Match:
    """A store read's test for what ``filter_``'s selector selects."""
    assert filter_.match is not None
    match = filter_.match
    return lambda stored: match(StoredView(stored))
