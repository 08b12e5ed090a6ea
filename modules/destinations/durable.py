"""Durable topic subscribers: replaying what they missed from the store.

A durable subscriber that comes back first catches up from the store, in
batches of replaymsgamount messages / replaybyteamount bytes with replaysleep
between batches, with at most DurableTopicSubscriberThreadPool.maxthreads
replays running at once, each handing over at most its maxprocessoriterations
messages per step, and DurableTopicSubscriptionManager.globaldursubbytelimit
bytes being read for all of them together. A replay
also waits while its client has more than one batch not yet written to its
socket. Replayed messages are handed over only as the subscriber's window
allows; the rest of a batch waits here.

Reads and commits run on different workers, so a message committed while a
replay reads may or may not be in what it read. The subscriber skips the
live copies of stored messages while it replays and notes the highest it
skipped; the replay reads on until it has read past that one, and only then
goes live, skipping afterwards the live copies of what it read: nothing is
lost, nothing is delivered twice.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Container
from typing import TYPE_CHECKING, Protocol

from wiremq.config.groups import DurableLimitSettings, ReplayPoolSettings, ReplaySettings
from wiremq.config.settings import Settings
from wiremq.modules.destinations.subscription import Subscription
from wiremq.modules.message import Message
from wiremq.modules.runtime import Runtime
from wiremq.stores.api import Batch
from wiremq.stores.durable import SubscriptionInfo
from wiremq.stores.records import StoredMessage

if TYPE_CHECKING:
    from wiremq.modules.destinations.expiry import Expiry
    from wiremq.modules.persistence.store import Persistence


class Replayed(Protocol):
    """A topic, as the replays of its durable subscribers read it: its name (what the
    store keeps its messages under) and its consumers (a replay starts only for one
    still subscribed)."""

    @property
    def name(self) -> str: ...
    @property
    def consumers(self) -> Container[Subscription]: ...


class ReplayManager:
    """Starts, paces and bounds the replays of durable subscribers."""

    def __init__(self, settings: Settings, runtime: Runtime) -> None:
        self.runtime = runtime
        pool = ReplayPoolSettings.read(settings, "DurableTopicSubscriberThreadPool")
        self.max_replays = pool.maxthreads
        self.per_step = pool.maxprocessoriterations
        self.byte_budget = DurableLimitSettings.read(
            settings, "DurableTopicSubscriptionManager"
        ).globaldursubbytelimit
        self.settings = ReplaySettings.read(settings, "TopicFileStore")
        self.persistence: Persistence | None = None
        self.expiry: Expiry | None = None
        self.active: set[Subscription] = set()
        self.waiting: deque[tuple[Replayed, Subscription]] = deque()
        self.reading_bytes = 0  # replay reads in progress, all subscribers
        self._positions: dict[Subscription, int] = {}  # replay position per subscriber
        self._pending: dict[Subscription, deque[Message]] = {}  # read, not yet handed over

    def configure(self, settings: Settings) -> None:
        """The replay parameters may have changed: the next replay steps use them."""
        self.settings = ReplaySettings.read(settings, "TopicFileStore")

    def attach(self, persistence: Persistence, expiry: Expiry) -> None:
        """Replay from this store; expired messages met go to ``expiry``."""
        self.persistence = persistence
        self.expiry = expiry

    def start(self, topic: Replayed, subscription: Subscription, info: SubscriptionInfo) -> None:
        """The subscription is registered in the store: replay what it missed."""
        if subscription not in topic.consumers:
            return
        subscription.acked_position = info.acked_seq
        subscription.replayed_upto = info.acked_seq
        self._positions[subscription] = info.acked_seq
        self.waiting.append((topic, subscription))
        self._start_waiting()

    def stop(self, subscription: Subscription) -> None:
        """The subscriber went away; its replay ends at the next step."""
        self.waiting = deque(w for w in self.waiting if w[1] is not subscription)
        self._positions.pop(subscription, None)
        self._pending.pop(subscription, None)

    def _start_waiting(self) -> None:
        while self.waiting and len(self.active) < self.max_replays:
            topic, subscription = self.waiting.popleft()
            self.active.add(subscription)
            self._step(topic, subscription)

    def _finish(self, subscription: Subscription) -> None:
        self.active.discard(subscription)
        self._positions.pop(subscription, None)
        self._pending.pop(subscription, None)
        self._start_waiting()

    def _hand_over(self, subscription: Subscription) -> bool:
        """Deliver read messages while the window allows, at most ``maxprocessoriterations``
        in one step (the other replays get their turn); True when none are left."""
        pending = self._pending.get(subscription)
        for _ in range(self.per_step):
            if not pending:
                return True
            if not subscription.ready_for(pending[0]):
                return False
            subscription.deliver(pending.popleft())
        return not pending

    def _step(self, topic: Replayed, subscription: Subscription) -> None:
        if subscription not in self._positions:
            self._finish(subscription)
            return
        if not self._hand_over(subscription):
            self._later(lambda: self._step(topic, subscription))
            return
        amount = self.settings.replaybyteamount
        if self.reading_bytes and self.reading_bytes + amount > self.byte_budget:
            self._later(lambda: self._step(topic, subscription))
            return
        persistence = self.persistence
        assert persistence is not None
        self.reading_bytes += amount
        persistence.read_for_consumers(
            topic.name,
            self._positions[subscription],
            self.settings.replaymsgamount,
            amount,
            lambda batch: self._replayed(topic, subscription, batch, amount),
        )

    def _later(self, step: Callable[[], None]) -> None:
        """Run ``step`` after replaysleep."""
        self.runtime.call_later(self.settings.replaysleep / 1000, step)

    def _replayed(
        self, topic: Replayed, subscription: Subscription, batch: Batch, amount: int
    ) -> None:
        self.reading_bytes -= amount
        if subscription not in self._positions:
            self._finish(subscription)
            return
        assert self.persistence is not None and subscription.durable_key is not None
        acked = self.persistence.acked_beyond.get(subscription.durable_key, ())
        restored = self.persistence.restored_upto.get(topic.name, 0)
        read = (_read_back(stored, seq, restored) for seq, stored in batch.messages)
        accepts = subscription.accepts
        self._pending[subscription] = deque(
            m for m in read if m.store_seq not in acked and (accepts is None or accepts(m))
        )
        if batch.expired and self.settings.expiryonreplay and self.expiry is not None:
            self.expiry.expired_stored([((topic.name, seq), m) for seq, m in batch.expired])
        self._positions[subscription] = batch.last_seq
        if batch.at_end and subscription.skipped_upto <= batch.last_seq:
            self._go_live(topic, subscription)
        else:
            self._later(lambda: self._step(topic, subscription))

    def _go_live(self, topic: Replayed, subscription: Subscription) -> None:
        """The store has nothing more: hand over the rest as the window allows, then go live."""
        if subscription not in self._positions:
            self._finish(subscription)
        elif subscription.skipped_upto > self._positions[subscription]:
            self._step(topic, subscription)  # committed since the last read: read on
        elif self._hand_over(subscription):
            subscription.replayed_upto = self._positions[subscription]
            subscription.replaying = False
            self._finish(subscription)
        else:
            self._later(lambda: self._go_live(topic, subscription))


def _read_back(stored: StoredMessage, seq: int, restored: int) -> Message:
    """A stored message replayed; one stored before a restart or an HA takeover may have
    been delivered already, and comes flagged redelivered."""
    message = Message.from_stored(stored, seq)
    if seq <= restored:
        message.redelivered_before(1)
    return message
