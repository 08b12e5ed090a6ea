"""``MessageStore`` straight on the two ZODB stores, without a write-ahead log.

An interim implementation: each transaction is applied as a few ZODB commits
(queue store, topic store), so a transaction across both is not atomic over a
crash. It is replaced by the write-ahead-log store.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from itertools import islice

from ZODB import DB

from .api import QUEUE_PREFIX, Batch, Committed, Position, StoreTransaction
from .durable import SubscriptionInfo
from .logstore import LogStore
from .model import LogSet, grouped
from .persqueue import PersQueueStore
from .records import StoredMessage
from .topicstore import TopicStore, UnknownSubscriptionError


class DirectStore:
    def __init__(self, queues: PersQueueStore, topics: TopicStore, databases: list[DB]) -> None:
        self.queues = queues
        self.topics = topics
        self.databases = databases
        self._lock = threading.Lock()

    def _of(self, destination: str) -> LogStore[LogSet]:
        return self.queues if destination.startswith(QUEUE_PREFIX) else self.topics  # type: ignore[return-value]

    def commit(self, transactions: Sequence[StoreTransaction]) -> list[Committed]:
        with self._lock:
            return [self._apply(t) for t in transactions]

    def _apply(self, t: StoreTransaction) -> Committed:
        subscriptions = tuple(
            self.topics.subscribe(k[0], k[1], topic, sel) for k, topic, sel in t.subscribes
        )
        for key in t.unsubscribes:
            with contextlib.suppress(UnknownSubscriptionError):
                self.topics.unsubscribe(*key)
        queued = [m for m in t.appends if m.destination.startswith(QUEUE_PREFIX)]
        published = [m for m in t.appends if not m.destination.startswith(QUEUE_PREFIX)]
        queue_seqs = iter(self.queues.append(queued) if queued else ())
        topic_seqs = iter(self.topics.append(published) if published else ())
        positions = tuple(
            next(queue_seqs) if m.destination.startswith(QUEUE_PREFIX) else next(topic_seqs)
            for m in t.appends
        )
        for destination, seqs in grouped(t.removals).items():
            self._of(destination)._remove({destination: seqs}, "remove")
        if t.acknowledgements:
            self.topics.acknowledge_batch(dict(t.acknowledgements))
        return Committed(positions, (), subscriptions)

    def read(
        self, destination: str, *, now_ms: int, after_seq: int, limit: int, max_bytes: int
    ) -> Batch:
        with self._lock, self._of(destination)._session.read() as logs:
            log = logs.logs.get(destination)
            items = [] if log is None else log.after(after_seq)
            messages: list[tuple[int, StoredMessage]] = []
            expired: list[tuple[int, StoredMessage]] = []
            size, last_seq, at_end = 0, after_seq, True
            for seq, message in items:
                if len(messages) + len(expired) >= limit or (
                    messages and size + message.size > max_bytes
                ):
                    at_end = False
                    break
                last_seq = seq
                if message.expired(now_ms):
                    expired.append((seq, message))
                else:
                    messages.append((seq, message))
                    size += message.size
        return Batch(messages, last_seq, at_end, expired)

    def expired(self, prefix: str, now_ms: int, limit: int) -> list[tuple[Position, StoredMessage]]:
        store = self.queues if prefix == QUEUE_PREFIX else self.topics
        found: list[tuple[Position, StoredMessage]] = []
        with self._lock, store._session.read() as logs:
            due = islice(logs.expiry.keys(max=(now_ms + 1,), excludemax=True), limit)
            for _, destination, seq in due:
                log = logs.logs.get(destination)
                entry = next(iter(log.after(seq - 1)), None) if log is not None else None
                if entry is not None and entry[0] == seq:
                    found.append(((destination, seq), entry[1]))
        return found

    def subscriptions(self) -> list[SubscriptionInfo]:
        with self._lock:
            return self.topics.subscriptions()

    def count(self, destination: str) -> tuple[int, int]:
        store = self._of(destination)
        return store.count(destination), store.byte_count(destination)

    def totals(self, prefix: str) -> tuple[int, int]:
        store = self.queues if prefix == QUEUE_PREFIX else self.topics
        return store.total_count(), store.total_bytes()

    def destinations(self, prefix: str) -> list[str]:
        store = self.queues if prefix == QUEUE_PREFIX else self.topics
        return store.destinations()

    def catch_up(self, max_seconds: float) -> int:
        with self._lock:
            return len(self.topics.collect_garbage(max_seconds=max_seconds).removed)

    def pack(self) -> None:
        for db in self.databases:
            db.pack()

    def close(self) -> None:
        self.queues.close()
        self.topics.close()
        for db in self.databases:
            db.close()
