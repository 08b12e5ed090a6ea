"""Message groups of one queue: the messages with one ``JMSXGroupID`` go to one consumer.

The first message of a group that a consumer takes makes it the group's
owner; the group's later messages wait for that consumer (in its
``reserved`` list, in delivery order) while it lives, so they are delivered
in order to one consumer. A message with ``JMSXGroupSeq:-1`` closes its
group (as in ActiveMQ): the next message of that id starts it again. When
the owner goes away its groups are released and their waiting messages go
to whichever consumer takes them next, which becomes the new owner; the
first message of a group a consumer gets carries
``JMSXGroupFirstForConsumer:true``. A group message its owner does not
select waits (``blocked``) until the owner goes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wiremq.modules.destinations.levels import Levels, delivery_order

if TYPE_CHECKING:
    from wiremq.modules.destinations.subscription import Subscription
    from wiremq.modules.message import Message

GROUP_SEQUENCE = "JMSXGroupSeq"
CLOSES_GROUP = "-1"


class Groups:
    """Who owns each group of a queue, and the messages that wait for the owners."""

    __slots__ = ("owners", "owned", "reserved", "blocked")

    def __init__(self) -> None:
        self.owners: dict[str, Subscription] = {}
        self.owned: dict[Subscription, set[str]] = {}
        self.reserved: dict[Subscription, Levels] = {}  # messages waiting for their owner
        self.blocked: dict[str, Levels] = {}  # messages their group's owner does not select

    def __bool__(self) -> bool:
        return bool(self.owners or self.blocked)

    def owner(self, group: str) -> Subscription | None:
        return self.owners.get(group)

    def taken(self, group: str, consumer: Subscription) -> bool:
        """``consumer`` takes a message of ``group``; True if that makes it the owner."""
        if group in self.owners:
            return False
        self.owners[group] = consumer
        self.owned.setdefault(consumer, set()).add(group)
        return True

    def close(self, group: str) -> list[Message]:
        """The group's last message was taken: it has no owner any more; returns the
        messages that waited because its owner did not select them."""
        owner = self.owners.pop(group, None)
        if owner is not None:
            self.owned[owner].discard(group)
        blocked = self.blocked.pop(group, None)
        return [] if blocked is None else blocked.clear()

    def reserve(self, owner: Subscription, message: Message, selected: bool) -> None:
        """Keep ``message`` for ``owner``, or, if the owner does not select it, until the
        owner goes (its home becomes that list)."""
        if selected:
            levels = self.reserved.get(owner)
            if levels is None:
                levels = self.reserved[owner] = Levels(home=True)
        else:
            assert message.group is not None
            levels = self.blocked.get(message.group)  # type: ignore[assignment]
            if levels is None:
                levels = self.blocked[message.group] = Levels(home=True)
        message.home = levels
        levels.insert(message)

    def release(self, consumer: Subscription) -> list[Message]:
        """The consumer went: its groups have no owner; returns the messages that waited for
        it or were blocked by it, in delivery order."""
        released: list[Message] = []
        levels = self.reserved.pop(consumer, None)
        if levels is not None:
            released += levels.clear()
        for group in self.owned.pop(consumer, ()):
            del self.owners[group]
            blocked = self.blocked.pop(group, None)
            if blocked is not None:
                released += blocked.clear()
        released.sort(key=delivery_order)
        return released

    def waiting(self) -> list[Message]:
        """Every message waiting here."""
        return [m for levels in (*self.reserved.values(), *self.blocked.values()) for m in levels]

    def compact(self) -> None:
        for table in (self.reserved, self.blocked):
            for key, levels in list(table.items()):
                if not levels.compact():
                    del table[key]  # type: ignore[arg-type]
