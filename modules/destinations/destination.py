"""What queues and topics share: names, consumers, producers and the gates that stop them.

A destination receives messages only from the distributing module
(``enqueue``, then ``dispatch`` once per batch) and hands them to its
consumers. What it needs from the rest of the server is in
``DestinationServices``; nothing else reaches it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, ClassVar, cast

from wiremq.config.groups import DestinationPolicy, QueueStoreSettings, WatermarkLimits
from wiremq.config.settings import Settings
from wiremq.modules.destinations.fates import FateCounts
from wiremq.modules.destinations.traffic import Traffic
from wiremq.modules.flow.control import FlowControl
from wiremq.modules.flow.watermarks import Producer, Watermark
from wiremq.modules.message import Message
from wiremq.modules.runtime import Runtime
from wiremq.stores.api import StoreTransaction

if TYPE_CHECKING:
    from wiremq.modules.destinations.deadletter import DeadLetters
    from wiremq.modules.destinations.durable import ReplayManager
    from wiremq.modules.destinations.expiry import Expiry
    from wiremq.modules.destinations.subscription import Subscription, UnackedLimit
    from wiremq.modules.journal.recorder import Journal
    from wiremq.modules.memory.workpool import WorkPools
    from wiremq.modules.persistence.store import Persistence
    from wiremq.stores.volqueue import VolQueueStore


@dataclass
class DestinationServices:
    """What queues and topics use of the rest of the server."""

    settings: Settings
    runtime: Runtime
    flow: FlowControl
    persistence: Persistence | None
    expiry: Expiry
    dead_letters: DeadLetters
    unacked: UnackedLimit
    replays: ReplayManager
    volatile: VolQueueStore
    journal: Journal
    pools: WorkPools
    fates: FateCounts
    # where each producer sends: one that goes away is forgotten there, not in every
    # destination (a disconnect walked all of them: 35 ms with 100,000 queues)
    sending: dict[Producer, set[Destination]] = field(default_factory=dict)
    traffic: Traffic = field(default_factory=Traffic)  # the server's received and delivered
    # What every queue's backlog reads of the settings: one object for them all, not one
    # each (``read_settings``).
    queue_store: QueueStoreSettings = field(init=False)

    def __post_init__(self) -> None:
        self.read_settings()

    def read_settings(self) -> None:
        """Read the settings shared by every destination (again: they may have changed)."""
        self.queue_store = QueueStoreSettings.read(self.settings, "PersQueueFileStore")


def count_into(watermarks: tuple[Watermark | None, ...], messages: int, nbytes: int) -> None:
    """Count messages into (positive) or out of (negative) every watermark given."""
    for watermark in watermarks:
        if watermark is not None:
            if messages > 0:
                watermark.add(messages, nbytes)
            else:
                watermark.remove(-messages, -nbytes)


class Destination(ABC):
    """A named queue or topic with its consumers, its producers and the watermarks
    (``gates``) whose trips stop those producers."""

    domain: ClassVar[str]

    def __init__(self, name: str, services: DestinationServices) -> None:
        self.name = name
        self.services = services
        self.policy = _policy_of(services.settings, name)
        # Insertion-ordered, so that adding and removing one costs the same however many
        # there are.
        self.consumers: dict[Subscription, None] = {}
        # Shared and empty until a producer comes (most destinations of a large server have
        # none most of the time): ``add_producer`` gives it a set of its own.
        self.producers: set[Producer] = NO_PRODUCERS
        # A full store refuses persistent SENDs here (an ERROR) instead of stopping producers.
        self.fail_when_full = self.policy.whenfull == "fail"
        self.store_watermark: Watermark | None = None  # its persistent store's, if any
        self.last_dispatch = services.runtime.monotonic()
        self.removed = False  # taken out of the registry: a new one of its name may exist
        self.delivered_before = 0  # deliveries to consumers that have gone
        self.fates = services.fates.of(name)  # what became of its messages, counted

    def own_watermark(self, kind: str, group: str, prefix: str, stops: bool) -> Watermark | None:
        """A per-destination watermark of ``group``, if its parameters switch one on;
        ``stops`` says whether its trips stop this destination's producers."""
        limits = WatermarkLimits.read(self.services.settings, group, prefix)
        if not limits.enabled:
            return None
        producers: Callable[[], set[Producer]] = (lambda: self.producers) if stops else set
        return Watermark(f"{kind} {self.name}", limits, producers)

    # Its own watermarks: (attribute, kind, group, prefix); whether one stops producers is
    # ``_stops(kind)``.
    OWN_WATERMARKS: ClassVar[tuple[tuple[str, str, str, str], ...]] = ()

    def _make_own_watermarks(self) -> None:
        for attribute, kind, group, prefix in self.OWN_WATERMARKS:
            setattr(self, attribute, self.own_watermark(kind, group, prefix, self._stops(kind)))

    @property
    def own(self) -> list[Watermark]:
        """Its own watermarks that are switched on, whether they stop or not."""
        own = [getattr(self, attribute) for attribute, *_ in self.OWN_WATERMARKS]
        return [w for w in own if w is not None]

    @property
    def gates(self) -> list[Watermark]:
        """The watermarks whose trips stop its producers: its domain's (those added while
        the server runs included; not its store's if a full store refuses persistent SENDs
        here instead) and its own that stop (``_stops``). Made when asked (a producer comes
        or goes, the console looks): a list kept by each of 100,000 destinations was two
        objects more each for the garbage collector to walk."""
        flow = self.services.flow
        store_gate = flow.stores[self.domain]
        gates = [
            g for g in flow.gates[self.domain] if not (self.fail_when_full and g is store_gate)
        ]
        for attribute, kind, _, _ in self.OWN_WATERMARKS:
            watermark = getattr(self, attribute)
            if watermark is not None and self._stops(kind):
                gates.append(watermark)
        return gates

    def _stops(self, kind: str) -> bool:
        """Whether trips of its own ``kind`` watermark stop its producers (a full store does
        not when it refuses persistent SENDs instead: ``whenfull=fail``)."""
        return kind not in STORE_WATERMARKS or not self.fail_when_full

    def held(self, kind: str) -> tuple[int, int]:
        """Messages and bytes it holds now where its ``kind`` watermark counts (a store's
        counts come from the store, through the spool, after this)."""
        return 0, 0

    def configure(self) -> None:
        """Parameters changed while the server runs: its policy and its own watermarks
        follow. A watermark switched on starts from what it holds now (and may stop its
        producers at once); one changed or switched off is judged again."""
        settings = self.services.settings
        self.policy = _policy_of(settings, self.name)
        if self.policy.shutdown:  # its producers' next SENDs are refused (admission)
            for producer in list(self.producers):
                self.remove_producer(producer)
        for attribute, kind, group, prefix in self.OWN_WATERMARKS:
            watermark: Watermark | None = getattr(self, attribute)
            if watermark is not None:
                watermark.configure(WatermarkLimits.read(settings, group, prefix))
                continue
            watermark = self.own_watermark(kind, group, prefix, self._stops(kind))
            if watermark is not None:
                setattr(self, attribute, watermark)
                watermark.add(*self.held(kind))

    def add_producer(self, producer: Producer) -> None:
        """A client sends here: it is stopped at once if a watermark is tripped."""
        if self.producers is NO_PRODUCERS:
            self.producers = set()
        self.producers.add(producer)
        self.services.sending.setdefault(producer, set()).add(self)
        self.services.flow.produces(self.domain, producer)
        for gate in self.gates:
            gate.producer_joined(producer)

    def remove_producer(self, producer: Producer) -> None:
        self.producers.discard(producer)
        if not self.producers:
            self.producers = NO_PRODUCERS
        self.unlist(producer)
        for gate in self.gates:
            gate.forget(producer)

    def unlist(self, producer: Producer) -> None:
        """``producer`` is no longer listed as sending here (it may still be a producer of
        this object: a retired destination keeps its producers)."""
        sending = self.services.sending
        destinations = sending.get(producer)
        if destinations is not None:
            destinations.discard(self)
            if not destinations:
                del sending[producer]

    def subscribe(self, subscription: Subscription) -> None:
        self.consumers[subscription] = None
        self.services.traffic.joined(subscription)

    def unused(self) -> bool:
        """Whether nothing would be lost by removing it: no consumers, nothing counted in
        its own watermarks, and (``_holds_nothing``) no messages nor anything kept for it."""
        return (
            not self.consumers
            and all(not w.gauge.messages and not w.gauge.bytes for w in self.own)
            and self._holds_nothing()
        )

    @abstractmethod
    def _holds_nothing(self) -> bool:
        """No message waits here and the store keeps nothing for it."""

    def remove(self) -> None:
        """It leaves the registry (``unused`` said so); a message still on its way to it
        goes to the destination of its name made again (see the distributing module)."""
        self.removed = True

    @abstractmethod
    def enqueue(self, messages: list[Message]) -> None:
        """Take a run of messages from the distributing module (delivered by
        ``dispatch``)."""

    @abstractmethod
    def dispatch(self) -> None:
        """Hand waiting messages to consumers that can take them."""

    def consumer_ready(self) -> None:
        """A consumer that was skipped for not being ready may be ready now."""
        self.dispatch()

    @abstractmethod
    def unsubscribe(self, subscription: Subscription, unwritten: list[Message]) -> None:
        """Remove a consumer; what it had not acknowledged, and ``unwritten`` (messages
        handed to it and never written to its socket), are handled per domain."""

    @abstractmethod
    def acknowledged(self, subscription: Subscription, messages: list[Message]) -> StoreTransaction:
        """A consumer acknowledged these messages (or took them in auto mode): what the
        store must change for it."""

    @abstractmethod
    def rejected(
        self, subscription: Subscription, messages: list[Message], requeue: bool
    ) -> StoreTransaction:
        """Messages a consumer NACKed: delivered again if ``requeue``, else dropped as if
        acknowledged; what the store must change for it."""

    def count(self, fate: str, messages: Sequence[Message], undone: bool = False) -> None:
        """``messages`` (of this destination) met ``fate`` (``fates.py``): acknowledged,
        discarded...; ``undone``: taken back (an acknowledgement whose transaction failed)."""
        self.fates.count(fate, -len(messages) if undone else len(messages))

    def _consumer_gone(self, subscription: Subscription) -> None:
        """Keep the deliveries of a consumer that unsubscribed in the destination's count."""
        self.delivered_before += subscription.delivered
        self.services.traffic.left(subscription)

    @property
    @abstractmethod
    def received(self) -> int:
        """Messages that came to it (from the counters the message path keeps anyway)."""

    @property
    def delivered(self) -> int:
        """Deliveries to its consumers, those gone included (a redelivery counts again)."""
        return self.delivered_before + sum(s.delivered for s in self.consumers)

    @abstractmethod
    def depth(self) -> int:
        """Messages it holds (its state's ``messages``), without walking them all."""

    def stored(self) -> tuple[int, int]:
        """Messages and bytes the store holds for it (delivered, unacknowledged included)."""
        persistence = self.services.persistence
        return persistence.store.count(self.name) if persistence is not None else (0, 0)

    def _state(self, kind: str, messages: int, nbytes: int) -> dict[str, object]:
        """What every destination's state tells: ``messages``/``bytes`` is its depth
        (waiting and delivered but not yet acknowledged, stored or not)."""
        stored_messages, stored_bytes = self.stored()
        return {
            "name": self.name,
            "kind": kind,
            "messages": messages,
            "bytes": nbytes,
            "stored_messages": stored_messages,
            "stored_bytes": stored_bytes,
            "received": self.received,
            "delivered": self.delivered,
            **self.fates.json(),
            "producers": len(self.producers),
            "spool_quota": self.policy.spoolquota,
            "shutdown": self.policy.shutdown,
            "watermarks": [g.state() for g in self.gates],
        }

    @abstractmethod
    def state(self) -> dict[str, object]:
        """Flow-control state and counts, for the admin view."""


def _policy_of(settings: Settings, name: str) -> DestinationPolicy:
    """The policy of destination ``name``; equal policies are one object (most
    destinations have the defaults: 100,000 of them held one each)."""
    return _shared(DestinationPolicy.for_destination(settings, name))


# Distinct policies kept shared: each is the defaults with one set of overrides, so a server
# has a few; one evicted is made again when asked for (equal, not shared).
SHARED_POLICIES = 256


@lru_cache(maxsize=SHARED_POLICIES)
def _shared(policy: DestinationPolicy) -> DestinationPolicy:
    """The first of the policies equal to ``policy`` still kept."""
    return policy


NOTHING = StoreTransaction()
# The producers of a destination that has none: shared, and a frozenset so that adding to
# it fails loudly.
NO_PRODUCERS = cast("set[Producer]", frozenset())
STORE_WATERMARKS = ("PersQueueStore", "TopicStore")
