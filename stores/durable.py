"""The persistent side of durable topic subscriptions.

A topic message is stored once, in the topic's log, while at least one
durable subscription of that topic exists. Each subscription keeps the
position (sequence number) up to which it has acknowledged; a message every
subscription has passed is garbage.
"""

from __future__ import annotations

from dataclasses import dataclass

from BTrees.OOBTree import OOBTree, OOTreeSet
from persistent import Persistent

from .model import LogSet

SubscriptionKey = tuple[str, str]  # (client_id, subscription name)


@dataclass(frozen=True, slots=True)
class SubscriptionInfo:
    """A durable subscription as the server sees it."""

    client_id: str
    name: str
    topic: str
    selector: str
    acked_seq: int
    acknowledged: frozenset[int] = frozenset()  # positions past acked_seq acknowledged singly


class Subscription(Persistent):
    # Positions past acked_seq acknowledged one by one (a class default for subscriptions
    # stored before there were any).
    acknowledged: frozenset[int] = frozenset()

    def __init__(self, topic: str, selector: str, acked_seq: int) -> None:
        self.topic = topic
        self.selector = selector
        self.acked_seq = acked_seq

    def info(self, key: SubscriptionKey) -> SubscriptionInfo:
        return SubscriptionInfo(
            key[0], key[1], self.topic, self.selector, self.acked_seq, self.acknowledged
        )


class DurableLogSet(LogSet):
    """A ``LogSet`` of topic logs plus the durable subscription registry."""

    def __init__(self) -> None:
        super().__init__()
        self.subscriptions: OOBTree = OOBTree()  # SubscriptionKey -> Subscription
        self.subscribers: OOBTree = OOBTree()  # topic -> OOTreeSet of SubscriptionKey

    def set_subscription(self, key: SubscriptionKey, topic: str, selector: str, acked: int) -> None:
        """Register a subscription at a given position (the write-ahead log's replay; an
        existing one by that key must have been dropped first)."""
        self.subscriptions[key] = Subscription(topic, selector, acked)
        members = self.subscribers.get(topic)
        if members is None:
            members = self.subscribers[topic] = OOTreeSet()
        members.add(key)

    def drop_subscription(self, key: SubscriptionKey) -> None:
        """Forget a subscription, leaving its topic's messages as they are."""
        sub: Subscription = self.subscriptions.pop(key)
        members = self.subscribers[sub.topic]
        members.remove(key)
        if not members:
            del self.subscribers[sub.topic]

    def acknowledge(self, key: SubscriptionKey, upto: int) -> None:
        """Move a subscription's position forward (never back)."""
        sub: Subscription = self.subscriptions[key]
        if upto > sub.acked_seq:
            sub.acked_seq = upto
            if sub.acknowledged:
                sub.acknowledged = frozenset(s for s in sub.acknowledged if s > upto)

    def acknowledge_single(self, key: SubscriptionKey, seq: int) -> None:
        """Keep one position past a subscription's own as acknowledged."""
        sub: Subscription = self.subscriptions[key]
        if seq > sub.acked_seq:
            sub.acknowledged = sub.acknowledged | {seq}

    def collect_upto(self, topic: str, upto: int) -> int:
        """Remove every message of ``topic`` at or below ``upto``; returns how many."""
        log = self.logs.get(topic)
        return 0 if log is None else self.discard(topic, list(log.upto(upto)))
