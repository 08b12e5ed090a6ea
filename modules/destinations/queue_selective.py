"""A queue's selective way of dispatching: selectors, message groups, an exclusive consumer.

Consumers with one selector share a ``Filter`` (``filters.py``) whose own
list holds the waiting messages it selects, so a consumer finds its next
message at the head of its list whatever waits before it that it does not
select: a message nobody selects waits without holding back the ones behind
it, and no consumer is starved however large the backlog. Consumers without
a selector share ``everyone``, whose list is the queue's own.

An arriving message is tested once against the selectors that can match it
(``Matcher``), handed at once to a ready consumer that selects it and has
nothing older waiting, else listed (``route``). After anything else changed
(a consumer ready again, a subscription, a redelivery: ``serve_all``) every
ready consumer takes the head of its list in turn (``serve``); an arrival
alone does not, so it costs what routing it costs, however many consumers and
messages wait. Message groups (``groups.py``) and an exclusive consumer
(``activemq.exclusive``: only the first such consumer gets messages while it
lives) are served here too.

A lone consumer with nothing waiting for it takes what it selects of an
arriving run at once (``Subscription.deliver_run``), as a plain queue's does
(``queue_plain.py``); what it does not take is listed as routing would.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from operator import attrgetter

from wiremq.modules.destinations.filters import Filter, Matcher
from wiremq.modules.destinations.groups import CLOSES_GROUP, GROUP_SEQUENCE, Groups
from wiremq.modules.destinations.levels import Levels, before
from wiremq.modules.destinations.queue_counts import QueueCounts
from wiremq.modules.destinations.subscription import RUN_FROM, Subscription
from wiremq.modules.message import Message
from wiremq.modules.runtime import Runtime

GROUP = attrgetter("group")


class SelectiveDispatch:
    """The selective way for one queue (see the module docstring)."""

    __slots__ = (
        "main",
        "consumers",
        "groups",
        "counts",
        "runtime",
        "everyone",
        "filters",
        "matcher",
        "exclusive",
        "unrouted",
        "unrouted_levels",
        "met_expired",
        "serve_all",
        "served",
    )

    def __init__(
        self,
        main: Levels,
        consumers: OrderedDict[Subscription, None],
        counts: QueueCounts,
        runtime: Runtime,
    ) -> None:
        self.main = main  # the queue's list: every message waiting in memory
        self.consumers = consumers  # the queue's, in round-robin order
        self.groups = Groups()  # the queue's message groups
        self.counts = counts
        self.runtime = runtime
        self.everyone: Filter[Subscription] = Filter(None, main)  # the consumers without a selector
        self.filters: dict[str, Filter[Subscription]] = {}  # the others, by selector text
        self.matcher = Matcher()
        self.exclusive: list[Subscription] = []  # exclusive consumers, the first one active
        self.unrouted: list[Message] = []  # arrived since the last dispatch
        self.unrouted_levels = False  # one of them has a priority other than the default
        self.met_expired: list[Message] = []  # for the queue to handle
        self.serve_all = False  # every consumer is to look at its list (not only arrivals)
        self.served = 0  # consumers served, for fairness between filters

    @property
    def needed(self) -> bool:
        """Whether a consumer needs this way: one with a selector, or an exclusive one."""
        return bool(self.filters or self.exclusive)

    def dispatch(self, deliver: bool) -> list[Message]:
        """Route what arrived and, after anything else changed, let every consumer take
        from its list (only if ``deliver``: else what arrives is listed and waits); returns
        the expired messages met. A consumer that can take something listed for it was
        skipped when it could not, and its wake-up serves everyone."""
        if self.unrouted:
            unrouted, self.unrouted = self.unrouted, []
            if self.unrouted_levels:  # one arrived with a priority not the default
                self.unrouted_levels = False
                unrouted.sort(key=lambda m: -m.level)  # stable: arrival order within one
            self.route(unrouted, False, deliver)
        if not deliver:
            self.serve_all = True  # what was listed meanwhile waits for the consumers
        elif self.serve_all:
            self.serve_all = False
            self._serve()
        expired, self.met_expired = self.met_expired, []
        return expired

    def holds_nothing(self) -> bool:
        """No message waits to be routed, nor for the owner of its group."""
        groups = self.groups
        return not self.unrouted and not groups and not groups.reserved

    def best_waiting(self) -> int:
        """The highest priority waiting in memory (-1: none)."""
        return max([self.main.best(), *(m.level for m in self.unrouted)])

    def hungry(self) -> list[Filter[Subscription]]:
        """The filters with a ready consumer and nothing waiting for them in memory."""
        return [
            f
            for f in self.filters.values()
            if f.pending.head() is None and any(c.ready for c in f.consumers)
        ]

    # -- consumers -------------------------------------------------------------------------

    def subscribe(self, subscription: Subscription, store_after: int) -> None:
        """A consumer joins its filter (a new one for a new selector, which lists what
        waits, having tested the stored messages up to ``store_after``)."""
        selector = subscription.selector
        if selector is None:
            filter_ = self.everyone
        else:
            filter_ = self.filters.get(selector.text) or self._new_filter(subscription, store_after)
        subscription.filter = filter_
        filter_.consumers[subscription] = None
        if subscription.exclusive:
            self.exclusive.append(subscription)

    def _new_filter(self, subscription: Subscription, store_after: int) -> Filter[Subscription]:
        """The first consumer with its selector: the waiting messages it selects are listed
        for it (the only time they are all looked at for it)."""
        selector = subscription.selector
        assert selector is not None
        filter_: Filter[Subscription] = Filter(selector, Levels(home=False))
        for message in self.main:
            if filter_.accepts(message):
                filter_.pending.append(message)
        filter_.store_after = store_after
        self.filters[selector.text] = filter_
        self.matcher.add(filter_)
        return filter_

    def unsubscribe(self, subscription: Subscription) -> list[Message]:
        """A consumer leaves its filter; returns the messages of the groups it owned."""
        filter_ = subscription.filter
        assert filter_ is not None
        del filter_.consumers[subscription]
        if filter_ is not self.everyone and not filter_.consumers:
            del self.filters[filter_.selector.text]  # type: ignore[union-attr]
            self.matcher.remove(filter_)
        if subscription in self.exclusive:
            self.exclusive.remove(subscription)
        return self.groups.release(subscription)

    # -- routing ---------------------------------------------------------------------------

    def _expired_now(self, message: Message) -> bool:
        return message.expires != 0 and message.expires <= self.runtime.now_ms()

    def route(self, messages: list[Message], back: bool, deliver: bool = True) -> None:
        """Messages in memory to place, in turn: each handed at once (if ``deliver``) to a
        ready consumer that selects it and has nothing older waiting, round-robin within a
        filter, the least recently served filter first; else listed where its consumers
        look (``back``: it came back, so it goes to its place among the waiting ones).
        Every arrival is routed here, a run at a time: what it does per message is
        inlined."""
        if deliver and not back and len(messages) >= RUN_FROM and self._lone_takes_run(messages):
            return
        main = self.main
        everyone = self.everyone
        reserved = self.groups.reserved
        matching_of = self.matcher.matching
        add = Levels.insert if back else Levels.append
        for message in messages:
            if message.expires and self._expired_now(message):
                self._drop_expired(message)
                continue
            group = message.group
            if group is not None:
                owner = self.groups.owner(group)
                if owner is not None:
                    self._for_owner(owner, message, deliver)
                    continue
            matching = matching_of(message) if self.filters else []
            if deliver:
                if self.exclusive:
                    consumer = self._exclusive_ready(message, matching)
                    if consumer is not None:
                        self._take(consumer, message, None)
                        continue
                else:
                    candidates = matching
                    if everyone.consumers:
                        candidates = [*matching, everyone]
                    if len(candidates) > 1:
                        candidates = sorted(candidates, key=_last_served)
                    consumer = None
                    for filter_ in candidates:
                        pending = filter_.pending
                        # (the emptiness test of Levels.head, inlined: a listed message
                        # waits for these consumers and goes first)
                        if (pending.high != pending.low or pending.levels[pending.high]) and (
                            pending.head() is not None
                        ):
                            continue
                        consumers = filter_.consumers
                        for _ in range(len(consumers)):
                            consumer = next(iter(consumers))
                            consumers.move_to_end(consumer)
                            if reserved and reserved.get(consumer):
                                continue
                            if consumer.ready_for(message):
                                break
                            consumer.waiting = True
                        else:
                            consumer = None
                            continue
                        break
                    if consumer is not None:
                        self._take(consumer, message, None)
                        continue
            message.home = main
            add(main, message)
            for filter_ in matching:
                add(filter_.pending, message)

    def _lone_takes_run(self, messages: list[Message]) -> bool:
        """``route`` for arrivals in the common case, in a run: the only consumer (not
        exclusive, no message groups) has nothing waiting for it, and takes what it selects
        as far as it can (``deliver_run``); the rest is listed in arrival order. False: not
        that case, nothing was done."""
        if len(self.consumers) != 1 or self.exclusive or self.groups.reserved:
            return False
        if any(map(GROUP, messages)):
            return False
        consumer = next(iter(self.consumers))
        filter_ = consumer.filter
        assert filter_ is not None
        if filter_.pending.head() is not None:
            return False  # older messages wait for it: they go first (``serve``)
        everyone = filter_ is self.everyone
        matching_of = self.matcher.matching if self.filters else None
        # The consumer's selector is the queue's only one: its own test tells all.
        match = filter_.match if not everyone and len(self.filters) == 1 else None
        selected: list[Message] = []
        chosen: list[list[Filter[Subscription]]] = []  # the filters each selected one matches
        # Those it does not select, each with the filters it matches and how many selected
        # ones came before it (where it goes back among those not taken).
        passed: list[tuple[Message, list[Filter[Subscription]], int]] = []
        for message in messages:
            if message.expires and self._expired_now(message):
                self._drop_expired(message)
                continue
            if match is not None:
                if match(message):
                    selected.append(message)
                else:
                    passed.append((message, [], len(selected)))
                continue
            matching = [] if matching_of is None else matching_of(message)
            if everyone or filter_ in matching:
                selected.append(message)
                chosen.append(matching)
            else:
                passed.append((message, matching, len(selected)))
        taken = consumer.deliver_run(selected, screen=False)  # its selector was asked
        if taken < len(selected):
            consumer.waiting = True
        if taken:
            delivered = selected[:taken]
            for message in delivered:
                message.home = None
            self.counts.run_left_memory(delivered)
            self.served += taken
            filter_.served = self.served
        # What is left goes back in arrival order: the selected ones not taken (with the
        # filters they match: the consumer's alone where its selector is the only one)
        # and those passed over.
        main = self.main
        own = [filter_]
        index = taken
        for message, matching, before_it in passed:
            while index < before_it:
                self._list(main, selected[index], own if match is not None else chosen[index])
                index += 1
            self._list(main, message, matching)
        while index < len(selected):
            self._list(main, selected[index], own if match is not None else chosen[index])
            index += 1
        return True

    def _list(
        self, main: Levels, message: Message, matching: Iterable[Filter[Subscription]]
    ) -> None:
        """A message nobody took waits: in the queue's list and in its filters'."""
        message.home = main
        main.append(message)
        for other in matching:
            other.pending.append(message)

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

    def _exclusive_ready(
        self, message: Message, matching: list[Filter[Subscription]]
    ) -> Subscription | None:
        """The exclusive consumer, if it selects ``message``, has nothing older waiting
        for it and can take it now."""
        consumer = self.exclusive[0]
        filter_ = consumer.filter
        if (filter_ is self.everyone or filter_ in matching) and self._idle(consumer):
            if consumer.ready_for(message):
                return consumer
            consumer.waiting = True
        return None

    def _idle(self, consumer: Subscription) -> bool:
        """Nothing waits for ``consumer`` (listed for its filter, or kept for it)."""
        assert consumer.filter is not None
        reserved = self.groups.reserved.get(consumer)
        return consumer.filter.pending.head() is None and (reserved is None or not reserved)

    # -- serving every consumer ------------------------------------------------------------

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
        self.counts.left_memory(message)
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
            self.route(groups.close(group), True)
            self.serve_all = True

    def _drop_expired(self, message: Message) -> None:
        """An expired message met while dispatching: it leaves memory, never delivered."""
        message.home = None
        self.counts.left_memory(message)
        self.met_expired.append(message)


def _last_served(filter_: Filter[Subscription]) -> int:
    return filter_.served
