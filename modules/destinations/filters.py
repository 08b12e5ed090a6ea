"""A queue's consumers grouped by selector, and which groups a message is for.

Consumers of one queue with the same selector text share one ``Filter``:
the selector is evaluated once per message for all of them, and the
messages it matches that wait are listed in the filter's own ``Levels``
(in delivery order), so that a consumer finds its next message at the head
of that list whatever waits before it that it does not select: a queue
never scans its backlog for a consumer. Consumers without a selector share
the queue's ``everyone`` filter, whose list is the queue's home list itself.

``Matcher`` says which filters a message matches, in one function it
generates from its selectors' compiled expressions whenever a filter comes or
goes: a message costs one call, not one per selector. A selector whose top
level requires ``name = literal`` is indexed by that header's value: while a
header indexes at most ``INLINE`` selectors they are tested inline one after
the other (each tests its own equality first), beyond that the function looks
the header's value up, so that a message is tested only against the
selectors that can match it: a hundred consumers that each select one
``shard`` cost one dictionary look-up per message, not a hundred evaluations.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from wiremq.modules.destinations.levels import Levels
from wiremq.modules.selector import Selector
from wiremq.modules.selector.compiler import define

if TYPE_CHECKING:
    from wiremq.modules.message import Message

Consumer = TypeVar("Consumer")  # a queue's subscription (a filter only lists them)
INLINE = 8  # a header indexing up to this many selectors has them tested inline


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
        """The function of a message that lists the filters it matches: the selectors of
        a header indexing few and the unindexed ones inline, in turn; a look-up of the
        header's value for the others (see the module docstring)."""
        lines = []
        names: dict[str, object] = {}

        def inline(filter_: Filter) -> None:
            selector = filter_.selector
            assert selector is not None
            name = f"_filter{len(names)}"
            names[name] = filter_
            names.update(selector.constants)
            lines.append(f"    if {selector.expression}:\n        found.append({name})")

        for index, (header, (by_text, by_number)) in enumerate(self.indexed.items()):
            filters = [f for table in (by_text, by_number) for fs in table.values() for f in fs]
            if len(filters) <= INLINE:
                for filter_ in filters:
                    inline(filter_)
                continue
            names[f"_by_text{index}"], names[f"_by_number{index}"] = by_text, by_number
            lines.append(
                f"    value = h.get({header!r})\n"
                "    if value is not None:\n"
                f"        for filter_ in _by_text{index}.get(value, ()):\n"
                "            if filter_.match(m):\n"
                "                found.append(filter_)"
            )
            if by_number:
                lines.append(
                    "        value = _number(value)\n"
                    "        if value is not None:\n"
                    f"            for filter_ in _by_number{index}.get(value, ()):\n"
                    "                if filter_.match(m):\n"
                    "                    found.append(filter_)"
                )
        for filter_ in self.others:
            inline(filter_)
        body = "".join(f"{line}\n" for line in lines)
        source = f"def matching(m):\n    h = m.headers\n    found = []\n{body}    return found\n"
        return define(source, "matching", names)  # type: ignore[no-any-return]
