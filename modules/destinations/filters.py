"""A queue's consumers grouped by selector, and which groups a message is for.

Consumers of one queue with the same selector text share one ``Filter``:
the selector is evaluated once per message for all of them, and the
messages it matches that wait are listed in the filter's own ``Levels``
(in delivery order), so that a consumer finds its next message at the head
of that list whatever waits before it that it does not select: a queue
never scans its backlog for a consumer. Consumers without a selector share
the queue's ``everyone`` filter, whose list is the queue's home list itself.

``Matcher`` says which filters a message matches. While a queue has at most
``INLINE`` selectors, in one function it generates from their compiled
expressions whenever a filter comes or goes: a message costs one call, not
one per selector. With more, a selector whose top level requires
``name = literal`` is indexed by that header's value, so that a message is
tested only against the selectors that can match it: a hundred consumers
that each select one ``shard`` cost one dictionary look-up per message, not
a hundred evaluations (and a subscription compiles nothing more).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from wiremq.modules.destinations.levels import Levels
from wiremq.modules.selector import Selector
from wiremq.modules.selector.compiler import define
from wiremq.modules.selector.values import number

if TYPE_CHECKING:
    from wiremq.modules.message import Message

Consumer = TypeVar("Consumer")  # a queue's subscription (a filter only lists them)
INLINE = 8  # up to this many selectors on a queue are tested inline, in one function


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


def _nothing(message: Message) -> list[Filter]:
    """A Matcher's function while it has no selector: nothing matches."""
    return []


class Matcher:
    """Which selective filters of a queue a message matches (see the module docstring)."""

    __slots__ = ("indexed", "others", "matching")

    def __init__(self) -> None:
        # header name -> (filters by the text it must equal, filters by the number)
        self.indexed: dict[str, tuple[dict[str, list[Filter]], dict[object, list[Filter]]]] = {}
        self.others: list[Filter] = []
        # message -> the filters whose selector is TRUE for it
        self.matching: Callable[[Message], list[Filter]] = self._compiled()

    def add(self, filter_: Filter) -> None:
        table = self._table(filter_)
        if table is None:
            self.others.append(filter_)
        else:
            table[1].setdefault(table[2], []).append(filter_)
        self.matching = self._compiled()

    def remove(self, filter_: Filter) -> None:
        table = self._table(filter_)
        if table is None:
            self.others.remove(filter_)
        else:
            name, filters, value = table
            filters[value].remove(filter_)
            if not filters[value]:
                del filters[value]
            if not any(self.indexed[name]):
                del self.indexed[name]
        self.matching = self._compiled()

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

    def _compiled(self) -> Callable[[Message], list[Filter]]:
        """The function of a message that lists the filters it matches: every selector
        inline, in turn, while there are at most ``INLINE``; else ``_indexed``."""
        filters = [
            *(
                f
                for tables in self.indexed.values()
                for t in tables
                for fs in t.values()
                for f in fs
            ),
            *self.others,
        ]
        if not filters:  # every queue has a Matcher: most never see a selector
            return _nothing
        if len(filters) > INLINE:
            return self._indexed
        lines = []
        names: dict[str, object] = {}
        for n, filter_ in enumerate(filters):
            selector = filter_.selector
            assert selector is not None
            names[f"_filter{n}"] = filter_
            names.update(selector.constants)
            lines.append(f"    if {selector.expression}:\n        found.append(_filter{n})\n")
        body = "".join(lines)
        source = f"def matching(m):\n    h = m.headers\n    found = []\n{body}    return found\n"
        return define(source, "matching", names)  # type: ignore[no-any-return]

    def _indexed(self, message: Message) -> list[Filter]:
        """The filters whose selector is TRUE for ``message``, by the index."""
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
