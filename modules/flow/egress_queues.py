"""Per-client egress priority queues in front of the client's TCP transmit queue.

Frames for one client wait in five queues, drained by strict priority (high
to low): C-1 control frames (RECEIPT, ERROR, CONNECTED, heart-beats); D-3,
D-2, D-1 non-persistent messages by class of service 3/2/1; G-1 persistent
messages. Sizes are counted in work units of 2,048 bytes.

Admission: a queue takes a message while it holds fewer than ``min_burst``
messages, or while its work plus the message's work is within ``max_depth``;
otherwise the queue is *full*, and what happens then is the client's policy
(one per client, as a client profile's; it may be changed at any time):

- ``Policy.DISCARD_OLDEST``: a full D queue discards its oldest messages until
  the new one is admitted (or the queue is empty), and the client's next
  message written out carries a discard indication. Persistent (G-1) and
  control (C-1) frames are never discarded: a full G-1 or C-1 queue still
  takes the frame.
- ``Policy.BLOCK``: nothing is discarded and the queue takes the message
  anyway, going over ``max_depth``. Callers under BLOCK are expected to stop
  delivering to the client before this happens, by asking ``ready(queue)``
  or ``has_room(queue, nbytes)`` first and treating the consumer as not ready
  while it says no.

Draining follows the whole-message rule of a TCP transmit queue bounded in
bytes: while the transmit queue is below its bound the whole next message is
placed on it, even if that takes it over the bound; at or above the bound
nothing more is taken (``drain(budget)``). In the server the bound is the
transport's write buffer (``server/writer.py``), whose producer pause stops
the draining.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Any, NamedTuple, Protocol

from wiremq.config.groups import EgressSettings
from wiremq.modules.stomp._fast import Maker, take_frames

WORK_UNIT = 2048  # bytes per work unit


class EgressQueue(IntEnum):
    """The five queues; the value is the drain order (0 is drained first)."""

    C1 = 0
    D3 = 1
    D2 = 2
    D1 = 3
    G1 = 4

    @property
    def label(self) -> str:
        return f"{self.name[0]}-{self.name[1]}"


class Policy(Enum):
    """What a full queue does with a new message (see the module docstring)."""

    BLOCK = "block"
    DISCARD_OLDEST = "discard-oldest"


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """One queue's ``max-depth`` (work units) and ``min-msg-burst`` (messages)."""

    max_depth: int
    min_burst: int

    def __post_init__(self) -> None:
        if self.max_depth < 1 or self.min_burst < 0:
            raise ValueError(f"need max_depth >= 1 and min_burst >= 0: {self}")


def queue_limits(settings: EgressSettings) -> tuple[QueueLimits, ...]:
    """Each queue's limits from the ClientEgress parameters, in EgressQueue order: C-1 and
    the D queues take ``minmsgburst``, G-1 ``g1minmsgburst``."""
    burst = QueueLimits(settings.maxdepth, settings.minmsgburst)
    return (burst, burst, burst, burst, QueueLimits(settings.maxdepth, settings.g1minmsgburst))


class EntryOwner(Protocol):
    """Who queued entries (a subscription): told, once per run of its entries written,
    which of its items went out, and of each entry discarded."""

    def written(self, items: list[Any]) -> None: ...
    def discarded(self, entry: Entry) -> None: ...


class Entry(NamedTuple):
    """One frame waiting: ``head`` + ``tail`` on the wire, and who delivered it.

    ``item`` is opaque here (the message, or None for a control frame); its owner
    (None for a control frame) is told when the entry was written, or that it was
    discarded. A tuple, built without the NamedTuple's Python-level ``__new__``: one
    is made per frame sent, on the hot path.
    """

    head: bytes
    tail: bytes
    owner: EntryOwner | None
    work: int
    item: object

    @property
    def nbytes(self) -> int:
        """Bytes on the wire (not stored: few callers need it)."""
        return len(self.head) + len(self.tail)


# new_entry(head, tail, owner, work, item): an Entry made in C, without the NamedTuple's
# Python-level __new__ (one is made per frame sent); ``work`` is its work units,
# (len(head) + len(tail) + 2047) >> 11 or 1.
new_entry = Maker(Entry)


class Drained(NamedTuple):
    """What one drain took: whole entries by priority, and the discard indication the
    first message among them carries (``indicated``: its index, -1 if none)."""

    entries: list[Entry]
    indicated: int
    discarded: int


class _Queue:
    __slots__ = (
        "entries",
        "work",
        "max_depth",
        "min_burst",
        "discardable",
        "bit",
        "hwm",
        "discards",
        "delivered",
    )

    def __init__(self, queue: EgressQueue, limits: QueueLimits) -> None:
        self.entries: deque[Entry] = deque()
        self.work = 0
        self.max_depth = limits.max_depth
        self.min_burst = limits.min_burst
        self.discardable = queue not in (EgressQueue.C1, EgressQueue.G1)
        self.bit = 1 << queue
        self.hwm = 0
        self.discards = 0
        self.delivered = 0

    def admits(self, work: int) -> bool:
        return len(self.entries) < self.min_burst or self.work + work <= self.max_depth


# For each set of non-empty queues (a bit per queue), the one drained first.
_FIRST = tuple((bits & -bits).bit_length() - 1 for bits in range(1 << len(EgressQueue)))


class EgressQueues:
    """One client's five egress queues, their statistics and its discard indication.

    ``policy`` is what a full D queue does (see the module docstring); it is a
    plain attribute the server may change. ``on_discard(entry)`` is called for
    every entry discarded, so that its owner can give back what it reserved
    for it (a consumer window slot, say); it must not enqueue on this client.
    """

    __slots__ = ("policy", "_queues", "nonempty", "_discarded", "_on_discard")

    def __init__(
        self,
        limits: tuple[QueueLimits, ...],
        policy: Policy = Policy.BLOCK,
        on_discard: Callable[[Entry], object] | None = None,
    ) -> None:
        if len(limits) != len(EgressQueue):
            raise ValueError(f"need limits for {len(EgressQueue)} queues, got {len(limits)}")
        self.policy = policy
        self._queues = tuple(_Queue(queue, limits[queue]) for queue in EgressQueue)
        self.nonempty = 0  # a bit per queue holding entries (bit q: queue q), read by deliveries
        self._discarded = 0  # discards not yet indicated to the client
        self._on_discard = on_discard

    def enqueue(
        self,
        queue: int,
        head: bytes,
        tail: bytes,
        owner: EntryOwner | None = None,
        item: object = None,
    ) -> None:
        """Queue a frame on ``queue`` (an ``EgressQueue``); see the module docstring."""
        q = self._queues[queue]
        # Work units (WORK_UNIT == 1 << 11 bytes, rounded up, at least 1), inlined: this is
        # the hot path.
        work = (len(head) + len(tail) + 2047) >> 11 or 1
        entries = q.entries
        depth = q.work + work
        if (
            depth > q.max_depth
            and len(entries) >= q.min_burst
            and q.discardable
            and self.policy is Policy.DISCARD_OLDEST
        ):
            self._discard_for(q, work)
            depth = q.work + work
        entries.append(new_entry(head, tail, owner, work, item))
        q.work = depth
        if depth > q.hwm:
            q.hwm = depth
        self.nonempty |= q.bit

    def enqueue_run(self, queue: int, entries: list[Entry], work: int) -> None:
        """Queue a run of frames on ``queue`` (``new_entry`` each, ``work`` their work units
        together), as ``enqueue`` would one by one: the frames of one delivery run
        (``Subscription.deliver_run``)."""
        q = self._queues[queue]
        if q.discardable and self.policy is Policy.DISCARD_OLDEST:
            for head, tail, owner, _, item in entries:
                self.enqueue(queue, head, tail, owner, item)
            return
        q.entries.extend(entries)
        depth = q.work = q.work + work
        if depth > q.hwm:
            q.hwm = depth
        self.nonempty |= q.bit

    def room(self, queue: int) -> tuple[int, int]:
        """What ``queue`` admits before it is full: frames while the first is positive
        (below ``min_burst``), else frames whose work fits in the second (work units)."""
        q = self._queues[queue]
        return q.min_burst - len(q.entries), q.max_depth - q.work

    def _discard_for(self, q: _Queue, work: int) -> None:
        entries = q.entries
        on_discard = self._on_discard
        while entries and not q.admits(work):
            old = entries.popleft()
            q.work -= old.work
            q.discards += 1
            self._discarded += 1
            if on_discard is not None:
                on_discard(old)

    def count_discard(self, queue: int) -> None:
        """A message for this client was dropped before reaching ``queue`` (its
        subscription could not take it): counted, and indicated like any discard."""
        self._queues[queue].discards += 1
        self._discarded += 1

    def drain(self, budget: int) -> Drained:
        """Take entries by strict priority, whole, while fewer than ``budget`` bytes were
        taken: the whole-message rule of a transmit queue with ``budget`` bytes of room
        (the caller writes them all).

        The first MESSAGE entry after discards carries their number (``Drained``),
        and the writer adds the discard indication to that frame; control (C-1)
        entries never do.
        """
        queues = self._queues
        taken: list[Entry] = []
        indicated = -1
        discarded = 0
        size = 0
        while self.nonempty and size < budget:
            index = _FIRST[self.nonempty]
            q = queues[index]
            if index and self._discarded:
                indicated = len(taken)
                discarded = self._discarded
                self._discarded = 0
            # A run of this queue's entries (strict priority: nothing above it waits), moved
            # in C: this runs per frame.
            first = len(taken)
            size, work = take_frames(q.entries, taken, size, budget)
            q.work -= work
            q.delivered += len(taken) - first
            if not q.entries:
                self.nonempty ^= q.bit
        return Drained(taken, indicated, discarded)

    @property
    def pending(self) -> bool:
        """True while any queue holds an entry."""
        return self.nonempty != 0

    @property
    def discarded(self) -> int:
        """Messages discarded since the last message written (the pending indication)."""
        return self._discarded

    def holds(self, queue: int) -> bool:
        """Whether ``queue`` holds any entry."""
        return bool(self.nonempty & (1 << queue))

    def has_room(self, queue: int, nbytes: int) -> bool:
        """Would ``queue`` admit a frame of ``nbytes`` without being full?"""
        q = self._queues[queue]
        # _Queue.admits and the work units inlined: asked before every delivery.
        return len(q.entries) < q.min_burst or q.work + ((nbytes + 2047) >> 11 or 1) <= q.max_depth

    def ready(self, queue: int) -> bool:
        """The client is ready for ``queue`` while it would admit a one-unit message."""
        return self._queues[queue].admits(1)

    @property
    def queued_work(self) -> int:
        """Work units queued now, over all five queues."""
        return sum(q.work for q in self._queues)

    @property
    def capacity_work(self) -> int:
        """The sum of the five queues' max-depths, in work units."""
        return sum(q.max_depth for q in self._queues)

    def withdraw(self, owner: object, which: Callable[[object], bool] | None = None) -> list[Entry]:
        """Remove and return the entries ``owner`` queued (only those whose item ``which``
        picks, if given), by drain order: a subscription that ended, or a wildcard one that
        left a destination; what was not written is not to be."""
        withdrawn: list[Entry] = []
        for q in self._queues:
            if not any(entry.owner is owner for entry in q.entries):
                continue
            kept: deque[Entry] = deque()
            for entry in q.entries:
                if entry.owner is owner and (which is None or which(entry.item)):
                    withdrawn.append(entry)
                    q.work -= entry.work
                else:
                    kept.append(entry)
            q.entries = kept
            if not kept:
                self.nonempty &= ~q.bit
        return withdrawn

    def clear(self) -> list[Entry]:
        """Remove and return every entry, by drain order (the client has gone)."""
        removed: list[Entry] = []
        for q in self._queues:
            removed.extend(q.entries)
            q.entries.clear()
            q.work = 0
        self.nonempty = 0
        self._discarded = 0
        return removed

    def messages_written(self) -> int:
        """MESSAGE frames written to the client: every queue's but C-1's (control frames:
        CONNECTED, RECEIPT, ERROR, heart-beats)."""
        return sum(q.delivered for q in self._queues[EgressQueue.D3 :])

    def stats(self) -> dict[str, dict[str, int]]:
        """Per-queue statistics as ``show client stats queue`` lists them, and totals.

        Keys: "C-1", "D-3", "D-2", "D-1", "G-1", "total". The total has no
        high-water mark (the queues' marks are not reached together).
        """
        result: dict[str, dict[str, int]] = {}
        for queue, q in zip(EgressQueue, self._queues, strict=True):
            result[queue.label] = {
                "length_msgs": len(q.entries),
                "length_work": q.work,
                "hwm_work": q.hwm,
                "max_work": q.max_depth,
                "discards_msgs": q.discards,
                "delivered_msgs": q.delivered,
            }
        result["total"] = {
            key: sum(row[key] for row in result.values())
            for key in ("length_msgs", "length_work", "max_work", "discards_msgs", "delivered_msgs")
        }
        return result
