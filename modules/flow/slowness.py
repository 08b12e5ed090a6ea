"""Slow subscribers: how slow each client is, how loaded egress is, and what to do.

A slow subscriber is a client that consistently fails to take its messages
at the rate they are offered. The server measures, per client, the share of
the last minute in which it had data to write but could not (the client's
TCP window was closed), and the egress buffer load factor over all clients;
``SlowSubscriberPolicy`` turns the two into a verdict, so that the server
can raise an event before a slow subscriber is disconnected, and another
when it is.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum

from wiremq.config.groups import SlowSubscriberSettings
from wiremq.modules.flow.egress_queues import EgressQueues

SPANS = 60  # spans per window: bounds a meter's memory, sets its precision


class _Span:
    """Blocked time between ``start`` and ``end``: ``held`` seconds of it."""

    __slots__ = ("start", "end", "held")

    def __init__(self, start: float, end: float) -> None:
        self.start = start
        self.end = end
        self.held = end - start

    def held_after(self, cutoff: float) -> float:
        """The blocked seconds after ``cutoff`` (spread evenly over a merged span)."""
        if self.start >= cutoff:
            return self.held
        return self.held * (self.end - cutoff) / (self.end - self.start)


class SlownessMeter:
    """The share of the last ``window`` seconds a client was blocked with data pending.

    Call ``blocked()`` when writing becomes impossible while data is
    pending, and ``unblocked()`` when writing is possible again (both are
    idempotent). Blocked intervals are kept as spans in a deque and dropped
    once older than the window. A client that pauses and resumes many times
    a second would make many tiny intervals, so an interval that ends within
    ``window / spans`` of the start of the previous span is merged into it:
    the meter holds at most about ``spans`` spans whatever the rate, and its
    answer is exact except for a merged span straddling the window's start,
    whose blocked time is taken as evenly spread over it.

    The share is over the whole window even for a client connected for less,
    so a new client is not judged on its first seconds.
    """

    __slots__ = ("_clock", "_window", "_merge", "_spans", "_since")

    def __init__(
        self,
        clock: Callable[[], float],
        window: float,
        spans: int = SPANS,
    ) -> None:
        if window <= 0 or spans < 1:
            raise ValueError(f"need window > 0 and spans >= 1, got {window}, {spans}")
        self._clock = clock
        self._window = window
        self._merge = window / spans
        self._spans: deque[_Span] = deque()
        self._since: float | None = None  # start of the open blocked interval

    def blocked(self) -> None:
        """Writing became impossible with data pending."""
        if self._since is None:
            self._since = self._clock()

    def unblocked(self) -> None:
        """Writing is possible again (or nothing is pending any more)."""
        start = self._since
        if start is None:
            return
        self._since = None
        now = self._clock()
        spans = self._spans
        if spans:
            last = spans[-1]
            if start <= last.end or now - last.start <= self._merge:
                last.held += now - start
                last.end = now
                self._drop_before(now - self._window)
                return
        spans.append(_Span(start, now))
        self._drop_before(now - self._window)

    def share(self) -> float:
        """The blocked share of the last window, in [0, 1]."""
        now = self._clock()
        cutoff = now - self._window
        self._drop_before(cutoff)
        held = sum(span.held_after(cutoff) for span in self._spans)
        if self._since is not None:
            held += now - max(self._since, cutoff)
        return min(held / self._window, 1.0)

    def _drop_before(self, cutoff: float) -> None:
        spans = self._spans
        while spans and spans[0].end <= cutoff:
            spans.popleft()


def egress_load_factor(clients: Iterable[EgressQueues], capacity_work: int | None = None) -> float:
    """The egress buffer load factor, in percent (Solace's NAB Buffer Load Factor).

    100 * (work units queued now in every client's five egress queues) /
    ``capacity_work``, where ``capacity_work`` is the server's configured
    egress buffer capacity in work units; when it is None, the capacity is
    the sum of every client's configured max-depths (five per client). The
    factor can exceed 100: min-msg-burst, BLOCK, and the never-discarded G-1
    and C-1 queues all let queues go past max-depth. With no capacity (no
    clients) it is 0.
    """
    queued = 0
    configured = 0
    for client in clients:
        queued += client.queued_work
        configured += client.capacity_work
    capacity = configured if capacity_work is None else capacity_work
    return 100.0 * queued / capacity if capacity > 0 else 0.0


class Verdict(Enum):
    """What the server should do about a client."""

    OK = "ok"
    WARN = "warn"  # raise the event that comes before a disconnection
    DISCONNECT = "disconnect"


@dataclass(frozen=True, slots=True)
class SlowSubscriberPolicy:
    """When a client is slow enough to warn about, and to disconnect.

    A client is WARN at ``warn_share`` of blocked time or more. It is
    DISCONNECT at ``disconnect_share`` or more, but only with
    ``disconnect_enabled`` and while the egress load
    factor is at least ``disconnect_load_factor`` percent: as in Solace, slow
    subscribers are disconnected to relieve egress buffers, not merely for
    being slow. A client that would be disconnected but for those two
    conditions is WARN, so the warning always comes first.
    """

    warn_share: float
    disconnect_share: float
    disconnect_enabled: bool
    disconnect_load_factor: float

    @classmethod
    def of(cls, settings: SlowSubscriberSettings) -> SlowSubscriberPolicy:
        return cls(
            settings.warnshare, settings.disconnectshare, settings.disconnect, settings.loadfactor
        )

    def __post_init__(self) -> None:
        if not 0 <= self.warn_share <= self.disconnect_share <= 1:
            raise ValueError(
                "need 0 <= warn_share <= disconnect_share <= 1, got "
                f"{self.warn_share}, {self.disconnect_share}"
            )
        if self.disconnect_load_factor < 0:
            raise ValueError(f"disconnect_load_factor must be >= 0: {self.disconnect_load_factor}")

    def verdict(self, share: float, load_factor: float) -> Verdict:
        """The verdict for a client blocked ``share`` of the time, at ``load_factor`` %."""
        if (
            share >= self.disconnect_share
            and self.disconnect_enabled
            and load_factor >= self.disconnect_load_factor
        ):
            return Verdict.DISCONNECT
        if share >= self.warn_share:
            return Verdict.WARN
        return Verdict.OK
