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
  list then (``_set_selective``);
- ``StoreBacklog`` (``backlog.py``) and ``BacklogReads``
  (``queue_reads.py``): what is left in the store, and reading it back;
- ``Redelivery`` (``queue_redelivery.py``): messages that come back
  unacknowledged;
- ``QueueSweeps`` (``queue_sweeps.py``): what leaves memory undelivered
  (expired messages, an idle live buffer).

What an operator does to a queue (``modules/operations.py``, the console)
keeps its names here, at the end; the backlog and the sweeps do it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection

from wiremq.config.groups import QueueStoreSettings
from wiremq.modules.destinations.backlog import StoreBacklog
from wiremq.modules.destinations.deadletter import REJECTED
from wiremq.modules.destinations.destination import NOTHING, Destination, DestinationServices
from wiremq.modules.destinations.groups import Groups
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
from wiremq.modules.message import GROUP, PRIORITY, Message
from wiremq.stores.api import StoreTransaction
from wiremq.stores.records import JMS_DEFAULT_PRIORITY, StoredMessage


class Queue(Destination):
    """A queue and the parts that do its jobs (see the module docstring)."""

    domain = P2P
    OWN_WATERMARKS = (
        ("own_volatile", "VolQueueStore", "VolQueueStoreImpl", ""),
        ("store_watermark", "PersQueueStore", "PersQueueFileStore", ""),
    )

    def __init__(self, name: str, services: DestinationServices) -> None:
        super().__init__(name, services)
        runtime = services.runtime
        self.main = main = Levels(home=True)  # every message waiting in memory
        main.checks = False  # a plain queue's list: see levels.py
        self._plain_level = main.levels[JMS_DEFAULT_PRIORITY]
        # In round-robin order: each consumer offered a message moves to the end.
        self.consumers: OrderedDict[Subscription, None] = OrderedDict()
        self.arrivals = 0  # numbers messages in arrival order
        self.selective = False  # dispatched the selective way (see the module docstring)
        self.uses_groups = False  # a group message came: dispatched the selective way from now
        self.groups = Groups()
        self.counts = counts = QueueCounts(
            services.volatile.counter(name), services.flow.volatile, services.persistence
        )
        self.plain_dispatch = PlainDispatch(main, self.consumers, counts, runtime)
        self.selective_dispatch = SelectiveDispatch(
            main, self.consumers, self.groups, counts, runtime
        )
        self.backlog = StoreBacklog(
            QueueStoreSettings.read(services.settings, "PersQueueFileStore")
        )
        self.reads = BacklogReads(
            name,
            self.backlog,
            services.persistence,
            counts,
            self.selective_dispatch,
            services.expiry,
            self._arrived_from_store,
        )
        self.redelivery = Redelivery(name, runtime, services.dead_letters, self._return)
        self.sweeps = QueueSweeps(
            name, main, self.groups, counts, self.backlog, self.reads, services.expiry
        )
        self._make_own_watermarks()

    def configure(self) -> None:
        super().configure()
        self.backlog.settings = QueueStoreSettings.read(
            self.services.settings, "PersQueueFileStore"
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

    def enqueue(self, message: Message) -> None:
        self.arrivals = message.arrival = self.arrivals + 1
        if message.store_seq:
            if not self.reads.keep_in_memory(message):
                return
        else:
            unreported = self.counts.unreported_volatile
            unreported[0] += 1
            unreported[1] += message.size
        headers = message.headers
        if PRIORITY in headers or GROUP in headers:
            self._arrive(message)
        elif self.selective:  # the default level and no group: routed with the next dispatch
            message.level = JMS_DEFAULT_PRIORITY
            message.group = None
            self.selective_dispatch.unrouted.append(message)
        else:  # the common case, inlined: nothing but the default level of a plain queue
            self._plain_level.append(message)

    def _arrive(self, message: Message) -> None:
        """A message is in memory now: listed, or kept for routing (selective dispatch)."""
        _read_level_and_group(message)
        if message.group is not None:
            self.uses_groups = True
            self._set_selective(True)
        if self.selective:
            selective = self.selective_dispatch
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
            expired = self.selective_dispatch.dispatch(deliver)
        elif not self.consumers:
            self.counts.report_volatile()
            return
        elif backlog.after is not None and self._higher_in_store():
            return
        else:
            expired = self.plain_dispatch.dispatch()
        self.counts.report_volatile()
        self.last_dispatch = self.services.runtime.monotonic()
        if expired:
            self.sweeps.expired(expired)
        if backlog.after is not None and not backlog.read_under_way:
            self._read_more()

    def _higher_in_store(self) -> bool:
        """Whether the store holds messages of a higher priority than any waiting in
        memory: then they are read first, and nothing is delivered until they are in."""
        if not self.reads.higher_in_store():
            return False
        self.counts.report_volatile()
        if not self.backlog.read_under_way:
            self._read_more()
        return True

    def _read_more(self) -> None:
        """Read from the store what consumers need next, if there are consumers."""
        if self.consumers:
            self.reads.read_more()

    def consumer_ready(self) -> None:
        """A consumer skipped for not being ready may be ready now: every consumer looks at
        its list (an arrival alone only needs the consumers the arrival is for)."""
        self._serve_all()

    def _serve_all(self) -> None:
        """Dispatch after a change that may let any consumer take what waits for it."""
        self.selective_dispatch.serve_all = True
        self.dispatch()

    def _set_selective(self, selective: bool) -> None:
        """Switch the way of dispatching (at a subscription change or a group message)."""
        if selective == self.selective:
            return
        self.selective = selective
        main = self.main
        if selective:  # from now on entries may go stale: each message knows its home
            for message in main:
                _read_level_and_group(message)
                message.home = main
            main.checks = True
        else:  # the plain way lists no stale entry, and reads no home
            main.compact()
            main.checks = False

    def _needs_selective(self) -> bool:
        return self.uses_groups or self.selective_dispatch.needed

    def _put_back(self, message: Message) -> None:
        """A message in memory goes (back) to its place among the waiting ones."""
        if self.selective:
            self.selective_dispatch.route([message], True)
        else:
            self.main.insert(message)

    # -- consumers -------------------------------------------------------------------------

    def subscribe(self, subscription: Subscription) -> None:
        super().subscribe(subscription)
        if subscription.selector is not None or subscription.exclusive:
            self._set_selective(True)  # before its filter lists what waits
        self.selective_dispatch.subscribe(subscription, self.backlog.after or 0)
        self._set_selective(self._needs_selective())
        self._serve_all()

    def unsubscribe(self, subscription: Subscription, unwritten: list[Message]) -> None:
        """What the consumer held goes back to its place: every unacknowledged message in a
        client mode, what was never written to it in auto mode (the rest is taken); the
        message groups it owned, and what waited for it, go to other consumers."""
        del self.consumers[subscription]
        self._consumer_gone(subscription)
        released = self.selective_dispatch.unsubscribe(subscription)
        self._set_selective(self._needs_selective())
        for message in released:
            self._put_back(message)
        self.selective_dispatch.serve_all = True
        if subscription.unacked is None:
            held = sorted(unwritten, key=lambda m: m.arrival)
        else:
            held = subscription.take_unacked()
        self.services.journal.ended(subscription, held)
        self._requeue(held, set(unwritten))
        if self.selective_dispatch.serve_all:  # nothing came back to dispatch it
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
        self.redelivery.dead_letter(messages, REJECTED)
        return NOTHING

    def _requeue(self, messages: list[Message], unwritten: Collection[Message] = ()) -> None:
        """Messages come back from a consumer (``queue_redelivery.py``); those not delayed
        nor dead-lettered go back to their place now."""
        if messages:
            self._return(self.redelivery.requeue(messages, self.policy, unwritten))

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
        kept = self.groups.waiting()  # only in the selective way, where each has its level
        return sorted([*self.main, *kept], key=delivery_order) if kept else list(self.main)

    def _holds_nothing(self) -> bool:
        persistence = self.services.persistence
        return (
            not self.main
            and not self.selective_dispatch.unrouted
            and not self.groups
            and not self.groups.reserved
            and not self.redelivery.delayed
            and self.backlog.after is None
            and not self.backlog.read_under_way
            and (persistence is None or not persistence.store.count(self.name)[0])
        )

    def remove(self) -> None:
        super().remove()
        self.services.volatile.drop(self.name)

    def depth(self) -> int:
        counts = self.counts
        in_memory = counts.volatile_store.messages + counts.unreported_volatile[0]
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
        selective = self.selective_dispatch
        return {
            **self._state("queue", messages, nbytes),
            "unacked": len(held),
            "consumers": len(self.consumers),
            "ready_consumers": sum(1 for c in self.consumers if c.ready),
            "selectors": sorted(selective.filters),
            "exclusive_consumer": selective.exclusive[0].sub_id if selective.exclusive else None,
            "message_groups": len(self.groups.owners),
            "volatile_messages": len(volatile),
            "volatile_bytes": sum(m.size for m in volatile),
            "live_buffer_messages": len(waiting) - len(volatile),
            "live_buffer_bytes": self.counts.live_buffer_bytes,
            "backlog_in_store": self.backlog.after is not None,
            "redelivery_delayed": self.redelivery.delayed,
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


def _read_level_and_group(message: Message) -> None:
    """What the selective way reads of a message: its priority and its group."""
    message.level = message.priority
    message.group = message.headers.get(GROUP)
