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
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(slots=True)
class Fates:
    """One destination's counts (see the module docstring)."""

    acknowledged: int = 0
    redelivered: int = 0
    expired: int = 0
    dead_lettered: int = 0
    discarded: int = 0
    moved: int = 0
    restored: int = 0  # held in its store when the server started

    def json(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def add(self, other: Fates) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


FATES = tuple(f.name for f in fields(Fates))


class FateCounts:
    """Every destination's ``Fates`` by name, and those of destinations removed since."""

    def __init__(self) -> None:
        self.by_name: dict[str, Fates] = {}
        self.retired = Fates()

    def of(self, name: str) -> Fates:
        """The counts of the destination ``name`` (made with it)."""
        found = self.by_name.get(name)
        if found is None:
            found = self.by_name[name] = Fates()
        return found

    def count(self, name: str, fate: str, messages: int) -> None:
        """``messages`` of the destination ``name`` met ``fate``; counted in the totals if
        that destination is gone."""
        found = self.by_name.get(name, self.retired)
        setattr(found, fate, getattr(found, fate) + messages)

    def retire(self, name: str) -> None:
        """The destination ``name`` left the registry: its counts go to the totals."""
        gone = self.by_name.pop(name, None)
        if gone is not None:
            self.retired.add(gone)

    def totals(self) -> dict[str, int]:
        """Every destination's counts added up, those removed included."""
        total = Fates()
        total.add(self.retired)
        for fates in self.by_name.values():
            total.add(fates)
        return total.json()
