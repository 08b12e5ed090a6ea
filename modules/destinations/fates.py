"""What became of each destination's messages, counted: the console's counts that add up.

For a queue, every message it received (and every one its store held at the
start, ``restored``) is acknowledged (ACKed, or consumed in auto mode),
expired, dead-lettered (NACKed without requeue, or delivered too often),
discarded (by an operator's purge or delete, or dropped from the dead message
queue itself), moved by an operator, or held now::

    restored + received = acknowledged + expired + dead_lettered + discarded + moved + held

once nothing is on its way (a delivery in auto mode not yet written, an
acknowledgement not yet applied). ``redelivered`` counts the deliveries that came
back (NACKed, or their consumer went away) to be delivered again. A topic's counts
are per delivery: ``acknowledged`` deliveries, those ``discarded`` for one subscriber
(slow, or gone) and the messages no subscriber took.

The counts live here, by destination name, so that the parts that settle a
message's fate (expiry, dead letters, the operator's actions) count it without
holding its destination; a destination holds its own record for the one count on
the message path (``acknowledged``, once per batch). A destination removed from
the registry leaves its counts to the server's totals.

The server's totals are kept as the counts change (each destination's record
adds to them too), not summed over every destination: with 100,000 of them the
sum held the event loop for a quarter of a second.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(slots=True)
class Fates:
    """One destination's counts, or the server's totals (see the module docstring)."""

    acknowledged: int = 0
    redelivered: int = 0
    expired: int = 0
    dead_lettered: int = 0
    discarded: int = 0
    moved: int = 0
    restored: int = 0  # held in its store when the server started
    total: Fates | None = None  # the server's totals, which every count adds to as well

    def json(self) -> dict[str, int]:
        return {fate: getattr(self, fate) for fate in FATES}

    def count(self, fate: str, messages: int) -> None:
        """``messages`` more met ``fate`` (fewer, if negative: a fate taken back)."""
        setattr(self, fate, getattr(self, fate) + messages)
        total = self.total
        if total is not None:
            setattr(total, fate, getattr(total, fate) + messages)


FATES = tuple(f.name for f in fields(Fates) if f.name != "total")


class FateCounts:
    """Every destination's ``Fates`` by name, and the server's totals."""

    def __init__(self) -> None:
        self.by_name: dict[str, Fates] = {}
        self.total = Fates()  # every destination's, those removed since included

    def of(self, name: str) -> Fates:
        """The counts of the destination ``name`` (made with it)."""
        found = self.by_name.get(name)
        if found is None:
            found = self.by_name[name] = Fates(total=self.total)
        return found

    def count(self, name: str, fate: str, messages: int) -> None:
        """``messages`` of the destination ``name`` met ``fate``; counted in the totals only
        if that destination is gone."""
        found = self.by_name.get(name)
        (found or self.total).count(fate, messages)

    def retire(self, name: str) -> None:
        """The destination ``name`` left the registry: its counts stay in the totals."""
        self.by_name.pop(name, None)

    def totals(self) -> dict[str, int]:
        """Every destination's counts added up, those removed included."""
        return self.total.json()
