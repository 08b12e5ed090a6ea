"""Wildcard subscriptions: one SUBSCRIBE to every queue or topic whose name matches.

Names are dot-separated levels after ``/queue/`` or ``/topic/``; in a pattern
``*`` stands for exactly one level and ``>`` (last) for one or more:
``/topic/prices.*`` matches ``/topic/prices.eu`` but not
``/topic/prices.eu.de``, which ``/topic/prices.>`` matches. A wildcard
subscription is one ``Subscription`` (one window, one ``ack`` numbering, one
set of unacknowledged messages) whose destination is a ``Wildcard``; each
matching destination, those there now and those made later, holds a
``Member`` of it as a consumer, so a consumer of ``/queue/jobs.*`` competes
for the messages of every matching queue. Every MESSAGE carries the
destination the message was sent to.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from wiremq.modules.destinations.destination import NOTHING, Destination
from wiremq.modules.domains import domain_of
from wiremq.modules.message import Message
from wiremq.modules.security.permissions import READ, Access
from wiremq.stores.api import StoreTransaction
from wiremq.stores.model import grouped

if TYPE_CHECKING:
    from wiremq.modules.destinations.filters import Filter
    from wiremq.modules.destinations.subscription import Subscription


def is_wildcard(name: str) -> bool:
    return any(level in ("*", ">") for level in name.split("/", 2)[-1].split("."))


def matches(pattern: str, name: str) -> bool:
    """Whether destination ``name`` matches ``pattern`` (same kind, ``*`` one level,
    ``>`` one or more)."""
    if domain_of(pattern) != domain_of(name) or name.count("/") != pattern.count("/"):
        return False
    wanted = pattern.split("/", 2)[-1].split(".")
    levels = name.split("/", 2)[-1].split(".")
    for index, level in enumerate(wanted):
        if level == ">":
            return len(levels) > index
        if index >= len(levels) or (level != "*" and level != levels[index]):
            return False
    return len(levels) == len(wanted)


class Member:
    """One destination's view of a wildcard subscription: the state that is per
    destination (a topic's cursor and policy, a queue's filter) is its own; everything
    else is the subscription's."""

    __slots__ = ("parent", "destination", "cursor", "policy", "filter")

    def __init__(self, parent: Subscription, destination: Destination) -> None:
        self.parent = parent
        self.destination = destination
        self.cursor = 0
        self.policy = parent.policy
        self.filter: Filter[Subscription] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.parent, name)

    @property
    def waiting(self) -> bool:
        return self.parent.waiting

    @waiting.setter
    def waiting(self, value: bool) -> None:
        self.parent.waiting = value

    def take_unacked(self) -> list[Message]:
        """What the subscription holds unacknowledged from this destination."""
        return self.parent.take_unacked_of(self.destination.name)


class Wildcard:
    """The destination of a wildcard subscription: what a session asks of a
    subscription's destination, done by each matching destination for its messages.
    ``access``: what the subscriber may read (None: everything)."""

    def __init__(self, pattern: str, services: Any, access: Access | None) -> None:
        self.name = pattern
        self.domain = domain_of(pattern)
        self.services = services
        self.access = access
        self.subscription: Subscription  # set once the subscription is made
        self.members: dict[str, Member] = {}
        self.forget: Callable[[Wildcard], None] = lambda wildcard: None  # leave the registry

    def attach(self, destination: Destination) -> None:
        """A matching destination (existing, or just made): the subscription joins it if
        its client may read it (with a users file, the ``read`` permission)."""
        name = destination.name
        access = self.access
        if name not in self.members and (access is None or access.allows(READ, name)):
            member = self.members[name] = Member(self.subscription, destination)
            destination.subscribe(member)  # type: ignore[arg-type]

    def review(self) -> list[str]:
        """The client's permissions changed: the subscription leaves the destinations it
        may no longer read (their deliveries not yet written taken back, what it had not
        acknowledged of them back in their queues); their names are returned."""
        access = self.access
        if access is None:
            return []
        lost = [name for name in self.members if not access.allows(READ, name)]
        for name in lost:
            member = self.members.pop(name)
            member.destination.unsubscribe(member, self.subscription.leave(name))  # type: ignore[arg-type]
        return lost

    def consumer_ready(self) -> None:
        for member in list(self.members.values()):
            member.destination.consumer_ready()

    def unsubscribe(self, subscription: Subscription, unwritten: list[Message]) -> None:
        self.forget(self)
        by_destination = grouped((m.destination, m) for m in unwritten)
        for name, member in self.members.items():
            member.destination.unsubscribe(member, by_destination.get(name, []))  # type: ignore[arg-type]
        self.members.clear()

    def count(self, fate: str, messages: Sequence[Message], undone: bool = False) -> None:
        """Each matching destination counts its own messages' fate (``Destination.count``)."""
        for name, batch in grouped((m.destination, m) for m in messages).items():
            member = self.members.get(name)
            if member is not None:
                member.destination.count(fate, batch, undone)

    def acknowledged(self, subscription: Subscription, messages: list[Message]) -> StoreTransaction:
        return self._each(messages, lambda d, m, ms: d.acknowledged(m, ms))

    def rejected(
        self, subscription: Subscription, messages: list[Message], requeue: bool
    ) -> StoreTransaction:
        return self._each(messages, lambda d, m, ms: d.rejected(m, ms, requeue))

    def _each(self, messages: list[Message], action: Any) -> StoreTransaction:
        changes = []
        for name, batch in grouped((m.destination, m) for m in messages).items():
            member = self.members.get(name)
            if member is not None:
                changes.append(action(member.destination, member, batch))
        changes = [c for c in changes if not c.empty]
        return StoreTransaction.merged(changes) if changes else NOTHING
