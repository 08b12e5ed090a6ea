"""Messages that come back to a queue unacknowledged: counted, delayed or dead-lettered.

A message that comes back after it was written to a consumer (a NACK, or its
consumer went away holding it) counts a redelivery (``x-delivery-count``);
past ``maxredeliveries`` it goes to the queue's dead message queue
(``deadletter.py``), otherwise back to its place, after ``redeliverydelay``
(growing by ``redeliverybackoff``, at most ``maxredeliverydelay``) if one is
set. A message that was never written goes back at once, not counted.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from wiremq.config.groups import DestinationPolicy
from wiremq.modules.destinations.deadletter import REDELIVERY_LIMIT
from wiremq.modules.message import Message
from wiremq.modules.runtime import Runtime

if TYPE_CHECKING:
    from wiremq.modules.destinations.deadletter import DeadLetters


class Redelivery:
    """One queue's messages coming back (see the module docstring)."""

    __slots__ = ("name", "runtime", "dead_letters", "back", "delayed")

    def __init__(
        self,
        name: str,
        runtime: Runtime,
        dead_letters: DeadLetters,
        back: Callable[[list[Message]], None],
    ) -> None:
        self.name = name
        self.runtime = runtime
        self.dead_letters = dead_letters
        self.back = back  # messages whose delay is over, for the queue to put back
        self.delayed = 0  # messages waiting out a redelivery delay

    def requeue(
        self, messages: list[Message], policy: DestinationPolicy, unwritten: Collection[Message]
    ) -> list[Message]:
        """Count the redeliveries of ``messages`` (those not ``unwritten``), dead-letter
        those past the limit and delay those with a delay to wait; returns the ones that
        go back to their place now."""
        limit = policy.maxredeliveries
        now: list[Message] = []
        dead: list[Message] = []
        later: dict[float, list[Message]] = {}
        for message in messages:
            if message not in unwritten:
                message.mark_redelivered()
                if 0 <= limit < message.redeliveries:
                    dead.append(message)
                    continue
                delay = _delay(policy, message.redeliveries)
                if delay:
                    later.setdefault(delay, []).append(message)
                    continue
            now.append(message)
        if dead:
            self.dead_letter(dead, REDELIVERY_LIMIT)
        for delay, waiting in later.items():
            self.delayed += len(waiting)
            self.runtime.call_later(delay, lambda w=waiting: self._delay_over(w))
        return now

    def _delay_over(self, messages: list[Message]) -> None:
        self.delayed -= len(messages)
        self.back(messages)

    def dead_letter(self, messages: list[Message], reason: str) -> None:
        """Messages that will not be delivered from this queue again go to its dead message
        queue."""
        self.dead_letters.move(self.name, messages, reason)


def _delay(policy: DestinationPolicy, redeliveries: int) -> float:
    """Seconds the ``redeliveries``-th redelivery waits: redeliverydelay, times
    redeliverybackoff for each one before it, at most maxredeliverydelay."""
    if not policy.redeliverydelay:
        return 0.0
    delay = policy.redeliverydelay * policy.redeliverybackoff ** (redeliveries - 1)
    if policy.maxredeliverydelay >= 0:
        delay = min(delay, policy.maxredeliverydelay)
    return delay / 1000
