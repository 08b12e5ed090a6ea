"""The console's survey of the destinations: each one's latest rates, and the busiest.

The console shows every destination's rates (published, delivered, acknowledged
per second: differences of the counters the message path keeps anyway) and
charts and exports the destinations holding the most messages. Reading all of
them at once held the event loop for seconds with 100,000 destinations, so
each ``visit`` (the console's sample, a ``/metrics`` scrape, ``/api/state``)
looks at the next ``DestinationManager.sweepslice`` of them (``rotation.py``)
and at the busiest it knows, no more:

- a destination's rates are over the time between the survey's last two
  visits to it: one sample apart while there are no more destinations than a
  slice, a whole pass apart beyond (the busiest: one visit apart);
- the busiest are those holding the most messages (then: that received the
  most) as last seen; those known are looked at again at every visit, so their
  figures are current and one that empties leaves the ranking at once, and one
  that fills up joins it when the pass reaches it.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from wiremq.modules.destinations.destination import Destination
from wiremq.modules.destinations.rotation import Rotation
from wiremq.modules.rates import NO_RATES, RATES, Counters

if TYPE_CHECKING:
    from wiremq.modules.destinations.registry import Destinations

Rank = tuple[int, int]  # (messages held, messages received)


class Survey:
    """See the module docstring."""

    def __init__(self, registry: Destinations) -> None:
        self.registry = registry
        self._pass: Rotation[Destination] = Rotation(registry.queues, registry.topics)
        self._last: dict[str, tuple[float, Counters]] = {}  # each one's counters at its visit
        self._rates: dict[str, dict[str, float | None]] = {}
        self._visited: set[str] = set()  # in the pass under way
        self.ranked: dict[str, Rank] = {}  # the busiest known, busiest first

    def visit(self, now: float, count: int, keep: int) -> None:
        """Look at the next ``count`` destinations and at the busiest known; keep the
        ``keep`` busiest of them."""
        registry = self.registry
        seen = {d.name: d for d in self._pass.next_slice(count)}
        for name in self.ranked:
            found = registry.get(name)
            if found is not None:
                seen[name] = found
        ranks = {name: self._look(now, destination) for name, destination in seen.items()}
        self._visited.update(ranks)
        if self._pass.done:  # forget those the pass did not find (removed from the registry)
            for name in self._last.keys() - self._visited:
                del self._last[name]
                self._rates.pop(name, None)
            self._visited = set()
        top = heapq.nlargest(keep, ranks.items(), key=lambda item: item[1])
        self.ranked = dict(top)

    @property
    def passed(self) -> bool:
        """Whether the last visit ended a pass over every destination."""
        return self._pass.done

    def busiest(self, count: int) -> list[Destination]:
        """The ``count`` busiest as of the last visit, busiest first."""
        registry = self.registry
        found = (registry.get(name) for name in list(self.ranked)[:count])
        return [d for d in found if d is not None]

    def rates(self, name: str) -> dict[str, float | None]:
        """The destination ``name``'s latest rates (None: not visited twice yet)."""
        return self._rates.get(name, NO_RATES)

    def _look(self, now: float, destination: Destination) -> Rank:
        name = destination.name
        counters = (destination.received, destination.delivered, destination.fates.acknowledged)
        before = self._last.get(name)
        self._last[name] = (now, counters)
        if before is None or now <= before[0]:
            self._rates.setdefault(name, NO_RATES)
        else:
            elapsed = now - before[0]
            self._rates[name] = {
                rate: None if value < old else round((value - old) / elapsed, 3)
                for rate, value, old in zip(RATES, counters, before[1], strict=True)
            }
        return (destination.depth(), counters[0])
