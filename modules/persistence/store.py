"""The persistent store as the server uses it: one writer, one reader, the durable registry.

Every change to the store is a ``StoreTransaction`` committed by the
``StoreWriter``: one commit at a time, decided on the event loop and synced by
the runtime's log writer, and whatever arrives meanwhile (appends of both
pipelines, removals, acknowledgements, subscriptions) goes into the next commit
together, so that one write and one sync serve them all. Reads (queue
backlogs, durable replays) and the cleanup run on the store's reader worker.
Acknowledged queue messages are removed, and durable subscribers' positions
moved, in group commits (fastdeletionsize / fastacknowledgesize).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import structlog

from wiremq.config.groups import (
    LiveBufferSettings,
    QueueStoreSettings,
    ReplaySettings,
    StoreBufferSettings,
    StoreSettings,
)
from wiremq.config.settings import Settings
from wiremq.modules.message import Message
from wiremq.modules.persistence.groupcommit import GroupCommit
from wiremq.modules.runtime import Answer, Answers, Runtime
from wiremq.stores.api import (
    QUEUE_PREFIX,
    Batch,
    Committed,
    Match,
    MessageStore,
    PendingCommit,
    Position,
    StoreTransaction,
)
from wiremq.stores.durable import SubscriptionInfo, SubscriptionKey
from wiremq.stores.errors import StoreError

log = structlog.get_logger("wiremq.persistence")

Done = Callable[[Committed], None]
Failed = Callable[[Exception], None]
Work = list[tuple[StoreTransaction, Done, Failed]]  # what one commit carries, in order


class StoreWriter:
    """Hands store transactions to the store one commit at a time; the transactions that
    arrive while a commit runs go into the next one together.

    A commit is decided and encoded here, on the event loop (``MessageStore.begin``:
    memory only, tens of microseconds), and its record written and synced by the
    runtime's log writer, a thread that never takes the interpreter lock: the event
    loop goes on meanwhile, and nothing but the sync's completion comes back. A record
    that starts a new log segment (once per ``WriteAheadLog.segmentsize``) is written by
    the writer worker, which also takes back what a failed write may have left.
    """

    def __init__(
        self,
        store: MessageStore,
        runtime: Runtime,
        changed: Callable[[list[StoreTransaction]], Callable[[], None]],
    ) -> None:
        self.store = store
        self.runtime = runtime
        self.log = runtime.log_writer()
        self.worker = runtime.worker("writer")
        self._changed = changed
        # Run on the event loop before a record goes to the writer worker (HA mode: the
        # journal's records so far go to its file first, on the same thread, so that every
        # change a store holds is journaled however the process ends; server/ha.py).
        self.before_write: Callable[[], None] | None = None
        self._waiting: Work = []
        self._answers: list[Answers] = []  # of the transactions waiting (see ``commit``)
        self._running = False
        # A record started a new log segment: the free-disk watermark looks at the disk
        # then as well as on its timer, so a fast producer cannot fill it in between.
        self.on_segment: Callable[[], None] = lambda: None
        self.commits = 0  # for statistics
        self.transactions = 0

    def commit(
        self,
        transaction: StoreTransaction,
        done: Done,
        failed: Failed,
        answers: Answers | None = None,
    ) -> None:
        """Commit ``transaction`` (all or none); ``done`` or ``failed`` is called later.
        ``answers``: the replies the commit makes true, which the log writer may send as
        soon as it is synced (``LogWriter.write``)."""
        self._waiting.append((transaction, done, failed))
        if answers is not None:
            self._answers.append(answers)
        if not self._running:
            self._start()

    def _start(self) -> None:
        work, self._waiting = self._waiting, []
        sources, self._answers = self._answers, []
        self._running = True
        store = self.store
        self.log.prepare()  # the sync thread wakes while the record is made
        try:
            pending = store.begin([t for t, _, _ in work])
        except StoreError as error:
            refused = error
            self.runtime.call_soon(lambda: self._failed(work, refused))
            return
        write = pending.write
        if write is None:  # nothing stored changes: nothing to wait for
            self.runtime.call_soon(lambda: self._finish(work, pending))
        elif write.in_place:
            self.log.write(
                write.fd,
                write.offset,
                write.parts,
                lambda: self._finish(work, pending),
                lambda error: self.worker.submit(
                    lambda: store.take_back(pending, error),
                    lambda reported: self._abandon(work, pending, reported),
                    lambda reported: self._abandon(work, pending, reported),
                ),
                _gathered(sources) if sources else None,
            )
        else:
            if self.before_write is not None:
                self.before_write()
            self.worker.submit(
                lambda: store.write(pending),
                lambda _: self._segment_started(work, pending),
                lambda error: self._abandon(work, pending, error),
            )

    def _segment_started(self, work: Work, pending: PendingCommit) -> None:
        self._finish(work, pending)
        self.on_segment()

    def _abandon(
        self,
        work: Work,
        pending: PendingCommit,
        error: Exception,
    ) -> None:
        self.store.abandon(pending)
        self._failed(work, error)

    def _failed(self, work: Work, error: Exception) -> None:
        self._running = False
        log.error("store.commit_failed", transactions=len(work), error=str(error))
        for _, _, failed in work:
            failed(error)
        self._next()

    def _finish(self, work: Work, pending: PendingCommit) -> None:
        self._running = False
        results = self.store.finish(pending)
        self.commits += 1
        self.transactions += len(work)
        # What changed is known before the callbacks move on (and change the durable
        # registry); it is told after them (once their messages left the spool's count)
        # and after their receipts are written: a producer waiting for its receipt waits
        # for no watermark bookkeeping, and none of it is seen before the next read.
        tell = self._changed([t for t, _, _ in work])
        for (_, done, _), result in zip(work, results, strict=True):
            done(result)
        self.runtime.after_writes(tell)
        if self._waiting and not self._running:  # a callback may have started one
            self._start()

    def _next(self) -> None:
        if self._waiting and not self._running:
            self._start()


def _gathered(sources: list[Answers]) -> Answers:
    """The answers of several transactions as one source."""
    if len(sources) == 1:
        return sources[0]

    def answers() -> list[Answer]:
        return [answer for source in sources for answer in source()]

    return answers


class Persistence:
    """The store with its writer and reader, and what the server keeps in memory about it."""

    def __init__(self, store: MessageStore, runtime: Runtime, settings: Settings) -> None:
        self.store = store
        self.runtime = runtime
        self.settings = settings
        # Told which destinations a commit changed (store watermarks and spool usage follow).
        self.on_changed: Callable[[set[str]], None] = lambda names: None
        self.writer = StoreWriter(store, runtime, self._committed)
        self.reader = runtime.worker("store")
        queues = QueueStoreSettings.read(settings, "PersQueueFileStore")
        replay = ReplaySettings.read(settings, "TopicFileStore")
        self.removals: GroupCommit[Position, Committed] = GroupCommit(
            runtime,
            lambda batch, done, failed: self.writer.commit(
                StoreTransaction(removals=tuple(batch)), done, failed
            ),
            lambda batch, result: None,
            lambda batch, error: None,  # the writer logged it
            size=lambda item: 0,
            max_items=queues.fastdeletionsize,
            max_bytes=1 << 62,
            max_delay=StoreBufferSettings.read(settings, "P2PStore").maxdelay / 1000,
        )
        # (subscription, position, single): a position to move to, or one past it
        # acknowledged on its own.
        self.acknowledgements: GroupCommit[tuple[SubscriptionKey, int, bool], Committed] = (
            GroupCommit(
                runtime,
                lambda batch, done, failed: self.writer.commit(_durable_acks(batch), done, failed),
                lambda batch, result: None,
                lambda batch, error: None,
                size=lambda item: 0,
                max_items=replay.fastacknowledgesize,
                max_bytes=1 << 62,
                max_delay=StoreBufferSettings.read(settings, "PubSubStore").maxdelay / 1000,
            )
        )
        # Messages stored before this process opened the store (a restart, an HA takeover)
        # may have been delivered already: read back, they come flagged redelivered.
        self.restored_upto: dict[str, int] = store.opened_positions()
        self.durables: dict[SubscriptionKey, str] = {}  # durable subscription -> its topic
        self.active: set[SubscriptionKey] = set()  # those with a subscriber now
        # When each one's subscriber last left (epoch ms), since the server started.
        self.last_seen: dict[SubscriptionKey, int] = {}
        # Stored messages durable subscribers acknowledged past their stored position (an
        # older one is still unacknowledged), as the store keeps them (single
        # acknowledgements) and with those not yet committed: their replays skip them.
        self.acked_beyond: dict[SubscriptionKey, set[int]] = {}
        self.durable_topics: Counter[str] = Counter()  # topics with durable subscriptions
        live = LiveBufferSettings.read(settings, "DestinationManager")
        self.live_buffer_bytes = 0  # persistent queue messages held in memory, all queues
        self.live_buffer_limit = live.globalpersqueuebytehighwatermark
        self.queue_live_buffer_limit = live.persqueuebytehighwatermark

    def subscriber_left(self, key: SubscriptionKey) -> None:
        """The subscriber of the durable subscription ``key`` left: not active, last seen
        now."""
        self.active.discard(key)
        self.last_seen[key] = self.runtime.now_ms()

    def _committed(self, transactions: list[StoreTransaction]) -> Callable[[], None]:
        """How to tell ``on_changed`` the destinations whose stored counts the commit may
        have changed. The topics of the durable subscriptions it acknowledged or removed
        are looked up now, before the callbacks change the registry; the rest when told."""
        # Each kind is looked at only if a transaction has some (most have one kind): a
        # generator costs a call even over nothing, and this runs for every commit.
        topics: set[str] = set()
        for transaction in transactions:
            keys = list(transaction.unsubscribes)
            if transaction.acknowledgements:
                keys += [key for key, _ in transaction.acknowledgements]
            if transaction.single_acknowledgements:
                keys += [key for key, _ in transaction.single_acknowledgements]
            for key in keys:
                topic = self.durables.get(key)
                if topic is not None:
                    topics.add(topic)

        def tell() -> None:
            names = topics
            for transaction in transactions:
                for message in transaction.appends:
                    names.add(message.destination)
                for name, _ in transaction.removals:
                    names.add(name)
                for (source, _), copy in transaction.moves:
                    names.update((source, copy.destination))
                for _, topic, _ in transaction.subscribes:
                    names.add(topic)
            self.on_changed(names)

        return tell

    def load_durable_subscriptions(self) -> list[SubscriptionInfo]:
        """The durable subscriptions the store holds (at start-up)."""
        subscriptions = self.store.subscriptions()
        self.durables = {(s.client_id, s.name): s.topic for s in subscriptions}
        self.acked_beyond = {
            (s.client_id, s.name): set(s.acknowledged) for s in subscriptions if s.acknowledged
        }
        self.durable_topics = Counter(self.durables.values())
        return subscriptions

    # -- writes --------------------------------------------------------------------------

    def commit(
        self,
        transaction: StoreTransaction,
        done: Done,
        failed: Failed,
        answers: Answers | None = None,
    ) -> None:
        self.writer.commit(transaction, done, failed, answers)

    def acknowledge(self, transaction: StoreTransaction, done: Callable[[], None] | None) -> None:
        """Store what acknowledgements changed (removals, durable positions) in the group
        commits; ``done`` once it is stored."""
        for position in transaction.removals:
            self.removals.add(position)
        for key, seq in transaction.acknowledgements:
            self.acknowledgements.add((key, seq, False))
        for key, seq in transaction.single_acknowledgements:
            self.acknowledgements.add((key, seq, True))
        if done is not None:
            self.removals.when_committed(lambda: self.acknowledgements.when_committed(done))

    def forget(self, messages: list[Message]) -> None:
        """Stored messages the server refused or discarded after storing them leave the store."""
        for message in messages:
            self.removals.add((message.destination, message.store_seq))

    def subscribe(
        self,
        key: SubscriptionKey,
        topic: str,
        selector: str,
        done: Callable[[SubscriptionInfo, bool], None],
        failed: Failed,
    ) -> None:
        """Create or resume a durable subscription; ``done(info, created)`` once stored."""

        def registered(result: Committed) -> None:
            info, created = result.subscriptions[0]
            previous = self.durables.get(key)
            if previous != info.topic or created:
                self.acked_beyond.pop(key, None)  # positions of another log, or of the past
            if previous != info.topic:
                if previous is not None:
                    self.durable_topics[previous] -= 1
                self.durables[key] = info.topic
                self.durable_topics[info.topic] += 1
            done(info, created)

        self.writer.commit(
            StoreTransaction(subscribes=((key, topic, selector),)), registered, failed
        )

    def unsubscribe(self, key: SubscriptionKey, done: Callable[[str | None], None]) -> None:
        """Remove a durable subscription and its backlog; ``done(topic)`` once stored
        (None if there was no such subscription)."""
        topic = self.durables.get(key)

        def removed(result: Committed) -> None:
            self.acked_beyond.pop(key, None)
            if self.durables.pop(key, None) is not None:
                self.durable_topics[topic or ""] -= 1
            done(topic)

        self.writer.commit(
            StoreTransaction(unsubscribes=(key,)),
            removed,
            lambda error: log.error("durable.remove_failed", error=str(error)),
        )

    def keeps(self, topic: str) -> bool:
        """Whether persistent messages of ``topic`` are stored (it has durable subscriptions)."""
        return self.durable_topics[topic] > 0

    # -- reads ---------------------------------------------------------------------------

    def read(
        self,
        destination: str,
        after_seq: int,
        limit: int,
        max_bytes: int,
        done: Callable[[Batch], None],
        failed: Failed,
        match: Match | None = None,
        examine: int | None = None,
    ) -> None:
        """Read messages of ``destination`` after ``after_seq`` on the reader worker (those
        ``match`` accepts, if given: see ``MessageStore.read``)."""
        now_ms = self.runtime.now_ms()
        store = self.store
        self.reader.submit(
            lambda: store.read(
                destination,
                now_ms=now_ms,
                after_seq=after_seq,
                limit=limit,
                max_bytes=max_bytes,
                match=match,
                examine=examine,
            ),
            done,
            failed,
        )

    def read_for_consumers(
        self,
        destination: str,
        after_seq: int,
        limit: int,
        max_bytes: int,
        done: Callable[[Batch], None],
        match: Match | None = None,
        examine: int | None = None,
    ) -> None:
        """``read``, for consumers waiting on it: a read that fails is logged and tried
        again after the store's ``readretryinterval``, until it succeeds (nothing is skipped
        and the consumers are not forgotten; a console action's read fails instead)."""
        group = "PersQueueFileStore" if destination.startswith(QUEUE_PREFIX) else "TopicFileStore"

        def attempt() -> None:
            self.read(destination, after_seq, limit, max_bytes, done, retry, match, examine)

        def retry(error: Exception) -> None:
            interval = StoreSettings.read(self.settings, group).readretryinterval
            log.error(
                "store.read_failed", destination=destination, error=str(error), retry_s=interval
            )
            self.runtime.call_later(interval, attempt)

        attempt()

    def statistics(self) -> dict[str, dict[str, int]]:
        """Commits made and what they carried."""
        return {
            "store": {
                "commits": self.writer.commits,
                "transactions": self.writer.transactions,
                "receipts sent at the sync": self.writer.log.answered,
            },
            "queue removals": {"commits": self.removals.batches, "items": self.removals.items},
            "durable acknowledgements": {
                "commits": self.acknowledgements.batches,
                "items": self.acknowledgements.items,
            },
        }


def _durable_acks(batch: list[tuple[SubscriptionKey, int, bool]]) -> StoreTransaction:
    """A batch of durable acknowledgements as one store transaction: each subscription's
    highest position (a position never moves back) and the single ones."""
    highest: dict[SubscriptionKey, int] = {}
    singles = []
    for key, seq, single in batch:
        if single:
            singles.append((key, seq))
        elif seq > highest.get(key, 0):
            highest[key] = seq
    return StoreTransaction(
        acknowledgements=tuple(highest.items()), single_acknowledgements=tuple(singles)
    )
