"""A queue's consumers grouped by selector, and which groups a message is for.

Consumers of one queue with the same selector text share one ``Filter``:
the selector is evaluated once per message for all of them, and the
messages it matches that wait are listed in the filter's own ``Levels``
(in delivery order), so that a consumer finds its next message at the head
of that list whatever waits before it that it does not select: a queue
never scans its backlog for a consumer. Consumers without a selector share
the queue's ``everyone`` filter, whose list is the queue's home list itself.

``Matcher`` says which filters a message matches. A selector whose top level
requires ``name = literal`` is indexed by that header's value, so that a
message is tested only against the selectors that can match it: a hundred
consumers that each select one ``shard`` cost one dictionary look-up per
message, not a hundred evaluations.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from wiremq.modules.destinations.levels import Levels
from wiremq.modules.selector import Selector
from wiremq.modules.selector.values import number

if TYPE_CHECKING:
    from wiremq.modules.message import Message

Consumer = TypeVar("Consumer")  # a queue's subscription (a filter only lists them)


class Filter(Generic[Consumer]):
    """The consumers of one queue with one selector (None: everything)."""

    __slots__ = ("selector", "match", "consumers", "pending", "store_after", "store_seen", "served")

    def __init__(self, selector: Selector | None, pending: Levels) -> None:
        self.selector = selector
        self.match = None if selector is None else selector.match
        self.consumers: OrderedDict[Consumer, None] = OrderedDict()  # in round-robin order
        self.pending = pending  # the waiting messages it matches, in delivery order
        self.store_after = 0  # a queue's stored messages up to this one were tested
        self.store_seen = -1  # all of them were, when the queue had left this many there
        self.served = 0  # when one of its consumers last got a message (fairness between them)

    def accepts(self, message: Message) -> bool:
        match = self.match
        return match is None or match(message)

    def __repr__(self) -> str:
        return f"<Filter {self.selector.text if self.selector else '(everything)'!r}>"


class Matcher:
    """Which selective filters of a queue a message matches (see the module docstring)."""

    def __init__(self) -> None:
        # header name -> (filters by the text it must equal, filters by the number)
        self.indexed: dict[str, tuple[dict[str, list[Filter]], dict[object, list[Filter]]]] = {}
        self.others: list[Filter] = []

    def add(self, filter_: Filter) -> None:
        table = self._table(filter_)
        if table is None:
            self.others.append(filter_)
        else:
            table[1].setdefault(table[2], []).append(filter_)

    def remove(self, filter_: Filter) -> None:
        table = self._table(filter_)
        if table is None:
            self.others.remove(filter_)
            return
        name, filters, value = table
        filters[value].remove(filter_)
        if not filters[value]:
            del filters[value]
        if not any(self.indexed[name]):
            del self.indexed[name]

    def _table(self, filter_: Filter) -> tuple[str, dict[Any, list[Filter]], Any] | None:
        """Where ``filter_`` is indexed: its header, the table by text or by number, and
        the value it requires; None if it is not indexed."""
        assert filter_.selector is not None
        equalities = filter_.selector.equalities
        if not equalities:
            return None
        name, value = equalities[0]
        by_text, by_number = self.indexed.setdefault(name, ({}, {}))
        return name, by_text if isinstance(value, str) else by_number, value

    def matching(self, message: Message) -> list[Filter]:
        """The filters whose selector is TRUE for ``message``."""
        found = []
        headers = message.headers
        for name, (by_text, by_number) in self.indexed.items():
            text = headers.get(name)
            if text is None:
                continue
            for filter_ in by_text.get(text, ()):
                if filter_.match(message):  # type: ignore[misc]
                    found.append(filter_)
            if by_number:
                value = number(text)
                if value is not None:
                    for filter_ in by_number.get(value, ()):
                        if filter_.match(message):  # type: ignore[misc]
                            found.append(filter_)
        for filter_ in self.others:
            if filter_.match(message):  # type: ignore[misc]
                found.append(filter_)
        return found
