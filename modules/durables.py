"""A topic's durable subscriptions as the admin console lists them, and their removal.

A durable subscription is (client id, name) with its selector and its stored
position; it is connected while a subscriber holds it. Its backlog is what its
topic's store keeps for it: the stored messages past its position that its
selector selects and that it did not acknowledge one by one. They are counted
on the store's reader worker, in steps, up to ``Admin.countlimit`` messages
examined (beyond: "at least").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from wiremq.modules.destinations.registry import Destinations
from wiremq.modules.journal.recorder import Journal
from wiremq.modules.message import Message
from wiremq.modules.operations import Failed, OperationError, not_found
from wiremq.modules.persistence.store import Persistence
from wiremq.modules.selector import compile_selector
from wiremq.stores.api import Batch
from wiremq.stores.durable import SubscriptionInfo, SubscriptionKey

READ_STEP = 1000  # stored messages examined per read while a backlog is counted
READ_BYTES = 4 << 20


@dataclass(frozen=True, slots=True)
class DurableView:
    """One durable subscription as the console shows it."""

    client_id: str
    name: str
    topic: str
    selector: str
    position: int  # the stored position it acknowledged up to
    backlog: int  # stored messages waiting for it (at least, if ``backlog_more``)
    backlog_more: bool  # the count stopped at Admin.countlimit
    connected: bool
    session: str | None  # its subscriber's session, while connected
    last_seen: int | None  # when its subscriber left (epoch ms; None: not since the start)

    def json(self) -> dict[str, object]:
        return {
            "client_id": self.client_id,
            "name": self.name,
            "durable": f"{self.client_id}/{self.name}",
            "topic": self.topic,
            "selector": self.selector,
            "position": self.position,
            "backlog": self.backlog,
            "backlog_more": self.backlog_more,
            "connected": self.connected,
            "session": self.session,
            "last_seen": self.last_seen,
        }


class DurableSubscriptions:
    """The console's view and removal of durable subscriptions (see the module docstring)."""

    def __init__(
        self,
        persistence: Persistence | None,
        destinations: Destinations,
        journal: Journal,
        count_limit: Callable[[], int],
    ) -> None:
        self.persistence = persistence
        self.destinations = destinations
        self.journal = journal
        self.count_limit = count_limit

    def _persistence(self) -> Persistence:
        if self.persistence is None:
            raise OperationError(409, "no persistent store: there are no durable subscriptions")
        return self.persistence

    def list(self, topic: str, done: Callable[[list[DurableView]], None], failed: Failed) -> None:
        """The durable subscriptions of ``topic``, each with its backlog counted."""
        persistence = self._persistence()
        infos = sorted(
            (i for i in persistence.store.subscriptions() if i.topic == topic),
            key=lambda i: (i.client_id, i.name),
        )
        views: list[DurableView] = []

        def next_one() -> None:
            if len(views) == len(infos):
                done(views)
                return
            info = infos[len(views)]
            self._count(persistence, info, lambda count, more: counted(info, count, more), failed)

        def counted(info: SubscriptionInfo, count: int, more: bool) -> None:
            key = (info.client_id, info.name)
            session = self._session(topic, key)
            views.append(
                DurableView(
                    info.client_id,
                    info.name,
                    info.topic,
                    info.selector,
                    info.acked_seq,
                    count,
                    more,
                    key in persistence.active,
                    session,
                    persistence.last_seen.get(key),
                )
            )
            next_one()

        next_one()

    def _session(self, topic: str, key: SubscriptionKey) -> str | None:
        """The session of the subscriber that holds ``key`` on ``topic`` now, if any."""
        destination = self.destinations.get(topic)
        for subscription in destination.consumers if destination is not None else ():
            if subscription.durable_key == key:
                return subscription.session_id
        return None

    def _count(
        self,
        persistence: Persistence,
        info: SubscriptionInfo,
        done: Callable[[int, bool], None],
        failed: Failed,
    ) -> None:
        """Count the stored messages waiting for a subscription, on the reader worker (its
        selector tested there; what it acknowledged one by one taken off here)."""
        selects = compile_selector(info.selector).match if info.selector else None
        match = None if selects is None else lambda m: selects(Message.from_stored(m, 0))
        acknowledged = info.acknowledged
        limit = self.count_limit()
        counted = [0, 0]  # waiting, examined at most

        def step(after: int) -> None:
            persistence.read(
                info.topic, after, READ_STEP, READ_BYTES, read, failed, match, READ_STEP
            )

        def read(batch: Batch) -> None:
            counted[0] += sum(1 for seq, _ in batch.messages if seq not in acknowledged)
            counted[1] += READ_STEP
            if batch.at_end or counted[1] >= limit:
                done(counted[0], not batch.at_end)
            else:
                step(batch.last_seq)

        step(info.acked_seq)

    def remove(
        self, topic: str, client_id: str, name: str, done: Callable[[], None], failed: Failed
    ) -> None:
        """Remove a durable subscription of ``topic`` and what its store keeps only for it;
        one with a subscriber now is refused (409: disconnect it first)."""
        persistence = self._persistence()
        key: SubscriptionKey = (client_id, name)
        if persistence.durables.get(key) != topic:
            raise not_found(f"no durable subscription {client_id}/{name} of {topic}")
        if key in persistence.active:
            raise OperationError(
                409, f"durable subscription {client_id}/{name} is connected: disconnect it first"
            )

        def removed(gone: str | None) -> None:
            if gone is None:
                failed(not_found(f"no durable subscription {client_id}/{name} of {topic}"))
                return
            self.journal.subscription_removed(topic, key)
            done()

        persistence.unsubscribe(key, removed)
