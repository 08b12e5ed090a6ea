"""The journal's hooks: one call at each place a message life event happens.

Each hook is one line where the event happens (``journal.delivered(subscription,
message)`` in ``Subscription.deliver``, ...); the places are listed in
docs/journal.md. ``Journal`` itself records nothing: it is the journal switched
off, and the one a core on a fake clock gets. ``RecordingJournal`` records.

A hook runs for every message and every delivery, so it does one thing: it
adds its record (the kind and the objects concerned) to the journal's C
``Recorder``, which writes the JSON line at once into its buffer while the
message is still in the processor's cache (``encoding.py``, ``_encode.c``). A
hook that names a list of messages (the SENDs of one read, the deliveries one
write put on a socket) is one call for all of them. Every
``Journal.flushinterval`` the buffer's bytes go to the journal's worker thread,
which appends them to the current file (``files.py``) with the interpreter
lock released. Keeping tuples of the objects instead and encoding them on the
worker was measured: holding a tenth of a second of messages alive and reading
them back cold cost the message path three to five times as much.

Lines handed to the writer and not yet written are counted in a watermark that
stops every producer at ``Journal.maxbacklog`` (and starts them again at half):
a disk that cannot keep up slows the server down instead of growing its memory
or losing records.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from wiremq.config.groups import (
    DestinationPolicy,
    JournalSettings,
    StoreSettings,
    WatermarkLimits,
)
from wiremq.config.settings import DESTINATION_GROUP, Settings
from wiremq.modules.journal import encoding as kinds
from wiremq.modules.journal.encoding import DestinationSwitch, recorder
from wiremq.modules.journal.files import JournalFiles
from wiremq.modules.journal.schema import (
    EGRESS_DISCARD_OLDEST,
    EXPIRED,
    SUBSCRIBER_LEFT,
    TRANSACTION_FAILED,
    VOLQUEUE,
    store_of,
)
from wiremq.modules.runtime import Runtime
from wiremq.stores.api import QUEUE_PREFIX, Committed, Position, StoreTransaction
from wiremq.stores.records import StoredMessage

if TYPE_CHECKING:
    from wiremq.modules.flow.control import FlowControl
    from wiremq.modules.message import Message
    from wiremq.stores.durable import SubscriptionKey

log = structlog.get_logger("wiremq.journal")


class NamedDestination(Protocol):
    """A subscription's destination, as the journal names it."""

    @property
    def name(self) -> str: ...


class JournaledSubscription(Protocol):
    """A subscription (``destinations/subscription.Subscription``) as the journal records
    it: the fields its records name (``encoding.subscription_at``), whether it acknowledges
    (``unacked`` None: auto mode), whether it is durable, and its destination's name."""

    @property
    def session_id(self) -> str: ...
    @property
    def sub_id(self) -> str: ...
    @property
    def ack_mode(self) -> str: ...
    @property
    def unacked(self) -> Mapping[str, Message] | None: ...
    @property
    def durable_key(self) -> SubscriptionKey | None: ...
    @property
    def destination(self) -> NamedDestination: ...


# The kinds of the hooks that run for every message, read once (a global, not an attribute).
_RECEIVED, _DELIVERED, _REDELIVERED = kinds.RECEIVED, kinds.DELIVERED, kinds.REDELIVERED
_CONSUMED = kinds.CONSUMED


@dataclass
class CleanupRun:
    """One run of a store's cleanup: its id and what it did so far."""

    run_id: str
    store: str
    scanned: int = 0
    removed: int = 0


def server_id() -> str:
    """A new id for one run of the server (random, as message ids' prefixes are)."""
    return os.urandom(4).hex()


class Journal:
    """The journal's hooks (see the module docstring); this one records nothing."""

    records = False  # whether the hooks record: a hook run per delivery is skipped if not

    def __init__(self) -> None:
        self.server = server_id()
        self._runs = 0

    # -- the server ------------------------------------------------------------------------

    def open(self) -> None:
        """The server started."""

    def close(self) -> None:
        """The server stopped: write what is left."""

    def flush(self) -> None:
        """Hand the records so far to the writer."""

    # -- the pipeline ----------------------------------------------------------------------

    def received(self, messages: Sequence[Message]) -> None:
        """Messages were taken into a pipeline (admission)."""

    def refused(self, message: Message, reason: str) -> None:
        """The server does not take a message; its sender is told ``reason``."""

    def discarded(self, messages: Sequence[Message], reason: str) -> None:
        """Messages were dropped on purpose."""

    def stored(self, messages: Sequence[Message]) -> None:
        """Messages were committed to their store (``store_seq`` set)."""

    # -- deliveries ------------------------------------------------------------------------

    def delivered(self, subscription: JournaledSubscription, message: Message) -> None:
        """A message was handed to a subscription in a client ack mode (a redelivery if
        flagged so). An auto-mode delivery is recorded when it is written (``consumed``),
        or when it leaves unwritten (``ended``, ``egress_discarded``)."""

    def consumed(self, subscription: JournaledSubscription, messages: Sequence[Message]) -> None:
        """Auto mode: deliveries were written to the client's socket, which delivers and
        acknowledges them (one record each, where a client mode has two)."""

    def acknowledgement(
        self,
        subscription: JournaledSubscription,
        messages: Sequence[Message],
        nack: bool,
        requeue: bool,
    ) -> None:
        """An ACK (or a NACK, and whether it requeues) took these deliveries."""

    def unacknowledged(
        self, subscription: JournaledSubscription, messages: Sequence[Message]
    ) -> None:
        """Acknowledgements undone: their transaction failed and the messages went back."""

    def ended(self, subscription: JournaledSubscription, messages: Sequence[Message]) -> None:
        """The subscription ended with these deliveries unacknowledged (in auto mode: not
        written): a queue's go back to it; a topic's go back to the store for a durable
        subscriber, else are lost to this subscriber."""

    def discarded_for(
        self, subscription: JournaledSubscription, messages: Sequence[Message], reason: str
    ) -> None:
        """Messages were dropped for one subscriber only (never delivered to it)."""

    def egress_discarded(self, subscription: JournaledSubscription, message: Message) -> None:
        """The client's egress queue dropped a delivery (its discard-oldest policy)."""

    def subscription_removed(self, topic: str, key: SubscriptionKey) -> None:
        """A durable subscription was removed, with what the store kept only for it."""

    # -- the operator's actions (the admin console) ---------------------------------------

    def operator_discarded(
        self,
        messages: Sequence[Message],
        stored: Sequence[tuple[Position, StoredMessage]],
        reason: str,
    ) -> None:
        """An operator took waiting messages out of a queue (``PURGED``, ``DELETED``): those
        in memory, and those read from the store."""

    def operator_moved(
        self,
        messages: Sequence[Message],
        stored: Sequence[tuple[Position, StoredMessage]],
        to: str,
    ) -> None:
        """An operator moved waiting messages to ``to`` (their copies are received there)."""

    # -- expiry and cleanup ----------------------------------------------------------------

    def expired(self, destination: str, messages: Sequence[Message], dmq: str | None) -> None:
        """Messages held in memory expired: discarded, or copied to ``dmq`` (which
        ``dead_lettered`` records)."""

    def dead_lettered(self, messages: Sequence[Message], dmq: str, reason: str) -> None:
        """Messages held in memory were moved to the dead message queue ``dmq``: expired,
        delivered too often (``redelivery limit``) or NACKed without requeue (``rejected``)."""

    def expired_stored(
        self,
        transaction: StoreTransaction,
        found: Sequence[tuple[Position, StoredMessage]],
        result: Committed,
        run: CleanupRun | None,
    ) -> None:
        """Stored messages ``found`` expired; ``transaction`` removed them or moved them
        to dead message queues, as ``result`` tells; ``run`` if a cleanup run found them."""

    def cleanup_started(self, store: str, settings: StoreSettings) -> CleanupRun:
        """A run of a persistent store's cleanup begins."""
        return self._new_run(store)

    def cleanup_ended(self, run: CleanupRun) -> None:
        """A cleanup run ended."""

    def sweep_started(self, store: str, interval: float) -> CleanupRun:
        """A cleanup run of an in-memory store (the VolQueueStore's sweep) begins: a pass
        over its destinations, a slice per turn of the event loop (``sweeping``), ended by
        ``cleanup_ended``."""
        return self._new_run(store)

    @contextmanager
    def sweeping(self, run: CleanupRun) -> Iterator[CleanupRun]:
        """A slice of the sweep ``run``, on the event loop from start to end: what
        ``expired`` reports meanwhile, it removed."""
        yield run

    def _new_run(self, store: str) -> CleanupRun:
        self._runs += 1
        return CleanupRun(f"{self.server}-{store}-{self._runs}", store)

    def statistics(self) -> dict[str, int]:
        """What was written, for the admin view."""
        return {}


class RecordingJournal(Journal):
    """The journal that records (see the module docstring)."""

    records = True

    def __init__(
        self, settings: Settings, runtime: Runtime, folder: Path, flow: FlowControl
    ) -> None:
        super().__init__()
        self.settings = JournalSettings.read(settings, "Journal")
        self.switch = destination_switch(settings)
        self.runtime = runtime
        self.files = JournalFiles(folder, self.settings.maxfilesize, self.server)
        self.worker = runtime.worker("journal")
        self._recorder = recorder(self.switch)
        self._add = self._recorder.add  # the hooks' one step
        self._timer: Any = None
        self._sweep: CleanupRun | None = None
        half = self.settings.maxbacklog // 2
        self.backlog = flow.journal_gate(WatermarkLimits(self.settings.maxbacklog, half, -1, -1))
        self.written_records = 0
        self.written_bytes = 0
        self.failed_records = 0

    # -- handing records to the writer -----------------------------------------------------

    def open(self) -> None:
        self._add(kinds.SERVER_STARTED, self.server)
        self._schedule()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._add(kinds.SERVER_STOPPED, self.server)
        self.flush()
        files = self.files
        self.worker.submit(files.close, lambda _: None, self._close_failed)

    def _schedule(self) -> None:
        self._timer = self.runtime.call_later(self.settings.flushinterval, self._tick)

    def _tick(self) -> None:
        self.flush()
        self._schedule()

    def flush(self) -> None:
        count = self._recorder.lines
        if not count:
            return
        data = self._recorder.take()
        self.backlog.add(count, 0)
        files = self.files
        self.worker.submit(
            lambda: files.write(data),
            lambda written: self._written(count, written),
            lambda error: self._failed(count, error),
        )

    def _written(self, count: int, nbytes: int) -> None:
        self.backlog.remove(count, 0)
        self.written_records += count
        self.written_bytes += nbytes

    def _failed(self, count: int, error: Exception) -> None:
        self.backlog.remove(count, 0)
        if not self.failed_records:
            log.error("journal.write_failed", records=count, error=str(error))
        self.failed_records += count

    def _close_failed(self, error: Exception) -> None:
        log.error("journal.close_failed", error=str(error))

    def statistics(self) -> dict[str, int]:
        return {
            "records_written": self.written_records,
            "bytes_written": self.written_bytes,
            "records_lost": self.failed_records,
            "records_waiting": self.backlog.gauge.messages + self._recorder.lines,
        }

    # -- the hooks -------------------------------------------------------------------------

    def received(self, messages: Sequence[Message]) -> None:
        self._add(_RECEIVED, messages)

    def refused(self, message: Message, reason: str) -> None:
        self._add(kinds.REFUSED, (message,), reason)

    def discarded(self, messages: Sequence[Message], reason: str) -> None:
        self._add(kinds.DISCARDED, messages, reason)

    def stored(self, messages: Sequence[Message]) -> None:
        kept = [m for m in messages if m.store_seq]  # not: topic messages no one keeps
        for store, group in _by_store(kept).items():
            self._add(kinds.STORED, group, store)

    def delivered(self, subscription: JournaledSubscription, message: Message) -> None:
        self._add(_REDELIVERED if message.redelivered else _DELIVERED, subscription, message)

    def consumed(self, subscription: JournaledSubscription, messages: Sequence[Message]) -> None:
        self._add(_CONSUMED, subscription, messages)

    def _unwritten(self, subscription: JournaledSubscription, messages: Sequence[Message]) -> None:
        """An auto-mode subscription's deliveries leave unwritten: their delivery, not
        recorded when they were handed over, is recorded now."""
        if subscription.unacked is None:
            for message in messages:
                self.delivered(subscription, message)

    def acknowledgement(
        self,
        subscription: JournaledSubscription,
        messages: Sequence[Message],
        nack: bool,
        requeue: bool,
    ) -> None:
        if nack:
            self._add(kinds.NACKED, subscription, messages, requeue)
        else:
            self._add(kinds.ACKNOWLEDGED, subscription, messages)

    def unacknowledged(
        self, subscription: JournaledSubscription, messages: Sequence[Message]
    ) -> None:
        self._add(kinds.UNACKNOWLEDGED, subscription, messages, TRANSACTION_FAILED)

    def ended(self, subscription: JournaledSubscription, messages: Sequence[Message]) -> None:
        if not messages:
            return
        self._unwritten(subscription, messages)
        back = list(messages)
        lost: list[Message] = []
        if not subscription.destination.name.startswith(QUEUE_PREFIX):
            durable = subscription.durable_key is not None
            back = [m for m in messages if durable and m.store_seq]
            lost = [m for m in messages if not (durable and m.store_seq)]
        if back:
            self._add(kinds.REQUEUED, subscription, back, SUBSCRIBER_LEFT)
        if lost:
            self._add(kinds.DISCARDED_FOR, subscription, lost, SUBSCRIBER_LEFT)

    def discarded_for(
        self, subscription: JournaledSubscription, messages: Sequence[Message], reason: str
    ) -> None:
        self._add(kinds.DISCARDED_FOR, subscription, messages, reason)

    def egress_discarded(self, subscription: JournaledSubscription, message: Message) -> None:
        self._unwritten(subscription, (message,))
        self._add(kinds.DISCARDED_FOR, subscription, (message,), EGRESS_DISCARD_OLDEST)

    def subscription_removed(self, topic: str, key: SubscriptionKey) -> None:
        self._add(kinds.SUBSCRIPTION_REMOVED, topic, f"{key[0]}/{key[1]}")

    def operator_discarded(
        self,
        messages: Sequence[Message],
        stored: Sequence[tuple[Position, StoredMessage]],
        reason: str,
    ) -> None:
        self._held_and_read(kinds.DISCARDED, kinds.DISCARDED_STORED, messages, stored, reason)

    def operator_moved(
        self,
        messages: Sequence[Message],
        stored: Sequence[tuple[Position, StoredMessage]],
        to: str,
    ) -> None:
        self._held_and_read(kinds.MOVED, kinds.MOVED_STORED, messages, stored, to)

    def _held_and_read(
        self,
        held_kind: int,
        read_kind: int,
        messages: Sequence[Message],
        stored: Sequence[tuple[Position, StoredMessage]],
        value: str,
    ) -> None:
        """One event of messages held in memory and of messages read from the store."""
        if messages:
            self._add(held_kind, messages, value)
        if stored:
            self._add(read_kind, stored, value)

    def expired(self, destination: str, messages: Sequence[Message], dmq: str | None) -> None:
        store = VOLQUEUE if destination.startswith(QUEUE_PREFIX) else None
        run = self._sweep if store is not None else None
        run_id = run.run_id if run is not None else None
        self._add(kinds.EXPIRED, messages, store, dmq, run_id)
        if run is not None:
            run.removed += len(messages)
            self._add(kinds.REMOVED, messages, store, run_id)

    def dead_lettered(self, messages: Sequence[Message], dmq: str, reason: str) -> None:
        self._add(kinds.DEAD_LETTERED, messages, dmq, reason)

    def expired_stored(
        self,
        transaction: StoreTransaction,
        found: Sequence[tuple[Position, StoredMessage]],
        result: Committed,
        run: CleanupRun | None,
    ) -> None:
        run_id = run.run_id if run is not None else None
        by_position = dict(found)
        removed = set(result.removed)
        # (dmq or None, (position, message)) for every message the transaction took out
        gone = [(None, item) for item in found if item[0] in removed]
        gone += [
            (copy.destination, (position, by_position[position]))
            for (position, copy), seq in zip(transaction.moves, result.moved, strict=True)
            if seq is not None and position in by_position
        ]
        groups: dict[tuple[str, str | None], list[tuple[Position, StoredMessage]]] = {}
        for dmq, item in gone:
            groups.setdefault((store_of(item[0][0]), dmq), []).append(item)
        for (store, dmq), items in groups.items():
            self._add(kinds.EXPIRED_STORED, items, store, dmq, run_id)
            if run is not None:
                self._add(kinds.REMOVED_STORED, items, store, run_id)
            if dmq is not None:
                self._add(kinds.DEAD_LETTERED_STORED, items, dmq, EXPIRED)
        if run is not None:
            run.removed += len(gone)

    def cleanup_started(self, store: str, settings: StoreSettings) -> CleanupRun:
        run = self._new_run(store)
        self._add(
            kinds.CLEANUP_STARTED,
            store,
            run.run_id,
            round(settings.cleanupinterval * 1000),
            round(settings.cleanuptransactiontime * 1000),
            settings.cleanuptransactionsize,
        )
        return run

    def cleanup_ended(self, run: CleanupRun) -> None:
        self._add(kinds.CLEANUP_ENDED, run.store, run.run_id, run.scanned, run.removed)

    def sweep_started(self, store: str, interval: float) -> CleanupRun:
        run = self._new_run(store)
        self._add(kinds.CLEANUP_STARTED, store, run.run_id, round(interval * 1000), None, None)
        return run

    @contextmanager
    def sweeping(self, run: CleanupRun) -> Iterator[CleanupRun]:
        self._sweep = run
        try:
            yield run
        finally:
            self._sweep = None


def _by_store(messages: Sequence[Message]) -> dict[str, Sequence[Message]]:
    """Messages by the store they are in (a committed transaction may span both)."""
    stores = {store_of(m.destination) for m in messages}
    if len(stores) <= 1:
        return {stores.pop(): messages} if stores else {}
    return {store: [m for m in messages if store_of(m.destination) == store] for store in stores}


def destination_switch(settings: Settings) -> DestinationSwitch:
    """Which destinations are journaled (``Destination.journal`` and its overrides)."""
    default = DestinationPolicy.read(settings, DESTINATION_GROUP).journal
    exceptions = frozenset(
        name
        for name in settings.destinations
        if DestinationPolicy.for_destination(settings, name).journal != default
    )
    return DestinationSwitch(default, exceptions)
