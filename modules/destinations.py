"""Queues and topics: where messages wait and how they reach consumers.

A queue gives each message to exactly one consumer, round-robin over its
consumers; its waiting messages live in the VolQueueStore. A topic gives each
message to every current subscriber and keeps nothing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from wiremq.modules.message import Message
from wiremq.modules.pipeline import P2P, PUBSUB
from wiremq.modules.subscription import Subscription
from wiremq.stores.volqueue import VolQueueStore

QUEUE_PREFIX = "/queue/"
TOPIC_PREFIX = "/topic/"


class Destination(ABC):
    """A named queue or topic with its consumers."""

    domain: str

    def __init__(self, name: str) -> None:
        self.name = name
        self.consumers: list[Subscription] = []

    def subscribe(self, subscription: Subscription) -> None:
        self.consumers.append(subscription)

    @abstractmethod
    def unsubscribe(self, subscription: Subscription) -> None:
        """Remove a consumer; what it had not acknowledged is handled per domain."""

    @abstractmethod
    def distribute(self, message: Message) -> None:
        """Deliver a message that has passed the storage step."""

    @abstractmethod
    def rejected(self, messages: list[Message], requeue: bool) -> None:
        """Messages a consumer NACKed."""


class Queue(Destination):
    domain = P2P

    def __init__(self, name: str, store: VolQueueStore[Message]) -> None:
        super().__init__(name)
        self.store = store
        self._next = 0  # round-robin position among consumers

    def distribute(self, message: Message) -> None:
        self.dispatch()

    def dispatch(self) -> None:
        """Hand waiting messages to consumers, one each in turn."""
        consumers = self.consumers
        count = len(consumers)
        if not count:
            return
        pop = self.store.pop
        name = self.name
        turn = self._next
        message = pop(name)
        while message is not None:
            consumers[turn % count].deliver(message)
            turn += 1
            message = pop(name)
        self._next = turn % count

    def subscribe(self, subscription: Subscription) -> None:
        super().subscribe(subscription)
        self.dispatch()

    def unsubscribe(self, subscription: Subscription) -> None:
        self.consumers.remove(subscription)
        self.requeue(subscription.take_unacked())

    def rejected(self, messages: list[Message], requeue: bool) -> None:
        if requeue:
            self.requeue(messages)

    def requeue(self, messages: list[Message]) -> None:
        """Put messages back at the front, flagged as redelivered, and deliver them again."""
        if not messages:
            return
        for message in messages:
            message.mark_redelivered()
        self.store.push_front(self.name, messages)
        self.dispatch()


class Topic(Destination):
    domain = PUBSUB

    def distribute(self, message: Message) -> None:
        for subscription in self.consumers:
            subscription.deliver(message)

    def unsubscribe(self, subscription: Subscription) -> None:
        self.consumers.remove(subscription)
        subscription.take_unacked()  # a non-durable subscriber's backlog goes with it

    def rejected(self, messages: list[Message], requeue: bool) -> None:
        """A topic keeps nothing to deliver again: rejected topic messages are dropped."""
