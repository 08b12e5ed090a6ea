"""A queue's plain way of dispatching, while every consumer takes everything.

No selector, no exclusive consumer, no message group seen: each waiting
message, in priority order, goes to the next ready consumer, round-robin
(each consumer offered a message moves to the end of the queue's consumers).
Nothing is taken out of the middle of the queue's list, so nothing here reads
or sets a message's ``home``, ``level`` or ``group`` (``queue.py`` sets them
when the queue turns selective). It runs for every message: inlined, and
what left memory is counted once per dispatch.
"""

from __future__ import annotations

from collections import OrderedDict

from wiremq.modules.destinations.levels import Levels
from wiremq.modules.destinations.queue_counts import QueueCounts
from wiremq.modules.destinations.subscription import Subscription
from wiremq.modules.message import Message
from wiremq.modules.runtime import Runtime
from wiremq.stores.records import JMS_DEFAULT_PRIORITY as DEFAULT


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
        for priority in range(main.high, main.low - 1, -1):
            level = levels[priority]
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
