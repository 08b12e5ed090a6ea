"""A queue's plain way of dispatching, while every consumer takes everything.

No selector, no exclusive consumer, no message group seen: each waiting
message, in priority order, goes to the next ready consumer, round-robin
(each consumer offered a message moves to the end of the queue's consumers).
Nothing is taken out of the middle of the queue's list, so nothing here reads
or sets a message's ``home``, ``level`` or ``group`` (``queue.py`` sets them
when the queue turns selective). It runs for every message: inlined, and
what left memory is counted once per dispatch.

A lone consumer has no turns to take: it gets each level's run at once, as a
topic subscriber does (``Subscription.deliver_run``: its window and egress
room checked across the run, the frames queued per egress queue together),
once the level holds ``RUN_FROM`` messages.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from operator import attrgetter

from wiremq.modules.destinations.levels import Levels
from wiremq.modules.destinations.queue_counts import QueueCounts
from wiremq.modules.destinations.subscription import RUN_FROM, Subscription
from wiremq.modules.message import Message
from wiremq.modules.runtime import Runtime
from wiremq.stores.records import JMS_DEFAULT_PRIORITY as DEFAULT

EXPIRES = attrgetter("expires")


class PlainDispatch:
    """Round-robin from one queue's list to its consumers (see the module docstring)."""

    __slots__ = ("main", "consumers", "counts", "runtime")

    def __init__(
        self,
        main: Levels,
        consumers: OrderedDict[Subscription, None],
        counts: QueueCounts,
        runtime: Runtime,
    ) -> None:
        self.main = main
        self.consumers = consumers
        self.counts = counts
        self.runtime = runtime

    def _run_to(
        self, consumer: Subscription, level: deque[Message], expired: list[Message]
    ) -> bool:
        """Hand a lone consumer the run of ``level`` it can take (``deliver_run``) and take
        it off the level, with the expired messages before where it stopped (added to
        ``expired``); returns whether it stopped at one it is not ready for."""
        waiting = list(level)
        run: list[Message] | list[Message | None] = waiting
        if any(map(EXPIRES, waiting)):  # rare: an expired message leaves its place empty
            now_ms = self.runtime.now_ms()
            run = [None if 0 < m.expires <= now_ms else m for m in waiting]
        passed = consumer.deliver_run(run)
        stopped = passed < len(run)
        if stopped:
            consumer.waiting = True
            for _ in range(passed):
                level.popleft()
        else:
            level.clear()
        taken = waiting[:passed]
        if run is not waiting:
            expired += (m for m, place in zip(taken, run, strict=False) if place is None)
            taken = [m for m in run[:passed] if m is not None]
        self.counts.run_left_memory(taken)
        return stopped

    def dispatch(self) -> list[Message]:
        """Hand waiting messages to ready consumers, one each in turn, in priority order,
        until none is ready; returns the expired messages met (out of memory, for the
        queue to handle)."""
        consumers = self.consumers
        count = len(consumers)
        rotate = consumers.move_to_end
        main = self.main
        levels = main.levels
        now_ms = 0
        taken = taken_bytes = live_buffer_out = 0  # what left memory, for the counts
        expired: list[Message] = []
        blocked = False
        lone = next(iter(consumers)) if count == 1 else None
        for priority in range(main.high, main.low - 1, -1):
            level = levels[priority]
            if lone is not None and len(level) >= RUN_FROM:
                if self._run_to(lone, level, expired):
                    blocked = True
                    break
                continue
            while level:
                message = level[0]
                if message.expires and message.expires <= (
                    now_ms := now_ms or self.runtime.now_ms()
                ):
                    level.popleft()
                    expired.append(message)
                    continue
                for _ in range(count):
                    consumer = next(iter(consumers))
                    rotate(consumer)  # offered a message: its turn is over
                    if consumer.ready_for(message):
                        break
                    consumer.waiting = True
                else:
                    blocked = True  # no consumer is ready: the message waits
                    break
                level.popleft()
                if message.store_seq:
                    live_buffer_out += message.size
                else:
                    taken += 1
                    taken_bytes += message.size
                consumer.deliver(message)
            if blocked:
                break
        counts = self.counts
        if live_buffer_out:
            counts.live_buffer_add(-live_buffer_out)
        for message in expired:
            counts.left_memory(message)
        counts.unreported_messages -= taken
        counts.unreported_bytes -= taken_bytes
        while main.high > DEFAULT and not levels[main.high]:
            main.high -= 1
        while main.low < DEFAULT and not levels[main.low]:
            main.low += 1
        return expired
