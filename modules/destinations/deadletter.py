"""The dead message queue: where messages go that will not be delivered from their destination.

A message is moved to its destination's dead message queue (the
``deadmessagequeue`` parameter, ``/queue/DMQ`` by default) when it expired
(if ``expiredmessages`` says so: ``expiry.py``), when it was delivered more
than ``maxredeliveries`` times without being acknowledged, or when a
consumer NACKed it with ``requeue:false``. The copy carries
``original-destination``, ``dead-reason`` and, once it had been delivered,
``dead-delivery-count`` (how many times: a message counts a delivery when it
comes back unacknowledged, ``Message.redeliveries``); it has no expiry of its
own (``copies.py``: only the dead message queue's ``maxttl`` applies). A stored
message is moved in one store transaction (removed from its destination,
appended to the dead message queue), so that a crash never leaves it in neither
place nor in both; the copy then goes down the pipeline like any message. A
message of the dead message queue itself that dies is dropped (logged).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import structlog

from wiremq.config.groups import DestinationPolicy
from wiremq.config.settings import Settings
from wiremq.modules.destinations.copies import Copier, sent_copy
from wiremq.modules.destinations.fates import FateCounts
from wiremq.modules.domains import domain_of
from wiremq.modules.journal.recorder import Journal
from wiremq.modules.message import DELIVERY_COUNT, Batch, Message
from wiremq.modules.persistence.store import Persistence
from wiremq.stores.api import Committed, Position, StoreTransaction
from wiremq.stores.model import grouped
from wiremq.stores.records import StoredMessage

log = structlog.get_logger("wiremq.deadletter")

ORIGINAL_DESTINATION = "original-destination"
DEAD_REASON = "dead-reason"
DEAD_DELIVERY_COUNT = "dead-delivery-count"
DEAD_HEADERS = (ORIGINAL_DESTINATION, DEAD_REASON, DEAD_DELIVERY_COUNT)  # what made it dead
# dead-reason values
EXPIRED = "expired"
REDELIVERY_LIMIT = "redelivery limit"
REJECTED = "rejected"


class DeadLetters:
    """Moves messages to dead message queues (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        persistence: Persistence | None,
        submit: Callable[[str, Batch], None],
        journal: Journal,
        copier: Copier,
        fates: FateCounts,
    ) -> None:
        """``submit(domain, batch)`` starts messages down a pipeline; ``journal`` records the
        moves (dead-lettered, the copies stored) and the messages dropped; ``copier`` makes
        the dead copies."""
        self.settings = settings
        self.persistence = persistence
        self.submit = submit
        self.journal = journal
        self.copier = copier
        self.fates = fates

    def queue_of(self, destination: str) -> str | None:
        """The dead message queue of ``destination``; None for that queue itself."""
        dmq = DestinationPolicy.for_destination(self.settings, destination).deadmessagequeue
        return None if destination == dmq else dmq

    def move(
        self, destination: str, messages: list[Message], reason: str, shared: bool = False
    ) -> None:
        """Messages of ``destination`` held in memory that will not be delivered from it:
        copied to its dead message queue (a stored one moved in the store), or dropped
        if it is that queue. A ``shared`` message (a topic's, that other subscribers keep)
        stays where it is stored; its copy is stored anew if it is persistent."""
        if not messages:
            return
        dmq = self.queue_of(destination)
        log.info(
            "message.dead",
            destination=destination,
            reason=reason,
            count=len(messages),
            action="moved to " + dmq if dmq else "dropped",
            message_ids=[m.message_id for m in messages[:20]],
        )
        stored = [] if shared else [m for m in messages if m.store_seq]
        if reason != EXPIRED:  # an expired one's fate is its expiry (counted there)
            fate = "discarded" if dmq is None else "dead_lettered"
            self.fates.count(destination, fate, len(messages))
        if dmq is None:
            if reason != EXPIRED:
                self.journal.discarded(messages, reason)
            if stored and self.persistence is not None:
                self.persistence.forget(stored)
            return
        volatile = [
            sent_copy(
                self.copier.copy(
                    m.to_stored(m.timestamp),
                    dmq,
                    dead_headers(m.user_headers, destination, reason, m),
                    dead=True,
                    persistent=m.persistent,
                )
            )
            for m in messages
            if shared or not m.store_seq
        ]
        self.journal.dead_lettered(messages, dmq, reason)
        if volatile:
            self._forward(dmq, volatile)
        if stored:
            moves = [
                (
                    (destination, m.store_seq),
                    self.dead_copy(m.to_stored(m.timestamp), dmq, reason, m),
                )
                for m in stored
            ]
            self.commit([], moves)

    def commit(
        self,
        removals: list[Position],
        moves: list[tuple[Position, StoredMessage]],
        then: Callable[[], None] = lambda: None,
        committed: Callable[[StoreTransaction, Committed], None] | None = None,
    ) -> None:
        """Remove stored messages and move others to dead message queues, in one store
        transaction; ``committed(transaction, result)`` hears how it went, the moved copies
        then go down the pipeline, and ``then`` runs."""
        persistence = self.persistence
        if persistence is None or not (removals or moves):
            then()
            return

        def moved(result: Committed) -> None:
            if committed is not None:
                committed(transaction, result)
            copies = [
                sent_copy(copy, seq)
                for (_, copy), seq in zip(moves, result.moved, strict=True)
                if seq is not None  # None: gone meanwhile (acknowledged), nothing moved
            ]
            self.journal.stored(copies)
            for dmq, batch in grouped((m.destination, m) for m in copies).items():
                self._forward(dmq, batch)
            then()

        def failed(error: Exception) -> None:
            log.error(
                "deadletter.move_failed", messages=len(removals) + len(moves), error=str(error)
            )
            then()

        transaction = StoreTransaction(removals=tuple(removals), moves=tuple(moves))
        persistence.commit(transaction, moved, failed)

    def dead_copy(
        self, stored: StoredMessage, dmq: str, reason: str, message: Message | None = None
    ) -> StoredMessage:
        """The copy of a stored message its dead message queue keeps (``message``: the
        message as it was held, which knows how often it was delivered)."""
        headers = dead_headers(stored.headers, stored.destination, reason, message)
        return self.copier.copy(stored, dmq, headers, dead=True, persistent=True)

    def _forward(self, dmq: str, copies: list[Message]) -> None:
        domain = domain_of(dmq)
        if domain is None:
            log.error("deadletter.bad_dead_message_queue", destination=dmq)
            return
        self.submit(domain, copies)


def dead_headers(
    headers: Iterable[tuple[str, str]],
    destination: str,
    reason: str,
    message: Message | StoredMessage | None = None,
) -> dict[str, str]:
    """A dead copy's headers: the original's (a count of deliveries starts afresh), plus
    where it came from, why, and how many times it was delivered."""
    copied = {k: v for k, v in headers if k != DELIVERY_COUNT}
    copied[ORIGINAL_DESTINATION] = destination
    copied[DEAD_REASON] = reason
    deliveries = message.redeliveries if isinstance(message, Message) else 0
    if deliveries:
        copied[DEAD_DELIVERY_COUNT] = str(deliveries)
    return copied
