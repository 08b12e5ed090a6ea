"""Messages every destination received and delivered since the server started, kept as
they move: the server's totals, not a sum over every destination (with 100,000 of them
the sum held the event loop for a quarter of a second).

``received`` is counted by the distributing module, once per batch (every message
comes to its destination that way). Deliveries are counted by each consumer
(``Subscription.delivered``, on the message path anyway): the total is what the
consumers that have gone delivered plus what the current ones have, a sum over
the consumers, which clients hold, not over the destinations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wiremq.modules.destinations.subscription import Subscription


class Traffic:
    """See the module docstring."""

    __slots__ = ("received", "delivered_gone", "consumers")

    def __init__(self) -> None:
        self.received = 0
        self.delivered_gone = 0  # by consumers that have gone
        self.consumers: dict[Subscription, None] = {}  # every destination's current ones

    @property
    def delivered(self) -> int:
        return self.delivered_gone + sum(s.delivered for s in self.consumers)

    def joined(self, consumer: Subscription) -> None:
        self.consumers[consumer] = None

    def left(self, consumer: Subscription) -> None:
        del self.consumers[consumer]
        self.delivered_gone += consumer.delivered
