"""A consumer: one SUBSCRIBE of one connection, its window, and what it has not acknowledged.

The window (consumerQueueEntriesSize / consumerQueueEntriesBytes, or the
SUBSCRIBE's own) counts messages handed to the consumer and not yet
acknowledged (client modes) or not yet written to its socket (auto mode); the
server never exceeds it. A consumer with a full window, or whose client's
egress queue for the message is full, is not ready: a queue skips it for the
others, a topic keeps the message in its live buffer for it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from wiremq.modules.client.egress import Egress
from wiremq.modules.domains import P2P
from wiremq.modules.flow.egress_queues import EgressQueue, Entry, Policy, new_entry
from wiremq.modules.message import Message, plain_entries
from wiremq.modules.runtime import Runtime
from wiremq.modules.selector import Selector
from wiremq.modules.stomp.encoder import GROUP_FIRST_LINE, ack_line, ack_suffix, subscription_head

if TYPE_CHECKING:
    from wiremq.modules.destinations.filters import Filter
    from wiremq.modules.journal.recorder import Journal
    from wiremq.modules.memory.workpool import WorkPools
    from wiremq.modules.persistence.store import Persistence
    from wiremq.stores.api import StoreTransaction

DISCARDABLE = (EgressQueue.D1, EgressQueue.D2, EgressQueue.D3)
DISCARD_OLDEST = Policy.DISCARD_OLDEST  # read once: asked before every delivery
G1 = EgressQueue.G1
G1_BIT = 1 << G1  # its bit in ``EgressQueues.nonempty``
NEVER_SPENT = sys.maxsize  # the burst of an egress queue that never blocks (``plain_entries``)
# From how many messages a lone queue consumer takes them as a run (``deliver_run``): a run
# costs more to set up than a delivery, and saves per message (bench/README.md, "What was
# tried").
RUN_FROM = 4


class SubscriptionServices(Protocol):
    """What a subscription uses of the server, reached through its destination's services
    (``destination.DestinationServices``)."""

    @property
    def unacked(self) -> UnackedLimit: ...
    @property
    def journal(self) -> Journal: ...
    @property
    def pools(self) -> WorkPools: ...
    @property
    def persistence(self) -> Persistence | None: ...


class Source(Protocol):
    """What a subscription consumes from (a queue or a topic: ``destination.Destination``;
    a wildcard subscription's ``Wildcard``), as the subscription and those that end it or
    acknowledge through it see it."""

    @property
    def name(self) -> str: ...
    @property
    def domain(self) -> str: ...
    @property
    def services(self) -> SubscriptionServices: ...
    def consumer_ready(self) -> None: ...
    def acknowledged(self, subscription: Subscription, messages: list[Message]) -> StoreTransaction:
        """What the store must change for ``messages`` the subscription acknowledged."""

    def rejected(
        self, subscription: Subscription, messages: list[Message], requeue: bool
    ) -> StoreTransaction:
        """What the store must change for ``messages`` the subscription NACKed."""

    def unsubscribe(self, subscription: Subscription, unwritten: list[Message]) -> None: ...
    def count(self, fate: str, messages: Sequence[Message], undone: bool = False) -> None:
        """``messages`` met ``fate`` (``fates.py``); ``undone``: taken back."""


class SlowSubscriberDrop(Protocol):
    """Who ends a subscriber that fell too far behind under the ``disconnect`` policy (the
    session that made the subscription: it ends it and disconnects the client)."""

    def disconnect_slow(self, subscription: Subscription) -> None: ...


class UnackedLimit:
    """MessageSpool.maxdeliveredunacked: deliveries to client-acknowledging consumers not
    yet acknowledged, over the whole server (-1: no limit). Destinations whose consumers
    were held back by it are woken when acknowledgements bring the count under it."""

    def __init__(self, limit: int, runtime: Runtime) -> None:
        self.limit = limit
        self.count = 0
        self.runtime = runtime
        self._waiters: set[Source] = set()

    def reached(self, subscription: Subscription) -> bool:
        if self.limit < 0 or self.count < self.limit:
            return False
        self._waiters.add(subscription.destination)
        return True

    def acknowledged(self, count: int) -> None:
        """``count`` client-mode deliveries were acknowledged (or given back)."""
        before = self.count
        self.count -= count
        if before >= self.limit > self.count >= 0 and self._waiters:
            waiters, self._waiters = self._waiters, set()
            for destination in waiters:
                self.runtime.call_soon(destination.consumer_ready)


class Subscription:
    """Delivers messages to a client's egress and tracks them until acknowledged.

    In STOMP 1.2 the MESSAGE ``ack`` header is ``<message-id>@<number>``, where
    ``number`` identifies the subscription within its connection, so that an
    ACK names exactly one delivery even when two subscriptions of a connection
    receive the same topic message.
    """

    __slots__ = (
        "sub_id",
        "number",
        "destination",
        "limit",
        "ack_mode",
        "egress",
        "stomp_version",
        "head",
        "unacked",
        "ack_suffix",
        "durable_key",
        "replaying",
        "replayed_upto",
        "skipped_upto",
        "acked_position",
        "window_messages",
        "window_bytes",
        "inflight_messages",
        "inflight_bytes",
        "waiting",
        "cursor",
        "policy",
        "delivered",
        "acknowledged",
        "slow_drop",
        "session_id",
        "ended",
        "written_order",
        "journal",
        "record_delivery",
        "pool",
        "large",
        "selector",
        "accepts",
        "exclusive",
        "filter",
        "in_order",
    )

    def __init__(
        self,
        sub_id: str,
        number: int,
        destination: Source,
        ack_mode: str,
        egress: Egress,
        stomp_version: str,
        durable_key: tuple[str, str] | None = None,
        window: tuple[int, int] = (1 << 62, 1 << 62),
        selector: Selector | None = None,
        exclusive: bool = False,
        session_id: str = "",
    ) -> None:
        self.sub_id = sub_id
        self.number = number
        self.destination = destination
        self.limit = destination.services.unacked
        self.journal = journal = destination.services.journal
        # The per-delivery hook, or None: with the journal off, or in auto mode (whose
        # deliveries are recorded when written: ``written``), a delivery skips the call.
        self.record_delivery = journal.delivered if journal.records and ack_mode != "auto" else None
        self.ack_mode = ack_mode
        self.egress = egress
        self.stomp_version = stomp_version  # its MESSAGE frames are encoded for it
        self.head = subscription_head(sub_id, stomp_version)
        # Delivered and not yet acknowledged, in delivery order; None in auto mode.
        self.unacked: dict[str, Message] | None = None if ack_mode == "auto" else {}
        # Client (cumulative) mode: the unacknowledged ones written, in the order written.
        # The egress queues write by priority, not in delivery order, and a cumulative ACK
        # covers what the client received before it.
        self.written_order: dict[str, None] | None = {} if ack_mode == "client" else None
        numbered = stomp_version == "1.2" and ack_mode != "auto"  # its ack values say its number
        self.ack_suffix = ack_suffix(number) if numbered else None
        self.durable_key = durable_key  # (client id, name) of a durable topic subscription
        self.replaying = durable_key is not None  # catching up from the store first
        self.replayed_upto = 0  # a durable subscriber's last stored position its replay read
        self.skipped_upto = 0  # the last stored position it skipped live while replaying
        self.acked_position = 0  # a durable subscriber's acknowledged store position
        self.window_messages, self.window_bytes = window
        # Large deliveries are bounded by the destination's work pool (``workpool``).
        self.pool = destination.services.pools.of(destination.domain)
        self.large = self.pool.large
        self.inflight_messages = 0
        self.inflight_bytes = 0
        self.waiting = False  # a destination skipped it for not being ready
        self.cursor = 0  # next index in its topic's live buffer
        self.policy = "block"  # slow-subscriber policy; its topic sets it on subscribe
        self.delivered = 0
        self.acknowledged = 0  # deliveries acknowledged (ACKed, or written in auto mode)
        self.slow_drop: SlowSubscriberDrop  # set by the session that made it
        self.session_id = session_id  # the session it belongs to (the journal names it)
        self.ended = False
        self.selector = selector  # its JMS message selector, compiled
        self.accepts = None if selector is None else selector.match  # None: everything
        self.exclusive = exclusive  # activemq.exclusive: the only consumer while it lives
        self.filter: Filter[Subscription] | None = None  # its queue's consumers with its selector
        # A queue's (or queue wildcard's) deliveries are written in the order the queue
        # hands them over, whatever their delivery mode (``ready_for``).
        self.in_order = destination.domain == P2P

    # -- readiness -------------------------------------------------------------------------

    def ready_for(self, message: Message) -> bool:
        """Whether the consumer can take ``message`` now (the window's whole-message rule:
        a message is handed over while the window is not yet full)."""
        queue = message.egress_queue
        if queue is not G1 and self.in_order and self.egress.queues.nonempty & G1_BIT:
            # A queue's non-persistent message goes in G-1 while that holds anything, so
            # that it cannot overtake persistent ones the queue handed over before it (the
            # D queues are written first): one order over both delivery modes is what a
            # queue promises (README, "Selecting, ordering and routing").
            queue = G1
        if self.policy == "discard-oldest" and queue in DISCARDABLE and self.unacked is None:
            return True  # its own egress queue discards: it never holds anyone up
        if self.inflight_messages >= self.window_messages or (
            self.inflight_bytes >= self.window_bytes
        ):
            return False
        if self.unacked is not None and self.limit.reached(self):
            return False
        if message.size > self.large and not self.pool.admits(self.destination):
            return False
        queues = self.egress.queues
        return queues.policy is DISCARD_OLDEST or queues.has_room(queue, message.size)

    @property
    def ready(self) -> bool:
        """Ready in general (for the admin view): the window has room."""
        return (
            self.inflight_messages < self.window_messages
            and self.inflight_bytes < self.window_bytes
        )

    def _wake(self) -> None:
        if self.waiting:
            self.waiting = False
            self.egress.outbox.wake(self.destination.consumer_ready)

    def skips(self, message: Message) -> bool:
        """Whether a topic subscriber passes over a message: one its selector does not
        select, or one it leaves to its replay (``left_to_replay``)."""
        accepts = self.accepts
        if accepts is not None and not accepts(message):
            return True
        return bool(message.store_seq) and self.left_to_replay(message)

    def left_to_replay(self, message: Message) -> bool:
        """Whether a durable subscriber leaves a live stored message to its replay: all of
        them while it replays (the highest is noted, so that the replay reads on to it),
        and afterwards those the replay already read."""
        if self.durable_key is None:
            return False
        seq = message.store_seq
        if self.replaying:
            if seq > self.skipped_upto:
                self.skipped_upto = seq
            return True
        return seq <= self.replayed_upto

    # -- delivery --------------------------------------------------------------------------

    def deliver_run(
        self,
        messages: list[Message] | list[Message | None],
        start: int = 0,
        unselected: list[Message] | None = None,
        screen: bool = True,
    ) -> int:
        """Deliver from ``messages[start]`` on (a topic's, or a lone queue consumer's) as
        far as the consumer can take them, as ``ready_for`` and ``deliver`` would one by
        one; returns the index of the first one it cannot take (``len(messages)``: it took
        them all). It passes over what it skips (``skips``, unless ``screen`` is False: a
        queue chose them for it; added to ``unselected`` if given) and None (an expired
        message's place). The frames go to the egress in runs, one per egress queue met
        (``Egress.push_messages``). Where nothing is to be screened, tracked or
        discarded, the messages after the one that begins a run are made its entries in
        C (``plain_entries``, which stops where this loop has more to do)."""
        screened = screen and (self.accepts is not None or self.durable_key is not None)
        discarding = self.policy == "discard-oldest" and self.unacked is None
        in_order = self.in_order
        egress = self.egress
        queues = egress.queues
        blocking = queues.policy is not DISCARD_OLDEST
        unacked = self.unacked
        limit = self.limit
        record = self.record_delivery
        tracked = record is not None or unacked is not None
        make = new_entry
        suffix = self.ack_suffix
        large = self.large
        version = self.stomp_version
        head = self.head
        window_messages = self.window_messages
        window_bytes = self.window_bytes
        inflight_messages = self.inflight_messages
        inflight_bytes = self.inflight_bytes
        entries: list[Entry] = []
        run_queue = -1  # the egress queue of the run being collected
        burst = work_left = room = 0  # what it admits (``EgressQueues.room``), at the start
        # The common case (nothing to screen, track or discard) in C: once a message has
        # begun a run, those after it in the run (``plain_entries``).
        fast = not (screened or tracked or discarding)
        frame = (head, version, self, make)
        index = start
        count = passed = len(messages)
        while index < count:
            if fast and run_queue != -1:
                g1_first = in_order and (run_queue is G1 or queues.nonempty & G1_BIT)
                limits = (
                    large,
                    window_messages - inflight_messages,
                    window_bytes - inflight_bytes,
                    burst if blocking else NEVER_SPENT,
                    work_left,
                )
                index, taken, nbytes, burst, work_left = plain_entries(
                    messages, index, run_queue, G1 if g1_first else None, frame, limits, entries
                )
                inflight_messages += taken
                inflight_bytes += nbytes
                if index == count:
                    break
            message = messages[index]
            index += 1
            if message is None or (screened and self.skips(message)):
                if message is not None and unselected is not None:
                    unselected.append(message)
                continue
            queue = message.egress_queue
            if in_order and queue is not G1 and (run_queue is G1 or queues.nonempty & G1_BIT):
                queue = G1  # as ``ready_for`` says, the run's own G-1 frames counted
            if queue != run_queue:
                if entries:
                    inflight_messages, inflight_bytes = self._push_run(
                        run_queue, entries, room - work_left, inflight_messages, inflight_bytes
                    )
                    entries = []
                run_queue = queue
                burst, work_left = queues.room(queue)
                room = work_left
            size = message.size
            if not (discarding and queue in DISCARDABLE) and (  # not ready (``ready_for``)
                inflight_messages >= window_messages
                or inflight_bytes >= window_bytes
                or (unacked is not None and limit.reached(self))
                or (size > large and not self.pool.admits(self.destination))
                or (blocking and burst <= 0 and ((size + 2047) >> 11 or 1) > work_left)
            ):  # the last: as ``EgressQueues.has_room``
                passed = index - 1
                break
            if size > large:
                self.pool.take(self.destination)
                tail = message.own_tail(version)
            else:  # encoded once for every subscriber
                tail = message.wire_tail(version)
            frame_head = head
            if tracked:  # journal records per delivery, or the client acknowledges
                if record is not None:
                    record(self, message)
                if unacked is not None:
                    unacked[message.message_id] = message
                    limit.count += 1
                    if suffix is not None:
                        frame_head = head + ack_line(message.message_id, suffix)
            units = (len(frame_head) + len(tail) + 2047) >> 11 or 1  # as ``new_entry`` says
            entries.append(make(frame_head, tail, self, units, message))
            burst -= 1
            work_left -= units
            inflight_messages += 1
            inflight_bytes += size
        if entries:
            self._push_run(run_queue, entries, room - work_left, inflight_messages, inflight_bytes)
        return passed

    def _push_run(
        self, queue: int, entries: list[Entry], work: int, messages: int, nbytes: int
    ) -> tuple[int, int]:
        """Queue a run's frames (``deliver_run``), its deliveries counted in the window
        (``messages``, ``nbytes``: the window's counts with them); returns the window's
        counts after, which an egress that discards (discard-oldest) lowered for each
        delivery it dropped (``discarded``)."""
        self.delivered += len(entries)
        self.inflight_messages = messages
        self.inflight_bytes = nbytes
        self.egress.push_messages(queue, entries, work)
        return self.inflight_messages, self.inflight_bytes

    def deliver(self, message: Message) -> None:
        record = self.record_delivery
        if record is not None:
            record(self, message)
        if message.size > self.large:
            self.pool.take(self.destination)
            tail = message.own_tail(self.stomp_version)
        else:
            tail = message.wire_tail(self.stomp_version)
        queue = message.egress_queue
        if queue is not G1 and self.in_order and self.egress.queues.nonempty & G1_BIT:
            queue = G1  # as ``ready_for`` says (inlined: it runs for every delivery)
        self.inflight_messages += 1
        self.inflight_bytes += message.size
        self.delivered += 1
        unacked = self.unacked
        if unacked is None:
            self.egress.push_message(queue, self.head, tail, self, message)
            return
        unacked[message.message_id] = message
        self.limit.count += 1
        head = self.head
        if self.ack_suffix is not None:
            head += ack_line(message.message_id, self.ack_suffix)
        self.egress.push_message(queue, head, tail, self, message)

    def deliver_first_of_group(self, message: Message) -> None:
        """Deliver the first message of a message group this consumer gets (now its owner):
        the MESSAGE says so (``JMSXGroupFirstForConsumer:true``)."""
        head = self.head
        self.head = head + GROUP_FIRST_LINE
        try:
            self.deliver(message)
        finally:
            self.head = head

    def redeliver(self, messages: list[Message]) -> None:
        """Deliver NACKed messages again. A durable subscriber's wait for acknowledgement in
        their place in the store order, as before (its position stops before the oldest
        stored one unacknowledged: the first in ``unacked``)."""
        for message in messages:
            self.deliver(message)
        unacked = self.unacked
        if unacked is not None and self.durable_key is not None:
            self.unacked = dict(sorted(unacked.items(), key=lambda item: item[1].store_seq))

    def written(self, messages: list[Message]) -> None:
        """The writer put deliveries on the socket. In auto mode that frees their window
        slots and acknowledges them: a delivery never written (the client went away
        first) is not acknowledged, so a stored one is delivered again."""
        if self.pool.in_progress:
            self.pool.release(self.destination, messages)
        if self.written_order is not None:
            order = self.written_order
            for message in messages:
                order[message.message_id] = None
        elif self.unacked is None:
            self.journal.consumed(self, messages)
            self.acknowledged += len(messages)
            self.destination.count("acknowledged", messages)
            self.inflight_messages -= len(messages)
            nbytes = 0
            stored: list[Message] = []
            for message in messages:  # one loop, not a sum and a list over generators
                nbytes += message.size
                if message.store_seq:
                    stored.append(message)
            self.inflight_bytes -= nbytes
            if stored:
                persistence = self.destination.services.persistence
                assert persistence is not None
                persistence.acknowledge(self.destination.acknowledged(self, stored), None)
        self._wake()

    def discarded(self, entry: Entry) -> None:
        """The client's egress queue discarded a delivery (discard-oldest)."""
        message = entry.item
        assert isinstance(message, Message)
        self.pool.release(self.destination, [message])
        if self.unacked is not None:
            if self.unacked.pop(message.message_id, None) is None:
                return
            if self.written_order is not None:
                self.written_order.pop(message.message_id, None)
            self.limit.acknowledged(1)
        self.journal.egress_discarded(self, message)
        self.destination.count("discarded", (message,))
        self.inflight_messages -= 1
        self.inflight_bytes -= message.size
        self._wake()

    def end(self) -> list[Message]:
        """The subscription ends: the deliveries still waiting in the client's egress are
        taken back and returned (in auto mode they leave the window here, as no write
        will free them)."""
        self.ended = True
        return self._withdraw(None)

    def leave(self, destination: str) -> list[Message]:
        """A wildcard subscription leaves one destination: its deliveries of it still
        waiting in the client's egress are taken back and returned, as ``end`` does."""
        return self._withdraw(lambda message: message.destination == destination)  # type: ignore[attr-defined]

    def _withdraw(self, which: Callable[[object], bool] | None) -> list[Message]:
        messages = [entry.item for entry in self.egress.queues.withdraw(self, which)]
        self.pool.release(self.destination, messages)  # type: ignore[arg-type]
        if self.unacked is None:
            self.inflight_messages -= len(messages)
            self.inflight_bytes -= sum(m.size for m in messages)  # type: ignore[attr-defined]
        return messages  # type: ignore[return-value]

    # -- acknowledgement -------------------------------------------------------------------

    def take_acknowledged(self, message_id: str) -> list[Message]:
        """Remove what an ACK/NACK of ``message_id`` covers (client mode: all written up to
        it, in the order written); the caller frees their window slots (``release``), once
        for the ACKs read together.

        The caller has checked that ``message_id`` is awaiting acknowledgement.
        """
        unacked = self.unacked
        assert unacked is not None
        order = self.written_order
        if order is None or message_id not in order:
            messages = [unacked.pop(message_id)]
            if order is not None:
                order.pop(message_id, None)
        else:
            covered = []
            for key in order:
                covered.append(key)
                if key == message_id:
                    break
            for key in covered:
                del order[key]
            messages = [unacked.pop(key) for key in covered]
        return messages

    def take_unacked(self) -> list[Message]:
        """Remove and return every unacknowledged message, oldest first."""
        if not self.unacked:
            return []
        messages = list(self.unacked.values())
        self.unacked.clear()
        if self.written_order is not None:
            self.written_order.clear()
        self.release(messages)
        return messages

    def take_unacked_of(self, destination: str) -> list[Message]:
        """Remove and return the unacknowledged messages of one destination, oldest first
        (a wildcard subscription leaving it)."""
        if not self.unacked:
            return []
        messages = [m for m in self.unacked.values() if m.destination == destination]
        for message in messages:
            del self.unacked[message.message_id]
            if self.written_order is not None:
                self.written_order.pop(message.message_id, None)
        self.release(messages)
        return messages

    def release(self, messages: list[Message]) -> None:
        """Acknowledged (or given back) deliveries leave the window and the unacknowledged
        limit; the destination is woken if the consumer waited for room."""
        self.inflight_messages -= len(messages)
        self.inflight_bytes -= sum(m.size for m in messages)
        self.limit.acknowledged(len(messages))
        self._wake()

    def state(self) -> dict[str, object]:
        """Flow-control state for the admin view."""
        return {
            "id": self.sub_id,
            "destination": self.destination.name,
            "ack": self.ack_mode,
            "ready": self.ready,
            "window_messages": self.window_messages,
            "window_bytes": self.window_bytes,
            "inflight_messages": self.inflight_messages,
            "inflight_bytes": self.inflight_bytes,
            "unacked": len(self.unacked) if self.unacked is not None else None,
            "delivered": self.delivered,
            "acknowledged": self.acknowledged,
            "durable": "/".join(self.durable_key) if self.durable_key else None,
            "replaying": self.replaying if self.durable_key else None,
            "policy": self.policy,
            "selector": self.selector.text if self.selector is not None else None,
            "exclusive": self.exclusive,
        }
