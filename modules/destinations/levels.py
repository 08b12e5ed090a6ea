"""Waiting messages in delivery order: higher priority first, in arrival order within one.

A queue keeps every message waiting in memory in one ``Levels`` (its *home*:
``message.home`` is that object while the message waits there) and, when
consumers select, each selector's matches in another ``Levels`` that is no
home. A message taken through one structure is not searched for in the
others: its entries there go stale (``home`` changed) and are dropped when
they reach the head, or by ``compact`` once stale ones could outnumber the
live ones. So taking a message costs O(1) wherever it is listed.

There are ten levels (JMS priorities 0-9, ``message.level``), each a deque;
``high`` and ``low`` bound the levels that may hold entries and always
include the default priority, so a queue whose messages all have the default
priority looks at one deque. While a queue dispatches the plain way nothing
is taken out of the middle, so its list ``checks`` no ``home``: the plain
path neither sets nor reads it (``Queue._set_selective`` sets it when that
changes).

A level gets its deque when a message first comes to it (the default level
at once): an empty deque takes about 700 bytes, and most queues only ever
see the default priority (100,000 queues held 7.8 KB each in ten deques).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

from wiremq.stores.records import JMS_DEFAULT_PRIORITY

if TYPE_CHECKING:
    from wiremq.modules.message import Message

PRIORITIES = 10
GROWTH = 1024  # entries appended between two compactions at least (amortizes them)
# A level no message came to yet: empty, and a tuple, so that writing to it fails loudly.
UNUSED = cast("deque[Message]", ())


def _arrival(message: Message) -> int:
    return message.arrival


def before(a: Message, b: Message) -> bool:
    """Whether ``a`` is delivered before ``b``: higher priority, else earlier arrival."""
    return a.level > b.level or (a.level == b.level and a.arrival < b.arrival)


def delivery_order(message: Message) -> tuple[int, int]:
    return -message.level, message.arrival


class Levels:
    """Messages by priority level, each level in arrival order (see the module docstring)."""

    __slots__ = ("levels", "high", "low", "home", "checks", "appended", "compact_at")

    def __init__(self, home: bool) -> None:
        self.levels: list[deque[Message]] = [UNUSED] * PRIORITIES
        self.levels[JMS_DEFAULT_PRIORITY] = deque()
        self.high = self.low = JMS_DEFAULT_PRIORITY
        self.home = home  # entries are live while their message's home is this object
        self.checks = True  # False: every entry is live (a plain queue's list)
        self.appended = 0
        self.compact_at = GROWTH

    def live(self, message: Message) -> bool:
        if not self.checks:
            return True
        home = message.home
        return home is self if self.home else home is not None

    def append(self, message: Message) -> None:
        """Add a message that arrived after every one listed at its priority."""
        priority = message.level
        level = self.levels[priority]
        if level is UNUSED:
            level = self.levels[priority] = deque()
        level.append(message)
        self._widen(priority)

    def insert(self, message: Message) -> None:
        """Add a message at its place by arrival (one coming back, or read out of order)."""
        priority = message.level
        level = self.levels[priority]
        if level is UNUSED:
            level = self.levels[priority] = deque()
        if not level or message.arrival > level[-1].arrival:
            level.append(message)
        elif message.arrival < level[0].arrival:
            level.appendleft(message)
        else:
            level.insert(bisect_left(level, message.arrival, key=_arrival), message)
        self._widen(priority)

    def _widen(self, priority: int) -> None:
        if priority > self.high:
            self.high = priority
        elif priority < self.low:
            self.low = priority
        self.appended += 1
        if self.appended >= self.compact_at:
            self.compact()

    def head(self) -> Message | None:
        """The first live message, dropping the stale entries before it."""
        levels = self.levels
        home = self.home
        checks = self.checks
        for priority in range(self.high, self.low - 1, -1):
            level = levels[priority]
            while level:
                message = level[0]
                if not checks or ((message.home is self) if home else (message.home is not None)):
                    return message
                level.popleft()
        self.high = self.low = JMS_DEFAULT_PRIORITY
        return None

    def best(self) -> int:
        """The priority of the first live message (-1: none)."""
        head = self.head()
        if head is None:
            return -1
        return next(p for p in range(self.high, self.low - 1, -1) if self.levels[p])

    def pop(self, message: Message) -> None:
        """Remove ``message``, the head of its level (as ``head`` returned it)."""
        self.levels[message.level].popleft()

    def __iter__(self) -> Iterator[Message]:
        """The live messages in delivery order, each once."""
        seen: set[int] = set()
        for priority in range(self.high, self.low - 1, -1):
            for message in self.levels[priority]:
                if self.live(message) and id(message) not in seen:
                    seen.add(id(message))
                    yield message

    def __bool__(self) -> bool:
        return self.head() is not None

    def compact(self) -> int:
        """Drop every stale entry (and second entries of one message); returns how many
        live entries are left."""
        kept = 0
        for level in self.levels:
            if level:
                live = [m for m in dict.fromkeys(level) if self.live(m)]
                _replace(level, live)
                kept += len(live)
        self.compact_at = self.appended + max(GROWTH, 2 * kept)
        return kept

    def discard(self, messages: list[Message]) -> None:
        """Remove these messages wherever they are listed."""
        gone = {id(m) for m in messages}
        for level in self.levels:
            if any(id(m) in gone for m in level):
                _replace(level, [m for m in level if id(m) not in gone])

    def clear(self) -> list[Message]:
        """Remove and return every live message, in delivery order."""
        messages = list(self)
        for level in self.levels:
            if level:
                level.clear()
        self.high = self.low = JMS_DEFAULT_PRIORITY
        return messages


def _replace(level: deque[Message], messages: list[Message]) -> None:
    """A level's messages replaced in place: a plain queue appends to its default level
    through a reference of its own (``Queue._plain_level``)."""
    level.clear()
    level.extend(messages)
