"""Message expiry: what happens to expired messages.

A message's expiry is the publisher's ``expires`` header (ms since the epoch,
0 = never) capped by its destination's ``maxttl``: the smaller wins (``ttl.py``). An expired
message is never delivered; it is discarded or moved to the destination's dead
message queue (``expiredmessages`` / ``deadmessagequeue``) by ``deadletter.py``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import structlog

from wiremq.config.groups import DestinationPolicy
from wiremq.config.settings import Settings
from wiremq.modules.destinations.deadletter import EXPIRED, DeadLetters
from wiremq.modules.destinations.fates import FateCounts
from wiremq.modules.journal.recorder import CleanupRun, Journal
from wiremq.modules.message import Message
from wiremq.stores.api import Committed, Position, StoreTransaction
from wiremq.stores.model import grouped
from wiremq.stores.records import StoredMessage

log = structlog.get_logger("wiremq.expiry")


class Expiry:
    """Discards expired messages or moves them to a dead message queue, per destination."""

    def __init__(
        self, settings: Settings, dead_letters: DeadLetters, journal: Journal, fates: FateCounts
    ) -> None:
        self.settings = settings
        self.dead_letters = dead_letters
        self.journal = journal
        self.fates = fates

    def _dead_message_queue(self, destination: str) -> str | None:
        """Where expired messages of ``destination`` go, or None when they are discarded."""
        policy = DestinationPolicy.for_destination(self.settings, destination)
        if policy.expiredmessages != "deadmessagequeue":
            return None
        return self.dead_letters.queue_of(destination)

    def expired(self, destination: str, messages: list[Message]) -> None:
        """Expired messages held in memory only (non-persistent): logged, then discarded or
        copied to the dead message queue."""
        if not messages:
            return
        dmq = self._dead_message_queue(destination)
        self._log(destination, [m.message_id for m in messages], dmq)
        self.journal.expired(destination, messages, dmq)
        self.fates.count(destination, "expired", len(messages))
        if dmq is not None:
            self.dead_letters.move(destination, messages, EXPIRED)

    def expired_stored(
        self,
        found: list[tuple[Position, StoredMessage]],
        then: Callable[[], None] = lambda: None,
        run: CleanupRun | None = None,
    ) -> None:
        """Expired messages in the store: removed, and moved to their destinations' dead
        message queues where configured, in one store transaction; ``then`` after it.
        ``run``: the cleanup run that found them."""
        removals: list[Position] = []
        moves: list[tuple[Position, StoredMessage]] = []
        for destination, entries in grouped((p[0], (p, m)) for p, m in found).items():
            dmq = self._dead_message_queue(destination)
            self._log(destination, [m.message_id for _, m in entries], dmq)
            if dmq is None:
                removals += [position for position, _ in entries]
            else:
                moves += [
                    (position, self.dead_letters.dead_copy(m, dmq, EXPIRED))
                    for position, m in entries
                ]

        def committed(transaction: StoreTransaction, result: Committed) -> None:
            self.journal.expired_stored(transaction, found, result, run)
            removed = set(result.removed)
            gone = [position for position, _ in found if position in removed]
            gone += [
                position
                for (position, _), seq in zip(transaction.moves, result.moved, strict=True)
                if seq is not None
            ]
            for name, count in Counter(position[0] for position in gone).items():
                self.fates.count(name, "expired", count)

        self.dead_letters.commit(removals, moves, then, committed)

    @staticmethod
    def _log(destination: str, message_ids: list[str], dmq: str | None) -> None:
        log.info(
            "message.expired",
            destination=destination,
            count=len(message_ids),
            action="moved to " + dmq if dmq else "discarded",
            message_ids=message_ids[:20],
        )
