"""A queue's stored messages that are not in memory, and what to read back next.

A queue keeps its persistent messages in memory (its live buffer) up to
persqueuebytehighwatermark; past that, a message and every later one stay
only in the store (``after``: stored messages after it are not in memory)
and are read back in order once memory has drained (the *main* read).

Reading only in order would starve some consumers behind a large backlog,
so a queue also reads out of order (a *scan*: the store is searched from a
cursor for the messages a predicate accepts, ``scanmsgamount`` examined per
read):

- for a selective consumer that has nothing in memory it selects while the
  store holds messages its selector has not seen (each ``Filter`` keeps its
  own cursor, ``store_after``): what it selects comes back whatever lies
  before it;
- for priority: the queue counts, per priority, the messages it left in the
  store; when one of a higher priority than anything waiting in memory is
  among them, that priority is read first (with a cursor per priority).
  After a restart those counts are unknown: the queue surveys its backlog
  once for messages above the default priority, between the reads that fill
  memory in order.

Messages read out of order are ``pulled``: the reads that come later skip
them (they are in memory, or delivered and not yet acknowledged), until the
main read passes them. While memory stays full of messages nobody selects,
the main read does not come, so once ``pulled`` has doubled (and holds more
than ``scanmsgamount``) a *sweep* looks in the store for the pulled messages
still there and forgets the others (acknowledged since: a position is never
used twice), so what the queue remembers stays proportional to what it holds.
One read runs at a time per queue.

A read sees every message committed before it was asked for; one left in the
store after that may be past what it saw, so a read that reached the end has
seen everything only if no message was left since it was asked for
(``leaves`` counts them). A live buffer given back after an idle time
(``give_back``) is read again the same way, skipping the messages consumers
hold (``given_back``); the store keeps no delivery state, so the delivery
counts of the redelivered ones wait here until they are read back
(``given_back_redeliveries``).

Stored messages an operator takes out of the backlog (``withhold``) are
skipped by every read until the main read passes them, since a read may run
before their removal is committed.

Most queues never leave a message in the store: until one does, its counts per
priority and its sets of positions are shared empty ones (``NONE_LEFT``,
``NO_POSITIONS``), so that an idle queue holds no list or set of its own for
the garbage collector to walk.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from wiremq.config.groups import QueueStoreSettings
from wiremq.modules.destinations.levels import PRIORITIES
from wiremq.stores.api import Batch, Match
from wiremq.stores.records import JMS_DEFAULT_PRIORITY, StoredMessage

if TYPE_CHECKING:
    from wiremq.modules.destinations.filters import Filter

Found = list[tuple[int, StoredMessage]]
# Shared by the queues that left nothing in the store yet (see the module docstring):
# tuples and a frozenset, so that writing to them fails loudly.
NONE_LEFT = cast("list[int]", (0,) * PRIORITIES)
NO_POSITIONS = cast("set[int]", frozenset())


@dataclass(frozen=True, slots=True)
class Read:
    """One read back from the store: from where, what it accepts, and for whom."""

    after: int
    match: Match | None  # None: the main read, in order
    examine: int | None
    leaves: int  # messages left in the store before it was asked for
    priority: int | None = None
    level_leaves: int = 0  # a read of one priority: messages of it left before it was asked
    survey: bool = False  # the survey after a restart (above the default priority)
    sweep: bool = False  # looking for the pulled messages still in the store
    filter: Filter | None = None  # a read for a selective consumer


class StoreBacklog:
    """See the module docstring."""

    __slots__ = (
        "settings",
        "after",
        "leaves",
        "given_back",
        "given_back_upto",
        "given_back_redeliveries",
        "withheld",
        "left_upto",
        "pulled",
        "sweep_at",
        "sweep_after",
        "left",
        "left_total",
        "level_after",
        "unsurveyed",
        "survey_after",
        "read_under_way",
    )

    def __init__(self, settings: QueueStoreSettings) -> None:
        self.settings = settings
        self.after: int | None = None  # stored messages after this one are not in memory
        self.leaves = 0  # messages left in the store so far
        # A live buffer given back: its messages are read again from the store, and of the
        # stored messages up to ``given_back_upto`` only those (the others there are held
        # by consumers, or acknowledged and on their way out of the store).
        self.given_back = NO_POSITIONS
        self.given_back_upto = 0
        # The delivery counts of redelivered messages given back, by position.
        self.given_back_redeliveries: dict[int, int] = {}
        # Stored messages an operator took out of the backlog (deleted, moved) whose removal
        # a read may not see yet: its reads skip them.
        self.withheld = NO_POSITIONS
        self.left_upto = 0  # the last message left in the store (0: unknown)
        self.pulled: dict[int, str] = {}  # read out of order, after ``after``: their ids
        self.sweep_at = 0  # pulled messages remembered that make a sweep worth it
        self.sweep_after: int | None = None  # a sweep under way: how far it looked
        self.left = NONE_LEFT  # messages left in the store, per priority
        self.left_total = NONE_LEFT  # messages ever left, per priority
        self.level_after = NONE_LEFT  # how far each priority's reads went
        self.unsurveyed = False  # after a restart: priorities in the store unknown
        self.survey_after = 0
        self.read_under_way = False

    def leave(self, seq: int, priority: int) -> None:
        """A stored message that memory does not keep."""
        self._own_counts()
        if self.after is None:
            self.after = seq - 1  # it, and all after, stay in the store
            self.level_after = [max(a, seq - 1) for a in self.level_after]
        self.leaves += 1
        self.left_upto = seq
        self.left[priority] += 1
        self.left_total[priority] += 1

    def restore(self) -> None:
        """At start-up every stored message is in the store only."""
        self._own_counts()
        self.after = 0
        self.left[JMS_DEFAULT_PRIORITY] = 1  # some, as far as known
        self.unsurveyed = True

    def _own_counts(self) -> None:
        """The queue leaves messages in the store: its counts per priority are its own."""
        if self.left is NONE_LEFT:
            self.left = [0] * PRIORITIES
        if self.left_total is NONE_LEFT:
            self.left_total = [0] * PRIORITIES
        if self.level_after is NONE_LEFT:
            self.level_after = [0] * PRIORITIES

    # -- what to read next -----------------------------------------------------------------

    def next_read(
        self,
        memory_empty: bool,
        best_waiting: int,
        hungry: list[Filter],
        make_match: Callable[[Filter], Match],
    ) -> Read | None:
        """The read to run now, if any: ``memory_empty`` says no persistent message waits
        in memory (a main read may fill it), ``best_waiting`` is the highest priority
        waiting there (-1: none), ``hungry`` the selective filters with a ready consumer
        and nothing waiting for them."""
        after = self.after
        if after is None or self.read_under_way:
            return None
        examine = self.settings.scanmsgamount
        leaves = self.leaves
        top = self.higher_priority(memory_empty, best_waiting)
        if top is not None:
            start = max(self.level_after[top], after)
            level_leaves = self.left_total[top]
            return Read(start, _priority_is(top), examine, leaves, top, level_leaves)
        if memory_empty:
            return Read(after, None, None, leaves)
        if self.unsurveyed:
            start = max(self.survey_after, after)
            match = _priority_above(JMS_DEFAULT_PRIORITY)
            return Read(start, match, examine, leaves, survey=True)
        for filter_ in hungry:
            if filter_.store_seen != leaves:  # it has not seen every message left
                start = max(filter_.store_after, after)
                return Read(start, make_match(filter_), examine, leaves, filter=filter_)
        if self.sweep_after is None and len(self.pulled) > max(examine, self.sweep_at):
            self.sweep_after = min(self.pulled) - 1
        if self.sweep_after is not None:
            ids = frozenset(self.pulled.values())
            return Read(self.sweep_after, _one_of(ids), examine, leaves, sweep=True)
        return None

    def higher_priority(self, memory_empty: bool, best_waiting: int) -> int | None:
        """The priority to read first, if the store holds messages of a higher priority
        than any waiting in memory, that reading in order would not bring first."""
        if self.unsurveyed or self.after is None:
            return None
        levels = [p for p in range(PRIORITIES - 1, -1, -1) if self.left[p] > 0]
        if not levels:
            return None
        top = levels[0]
        if top > best_waiting and (top > levels[-1] or not memory_empty):
            return top
        return None

    def read_done(self, read: Read, batch: Batch) -> tuple[Found, Found]:
        """Note what a read saw; returns the messages to bring into memory and the expired
        ones met, less those already in memory or held by consumers."""
        self.read_under_way = False
        messages = self._not_handed_out(batch.messages)
        expired = self._not_handed_out(batch.expired)
        last = batch.last_seq
        seen_all = batch.at_end and self.leaves == read.leaves
        if read.sweep:
            self._swept(read.after, batch)
            return [], []
        for _, stored in messages:
            if self.left[stored.priority] > 0:
                self.left[stored.priority] -= 1
        if read.match is None:
            self._main_read(last, seen_all)
            return messages, expired
        self.pulled.update((seq, m.message_id) for seq, m in messages)
        self.pulled.update((seq, m.message_id) for seq, m in expired)
        if read.priority is not None:
            self.level_after[read.priority] = last
            if batch.at_end:  # only those left since it was asked for may lie beyond
                self.left[read.priority] = self.left_total[read.priority] - read.level_leaves
        elif read.survey:
            self.survey_after = last
            self.unsurveyed = not seen_all
        elif read.filter is not None:
            read.filter.store_after = last
            if seen_all:
                read.filter.store_seen = read.leaves
        return messages, expired

    def _swept(self, start: int, batch: Batch) -> None:
        """A sweep looked at the store after ``start`` up to ``batch.last_seq``: the pulled
        messages there that it did not find are gone for good."""
        last = batch.last_seq
        found = {seq for seq, _ in batch.messages}
        for seq in [s for s in self.pulled if start < s <= last and s not in found]:
            del self.pulled[seq]
        if batch.at_end or not self.pulled or last >= max(self.pulled):
            self.sweep_after = None
            self.sweep_at = 2 * len(self.pulled)
        else:
            self.sweep_after = last

    def _main_read(self, last: int, seen_all: bool) -> None:
        if last >= self.given_back_upto:
            self.given_back = NO_POSITIONS  # read past them all (any not met left the store)
        if seen_all:
            self._caught_up()
            return
        self.after = last
        if self.pulled:
            self.pulled = {seq: i for seq, i in self.pulled.items() if seq > last}
        if self.withheld:
            self.withheld = {seq for seq in self.withheld if seq > last} or NO_POSITIONS
        self.level_after = [max(a, last) for a in self.level_after]

    def _caught_up(self) -> None:
        """Nothing waits in the store that is not in memory."""
        self.after = None
        self.pulled.clear()
        self.withheld = NO_POSITIONS
        self.given_back = NO_POSITIONS
        self.sweep_after = None
        self.left = NONE_LEFT  # nothing is left (a read of one priority is not under way)
        self.unsurveyed = False

    def withhold(self, positions: list[int]) -> None:
        """Stored messages an operator takes out of the backlog: no read hands them out,
        even one that ran before their removal was committed."""
        if self.withheld is NO_POSITIONS:
            self.withheld = set()
        self.withheld.update(positions)
        for seq in positions:
            self.given_back_redeliveries.pop(seq, None)

    def purged(self, upto: int) -> None:
        """Every stored message waiting up to ``upto`` was removed (by an operator): unless
        messages were left in the store after it meanwhile, nothing waits there now."""
        if self.after is not None and not self.read_under_way and self.left_upto <= upto:
            self._caught_up()
        self.given_back_redeliveries = {
            seq: count for seq, count in self.given_back_redeliveries.items() if seq > upto
        }

    def _not_handed_out(self, read: Found) -> Found:
        """What a read brings into memory: ``left_in_store``; the given-back messages
        among them are no longer remembered."""
        if not self.given_back and not self.pulled and not self.withheld:
            return read
        kept = self.left_in_store(read)
        if self.given_back:
            given_back = self.given_back
            for seq, _ in kept:
                given_back.discard(seq)
        return kept

    def left_in_store(self, found: Found) -> Found:
        """Of stored messages read after ``after``, those not in memory nor held by
        consumers: not read out of order before, and, up to ``given_back_upto``, only
        those given back (the others there are held by consumers, or acknowledged and on
        their way out of the store); not withheld by an operator. Nothing here changes (a
        browser reads this way)."""
        given_back, pulled, upto = self.given_back, self.pulled, self.given_back_upto
        withheld = self.withheld
        return [
            (seq, m)
            for seq, m in found
            if seq not in pulled
            and seq not in withheld
            and (seq > upto or seq in given_back or not given_back)
        ]

    def give_back(self, seqs: list[int], redeliveries: dict[int, int]) -> None:
        """The live buffer (holding stored messages ``seqs``, and the delivery counts of
        the redelivered ones by position) is dropped: read it again.

        Stored messages it handed out and that are not yet removed (held by a consumer, or
        acknowledged with the removal on its way to the store) lie among them in the store:
        the reads skip them by remembering exactly which ones were given back. Every
        message after ``given_back_upto`` was never handed out.
        """
        self._own_counts()
        if self.given_back is NO_POSITIONS:
            self.given_back = set()
        self.given_back.update(seqs)
        self.given_back_redeliveries.update(redeliveries)
        upto = max(seqs) if self.after is None else self.after
        self.given_back_upto = max(self.given_back_upto, upto)
        self.leaves += 1  # what filters saw in the store is not all there is to see now
        self.after = min(self.given_back) - 1
        self.level_after = [min(a, self.after) for a in self.level_after]
        self.pulled = {s: i for s, i in self.pulled.items() if s not in self.given_back}
        self.sweep_after = None


def _priority_is(priority: int) -> Match:
    return lambda stored: stored.priority == priority


def _one_of(message_ids: frozenset[str]) -> Match:
    return lambda stored: stored.message_id in message_ids


def _priority_above(priority: int) -> Match:
    return lambda stored: stored.priority > priority
