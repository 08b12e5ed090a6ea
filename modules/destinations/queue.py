"""A queue: each message to exactly one consumer, the one that selects it and can take it.

Messages wait in memory in one ``Levels`` (``main``): higher priority first,
in arrival order within a priority, both delivery modes together. Its
non-persistent messages are counted in the VolQueueStore; its persistent ones
are in the persistent store too, and kept in memory (the queue live buffer)
up to persqueuebytehighwatermark: the rest stay in the store and are read
back.

``Queue`` takes what arrives (``enqueue``, inlined: it runs for every
message), chooses the way it is dispatched and keeps its consumers; each of
its other jobs is a small object it owns, handed only what that job needs:

- ``QueueCounts`` (``queue_counts.py``): what it holds, counted where the
  watermarks and the live buffer's bounds look;
- ``PlainDispatch`` (``queue_plain.py``): the *plain* way, while every
  consumer takes everything: round-robin, in priority order;
- ``SelectiveDispatch`` (``queue_selective.py``): the *selective* way, while a
  consumer has a selector or is exclusive, and for good once a message group
  was seen: each waiting message knows its ``level``, ``group`` and ``home``
  list then (``_set_selective``); the message groups (``groups.py``) are its;
- ``StoreBacklog`` (``backlog.py``) and ``BacklogReads``
  (``queue_reads.py``): what is left in the store, and reading it back;
- ``Redelivery`` (``queue_redelivery.py``): messages that come back
  unacknowledged;
- ``QueueSweeps`` (``queue_sweeps.py``): what leaves memory undelivered
  (expired messages, an idle live buffer).

Most queues of a large server hold a message or none and never see a consumer
for long, and Python's full collections walk every object each of them keeps:
so the parts that most queues never use are made when first needed, not with
the queue. The two ways of dispatching come with the first consumer (the
selective one also with a first group message: ``_selective_way``), the
redelivery state with the first message that comes back (``_redelivery``);
the sweeps hold no state of their own and are made for each use; the list of
consumers is a shared empty one until the first comes.

What an operator does to a queue (``modules/operations.py``, the console)
keeps its names here, at the end; the backlog and the sweeps do it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection
from types import MappingProxyType
from typing import cast

from wiremq.modules.destinations.backlog import StoreBacklog
from wiremq.modules.destinations.deadletter import REJECTED
from wiremq.modules.destinations.destination import NOTHING, Destination, DestinationServices
from wiremq.modules.destinations.levels import Levels, delivery_order
from wiremq.modules.destinations.queue_counts import QueueCounts
from wiremq.modules.destinations.queue_plain import PlainDispatch
from wiremq.modules.destinations.queue_reads import BacklogReads
from wiremq.modules.destinations.queue_redelivery import Redelivery
from wiremq.modules.destinations.queue_selective import SelectiveDispatch
from wiremq.modules.destinations.queue_sweeps import QueueSweeps
from wiremq.modules.destinations.subscription import Subscription
from wiremq.modules.domains import P2P
from wiremq.modules.flow.watermarks import Watermark
from wiremq.modules.message import GROUP, PRIORITY, Message, plain_arrivals
from wiremq.stores.api import StoreTransaction
from wiremq.stores.records import JMS_DEFAULT_PRIORITY, StoredMessage

LEVEL_HEADERS = (PRIORITY, GROUP)  # a message with either is not plain (``_arrive``)


class Queue(Destination):
    """A queue and the parts that do its jobs (see the module docstring)."""

    domain = P2P
    OWN_WATERMARKS = (
        ("own_volatile", "VolQueueStore", "VolQueueStoreImpl", ""),
        ("store_watermark", "PersQueueStore", "PersQueueFileStore", ""),
    )

    def __init__(self, name: str, services: DestinationServices) -> None:
        super().__init__(name, services)
        self.main = main = Levels(home=True)  # every message waiting in memory
        main.checks = False  # a plain queue's list: see levels.py
        self._plain_level = main.levels[JMS_DEFAULT_PRIORITY]
        # In round-robin order: each consumer offered a message moves to the end. Shared
        # and empty until the first consumer comes (``subscribe``).
        self.consumers: OrderedDict[Subscription, None] = NO_CONSUMERS
        self.arrivals = 0  # numbers messages in arrival order
        self.selective = False  # dispatched the selective way (see the module docstring)
        self.uses_groups = False  # a group message came: dispatched the selective way from now
        self.counts = counts = QueueCounts(
            services.volatile.counter(name), services.flow.volatile, services.persistence
        )
        # Made when first needed (see the module docstring): with the first consumer, the
        # selective way also with a first group message (``_selective_way``), the
        # redelivery state with the first message that comes back (``_redelivery``).
        self.plain_dispatch: PlainDispatch | None = None
        self.selective_dispatch: SelectiveDispatch | None = None
        self.redelivery: Redelivery | None = None
        self.backlog = StoreBacklog(services.queue_store)
        self.reads = BacklogReads(name, self.backlog, services.persistence, counts, services.expiry)
        self._make_own_watermarks()

    def configure(self) -> None:
        super().configure()
        self.backlog.settings = self.services.queue_store

    def _selective_way(self) -> SelectiveDispatch:
        """The selective way's parts, made when first needed (a consumer, a group
        message)."""
        selective = self.selective_dispatch
        if selective is None:
            self._own_consumers()
            selective = self.selective_dispatch = SelectiveDispatch(
                self.main, self.consumers, self.counts, self.services.runtime
            )
        return selective

    def _own_consumers(self) -> None:
        """Its list of consumers becomes its own (before a way of dispatching holds it)."""
        if self.consumers is NO_CONSUMERS:
            self.consumers = OrderedDict()

    def _redelivery(self) -> Redelivery:
        """The redelivery state, made when the first message comes back."""
        redelivery = self.redelivery
        if redelivery is None:
            services = self.services
            redelivery = self.redelivery = Redelivery(
                self.name, services.runtime, services.dead_letters, self._return
            )
        return redelivery

    @property
    def sweeps(self) -> QueueSweeps:
        """What leaves its memory undelivered (``queue_sweeps.py``): no state of its own, so
        made for each use rather than kept by every queue."""
        return QueueSweeps(
            self.name,
            self.main,
            self.selective_dispatch,
            self.counts,
            self.backlog,
            self.reads,
            self.services.expiry,
        )

    @property
    def own_volatile(self) -> Watermark | None:
        """Its own VolQueueStore watermark (``OWN_WATERMARKS``), which its counts feed."""
        return self.counts.own_volatile

    @own_volatile.setter
    def own_volatile(self, watermark: Watermark | None) -> None:
        self.counts.own_volatile = watermark

    def held(self, kind: str) -> tuple[int, int]:
        if kind == "VolQueueStore":  # what it counted (the rest comes with its next count)
            return self.counts.volatile_held()
        return super().held(kind)

    # -- arrival ---------------------------------------------------------------------------

    def enqueue(self, messages: list[Message]) -> None:
        counts = self.counts
        index, count = 0, len(messages)
        while index < count:
            # The common case, in C: a run of plain messages to the default level (listed
            # on a plain queue, routed with the next dispatch on a selective one).
            selective = self.selective
            start = index
            level = JMS_DEFAULT_PRIORITY if selective else None
            index, nbytes = plain_arrivals(messages, start, self.arrivals, LEVEL_HEADERS, level)
            if index > start:
                self.arrivals += index - start
                counts.unreported_messages += index - start
                counts.unreported_bytes += nbytes
                run = messages if index - start == count else messages[start:index]
                if selective:  # (made when the queue turned selective: ``_set_selective``)
                    self.selective_dispatch.unrouted.extend(run)  # type: ignore[union-attr]
                else:
                    self._plain_level.extend(run)
                if index == count:
                    break
            message = messages[index]
            index += 1
            self.arrivals = message.arrival = self.arrivals + 1
            if message.store_seq:
                if not self.reads.keep_in_memory(message, self.selective_dispatch):
                    continue
            else:
                counts.unreported_messages += 1
                counts.unreported_bytes += message.size
            headers = message.headers
            if PRIORITY in headers or GROUP in headers:
                self._arrive(message)
            elif self.selective:  # stored, of the default level, no group: routed as above
                message.level = JMS_DEFAULT_PRIORITY
                message.group = None
                self.selective_dispatch.unrouted.append(message)  # type: ignore[union-attr]
            else:  # stored, of the default level, on a plain queue
                self._plain_level.append(message)

    def _arrive(self, message: Message) -> None:
        """A message is in memory now: listed, or kept for routing (selective dispatch)."""
        _read_level_and_group(message)
        if message.group is not None:
            self.uses_groups = True
            self._set_selective(True)
        if self.selective:
            selective = self._selective_way()
            selective.unrouted.append(message)
            if message.level != JMS_DEFAULT_PRIORITY:
                selective.unrouted_levels = True
        else:
            self.main.append(message)

    def _arrived_from_store(self, messages: list[Message]) -> None:
        """Messages a read brought back from the store are in memory now; dispatched."""
        for message in messages:
            self.arrivals = message.arrival = self.arrivals + 1
            self._arrive(message)
        self.dispatch()

    @property
    def received(self) -> int:
        return self.arrivals - self.reads.messages_read

    # -- dispatch --------------------------------------------------------------------------

    def dispatch(self) -> None:
        """Hand waiting messages to ready consumers, the plain or the selective way; stored
        messages of a higher priority than any in memory are read first."""
        backlog = self.backlog
        if self.selective:
            deliver = bool(self.consumers) and not (
                backlog.after is not None and self._higher_in_store()
            )
            expired = self._selective_way().dispatch(deliver)
        elif not self.consumers:
            self.counts.report_volatile()
            return
        elif backlog.after is not None and self._higher_in_store():
            return
        else:
            plain = self.plain_dispatch
            assert plain is not None  # made with the first consumer
            expired = plain.dispatch()
        self.counts.report_volatile()
        self.last_dispatch = self.services.runtime.monotonic()
        if expired:
            self.sweeps.expired(expired)
        if backlog.after is not None and not backlog.read_under_way:
            self._read_more()

    def _higher_in_store(self) -> bool:
        """Whether the store holds messages of a higher priority than any waiting in
        memory: then they are read first, and nothing is delivered until they are in."""
        if not self.reads.higher_in_store(self._best_waiting()):
            return False
        self.counts.report_volatile()
        if not self.backlog.read_under_way:
            self._read_more()
        return True

    def _read_more(self) -> None:
        """Read from the store what consumers need next, if there are consumers."""
        if self.consumers:
            selective = self.selective_dispatch
            hungry = [] if selective is None else selective.hungry()
            self.reads.read_more(self._best_waiting(), hungry, self._arrived_from_store)

    def _best_waiting(self) -> int:
        """The highest priority waiting in memory (-1: none)."""
        selective = self.selective_dispatch
        return self.main.best() if selective is None else selective.best_waiting()

    def consumer_ready(self) -> None:
        """A consumer skipped for not being ready may be ready now: every consumer looks at
        its list (an arrival alone only needs the consumers the arrival is for)."""
        self._serve_all()

    def _serve_all(self) -> None:
        """Dispatch after a change that may let any consumer take what waits for it."""
        selective = self.selective_dispatch
        if selective is not None:
            selective.serve_all = True
        self.dispatch()

    def _set_selective(self, selective: bool) -> None:
        """Switch the way of dispatching (at a subscription change or a group message)."""
        if selective == self.selective:
            return
        self.selective = selective
        main = self.main
        if selective:  # from now on entries may go stale: each message knows its home
            self._selective_way()
            for message in main:
                _read_level_and_group(message)
                message.home = main
            main.checks = True
        else:  # the plain way lists no stale entry, and reads no home
            main.compact()
            main.checks = False

    def _needs_selective(self) -> bool:
        selective = self.selective_dispatch
        return self.uses_groups or (selective is not None and selective.needed)

    def _put_back(self, message: Message) -> None:
        """A message in memory goes (back) to its place among the waiting ones."""
        if self.selective:
            self._selective_way().route([message], True)
        else:
            self.main.insert(message)

    # -- consumers -------------------------------------------------------------------------

    def subscribe(self, subscription: Subscription) -> None:
        self._own_consumers()
        super().subscribe(subscription)
        if self.plain_dispatch is None:
            self.plain_dispatch = PlainDispatch(
                self.main, self.consumers, self.counts, self.services.runtime
            )
        if subscription.selector is not None or subscription.exclusive:
            self._set_selective(True)  # before its filter lists what waits
        self._selective_way().subscribe(subscription, self.backlog.after or 0)
        self._set_selective(self._needs_selective())
        self._serve_all()

    def unsubscribe(self, subscription: Subscription, unwritten: list[Message]) -> None:
        """What the consumer held goes back to its place: every unacknowledged message in a
        client mode, what was never written to it in auto mode (the rest is taken); the
        message groups it owned, and what waited for it, go to other consumers."""
        del self.consumers[subscription]
        self._consumer_gone(subscription)
        selective = self._selective_way()
        released = selective.unsubscribe(subscription)
        self._set_selective(self._needs_selective())
        for message in released:
            self._put_back(message)
        selective.serve_all = True
        if subscription.unacked is None:
            held = sorted(unwritten, key=lambda m: m.arrival)
        else:
            held = subscription.take_unacked()
        self.services.journal.ended(subscription, held)
        self._requeue(held, set(unwritten))
        if selective.serve_all:  # nothing came back to dispatch it
            self.dispatch()

    # -- acknowledgements and redelivery ---------------------------------------------------

    def acknowledged(self, subscription: Subscription, messages: list[Message]) -> StoreTransaction:
        stored = tuple((self.name, m.store_seq) for m in messages if m.store_seq)
        return StoreTransaction(removals=stored) if stored else NOTHING

    def rejected(
        self, subscription: Subscription, messages: list[Message], requeue: bool
    ) -> StoreTransaction:
        """A NACK: the messages are delivered again (``requeue``), or moved to the dead
        message queue at once (``requeue:false``)."""
        if requeue:
            self._requeue(messages)
            return NOTHING
        for message in messages:
            message.mark_redelivered()  # one more delivery, counted on the dead copy
        self._redelivery().dead_letter(messages, REJECTED)
        return NOTHING

    def _requeue(self, messages: list[Message], unwritten: Collection[Message] = ()) -> None:
        """Messages come back from a consumer (``queue_redelivery.py``); those not delayed
        nor dead-lettered go back to their place now."""
        if messages:
            self._return(self._redelivery().requeue(messages, self.policy, unwritten))

    def _return(self, messages: list[Message]) -> None:
        """Messages back in memory at their place (to be delivered again), then
        dispatched."""
        if not messages:
            return
        self.fates.count("redelivered", len(messages))
        for message in messages:
            _read_level_and_group(message)
        for message in sorted(messages, key=delivery_order):
            self.counts.came_back(message)
            self._put_back(message)
        self._serve_all()

    # -- what it holds ---------------------------------------------------------------------

    def waiting(self) -> list[Message]:
        """The messages waiting in memory, in the order they would be delivered (a
        browser's view)."""
        selective = self.selective_dispatch
        # (only in the selective way, where each has its level)
        kept = [] if selective is None else selective.groups.waiting()
        return sorted([*self.main, *kept], key=delivery_order) if kept else list(self.main)

    def _holds_nothing(self) -> bool:
        persistence = self.services.persistence
        selective, redelivery = self.selective_dispatch, self.redelivery
        return (
            not self.main
            and (selective is None or selective.holds_nothing())
            and (redelivery is None or not redelivery.delayed)
            and self.backlog.after is None
            and not self.backlog.read_under_way
            and (persistence is None or not persistence.store.count(self.name)[0])
        )

    def remove(self) -> None:
        super().remove()
        self.services.volatile.drop(self.name)

    def depth(self) -> int:
        counts = self.counts
        in_memory = counts.volatile_store.messages + counts.unreported_messages
        held = [m for s in self.consumers if s.unacked for m in s.unacked.values()]
        return in_memory + sum(1 for m in held if not m.store_seq) + self.stored()[0]

    def state(self) -> dict[str, object]:
        waiting = self.sweeps.in_memory()
        volatile = [m for m in waiting if not m.store_seq]
        held = [m for s in self.consumers if s.unacked for m in s.unacked.values()]
        held_volatile = [m for m in held if not m.store_seq]
        stored_messages, stored_bytes = self.stored()
        messages = len(volatile) + len(held_volatile) + stored_messages
        nbytes = sum(m.size for m in [*volatile, *held_volatile]) + stored_bytes
        selective, redelivery = self.selective_dispatch, self.redelivery
        exclusive = None if selective is None or not selective.exclusive else selective.exclusive[0]
        return {
            **self._state("queue", messages, nbytes),
            "unacked": len(held),
            "consumers": len(self.consumers),
            "ready_consumers": sum(1 for c in self.consumers if c.ready),
            "selectors": [] if selective is None else sorted(selective.filters),
            "exclusive_consumer": None if exclusive is None else exclusive.sub_id,
            "message_groups": 0 if selective is None else len(selective.groups.owners),
            "volatile_messages": len(volatile),
            "volatile_bytes": sum(m.size for m in volatile),
            "live_buffer_messages": len(waiting) - len(volatile),
            "live_buffer_bytes": self.counts.live_buffer_bytes,
            "backlog_in_store": self.backlog.after is not None,
            "redelivery_delayed": 0 if redelivery is None else redelivery.delayed,
        }

    # -- operator actions (modules/operations.py and the console call them by these names) -

    def take_waiting(self, wanted: Callable[[Message], bool]) -> list[Message]:
        """Take the messages waiting in memory that are ``wanted`` out of the queue (those
        delivered and not yet acknowledged are not waiting); stored ones stay in the store
        for the caller to remove."""
        taken = [m for m in self.sweeps.in_memory() if wanted(m)]
        if taken:
            self.sweeps.take_out(taken)
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
        """Stored messages an operator takes out of the backlog (``StoreBacklog.withhold``)."""
        self.backlog.withhold(positions)

    def backlog_purged(self, upto: int) -> None:
        """Every stored message waiting up to ``upto`` was removed
        (``StoreBacklog.purged``)."""
        self.backlog.purged(upto)


# The consumers of a queue that never had one: shared, and read-only so that adding to it
# fails loudly.
NO_CONSUMERS = cast("OrderedDict[Subscription, None]", MappingProxyType(OrderedDict()))


def _read_level_and_group(message: Message) -> None:
    """What the selective way reads of a message: its priority and its group."""
    message.level = message.priority
    message.group = message.headers.get(GROUP)
