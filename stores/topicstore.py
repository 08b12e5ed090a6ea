"""TopicStore: persistent topic messages kept for durable subscribers, and their replay.

A subscriber that went away gets, on return, every persistent message of its
topic published meanwhile, in order, read back in batches (replaymsgamount,
replaybyteamount). Acknowledging moves its position; messages that every
subscription of the topic has passed are removed, a bounded number inline
and the rest by ``collect_garbage`` in the cleanup cycle.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from ZODB import DB

from .chunks import Chunk, run_in_chunks
from .counts import CountSnapshot
from .durable import DurableLogSet, SubscriptionInfo, SubscriptionKey
from .errors import StoreError
from .logstore import LogStore, destinations_of
from .records import StoredMessage
from .results import Batch, SweepResult


class UnknownSubscriptionError(StoreError):
    """No durable subscription by that client id and name."""


class TopicStore(LogStore[DurableLogSet]):
    """Persistent topic messages and durable subscriptions; one thread at a time."""

    def __init__(
        self,
        db: DB,
        *,
        root_name: str = "topics",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(db, root_name, DurableLogSet, clock)

    # -- subscriptions -------------------------------------------------------

    def subscribe(
        self, client_id: str, name: str, topic: str, selector: str = ""
    ) -> tuple[SubscriptionInfo, bool]:
        """Create or resume a durable subscription; returns it and whether it is new.

        A new one starts at the topic's current end. Resuming with another
        topic or selector replaces the subscription and drops its backlog, as
        JMS prescribes.
        """
        key = (client_id, name)
        with self._session.write(f"subscribe {client_id}/{name}") as logs:
            old = logs.subscriptions.get(key)
            if old is not None and (old.topic, old.selector) == (topic, selector):
                return old.info(key), False
            if old is not None:
                logs.unsubscribe(key)
            info = logs.subscribe(key, topic, selector).info(key)
            snapshot = CountSnapshot.of(logs, {topic} | ({old.topic} if old else set()))
        self._counts.publish(snapshot)
        return info, True

    def unsubscribe(self, client_id: str, name: str, *, collect_limit: int = 500) -> None:
        """Remove a subscription; its backlog goes with it (now, or in the next collection)."""
        key = (client_id, name)
        with self._session.write(f"unsubscribe {client_id}/{name}") as logs:
            if key not in logs.subscriptions:
                raise UnknownSubscriptionError(f"no durable subscription {client_id}/{name}")
            topic = logs.unsubscribe(key).topic
            logs.collect(collect_limit, [topic])
            snapshot = CountSnapshot.of(logs, {topic})
        self._counts.publish(snapshot)

    def subscription(self, client_id: str, name: str) -> SubscriptionInfo | None:
        key = (client_id, name)
        with self._session.read() as logs:
            sub = logs.subscriptions.get(key)
            return None if sub is None else sub.info(key)

    def subscriptions(self) -> list[SubscriptionInfo]:
        with self._session.read() as logs:
            return [sub.info(key) for key, sub in logs.subscriptions.items()]

    # -- messages ------------------------------------------------------------

    def append(self, messages: Sequence[StoredMessage]) -> list[int | None]:
        """Store, in one commit, the messages of topics that have durable subscriptions.

        Returns each message's position in its topic, or None for a message
        no durable subscription will ever need (it is not stored).
        """
        with self._session.write(f"append {len(messages)}") as logs:
            keep = [logs.has_subscribers(m.destination) for m in messages]
            stored = [m for m, kept in zip(messages, keep, strict=True) if kept]
            positions = iter(logs.append(stored))
            seqs = [next(positions) if kept else None for kept in keep]
            snapshot = CountSnapshot.of(logs, destinations_of(messages))
        self._counts.publish(snapshot)
        return seqs

    def replay(
        self,
        client_id: str,
        name: str,
        *,
        now_ms: int,
        after_seq: int | None = None,
        max_messages: int = 100,
        max_bytes: int = 1_048_576,
        expiry_on_replay: bool = False,
    ) -> Batch:
        """The subscription's next messages after ``after_seq`` (default: its acknowledged
        position), in order, none expired.

        The selector is not applied here: the server filters and acknowledges
        past what it skipped. ``expiry_on_replay`` deletes expired messages met.
        """
        info = self.subscription(client_id, name)
        if info is None:
            raise UnknownSubscriptionError(f"no durable subscription {client_id}/{name}")
        return self._read_log(
            info.topic,
            info.acked_seq if after_seq is None else after_seq,
            limit=max_messages,
            max_bytes=max_bytes,
            now_ms=now_ms,
            remove_expired=expiry_on_replay,
        )

    def acknowledge(
        self, client_id: str, name: str, upto_seq: int, *, collect_limit: int = 500
    ) -> None:
        """Record that the subscription has everything up to ``upto_seq``."""
        self.acknowledge_batch({(client_id, name): upto_seq}, collect_limit=collect_limit)

    def acknowledge_batch(
        self, positions: Mapping[SubscriptionKey, int], *, collect_limit: int = 500
    ) -> None:
        """Move several subscriptions' positions in one commit (fastacknowledgesize batching),
        then remove up to ``collect_limit`` messages all subscribers have passed.

        Positions never move back; unknown subscriptions are ignored (they
        may have been unsubscribed while the acknowledgement was queued).
        """
        with self._session.write(f"acknowledge {len(positions)}") as logs:
            topics = set()
            for key, upto in positions.items():
                sub = logs.subscriptions.get(key)
                if sub is not None and upto > sub.acked_seq:
                    sub.acked_seq = upto
                    topics.add(sub.topic)
            removed, _ = logs.collect(collect_limit, topics)
            snapshot = CountSnapshot.of(logs, destinations_of(removed))
        self._counts.publish(snapshot)

    def collect_garbage(
        self,
        *,
        max_messages: int = 100_000,
        max_seconds: float = 5.0,
        transaction_size: int = 500,
    ) -> SweepResult:
        """Remove messages every durable subscriber has passed, in small commits."""
        return run_in_chunks(
            self._collect_chunk,
            max_messages=max_messages,
            max_seconds=max_seconds,
            transaction_size=transaction_size,
            clock=self._clock,
        )

    def _collect_chunk(self, limit: int) -> Chunk:
        with self._session.write(f"collect up to {limit}") as logs:
            removed, exhausted = logs.collect(limit)
            snapshot = CountSnapshot.of(logs, destinations_of(removed))
        self._counts.publish(snapshot)
        return removed, exhausted
