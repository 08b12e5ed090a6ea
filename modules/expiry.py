"""Message expiry: the effective expiry time, and what happens to expired messages.

A message's expiry is the publisher's ``expires`` header (ms since the epoch,
0 = never) capped by its destination's ``maxttl``: the smaller wins. An expired
message is never delivered; it is discarded or moved to the destination's dead
message queue (``expiredmessages`` / ``deadmessagequeue``), carrying its origin
destination and the reason in the headers ``original-destination`` and
``dead-reason``. A stored message is moved in one store transaction (removed
from its destination, appended to the dead message queue), so that a crash or
a refusal never leaves it in neither place; the copy then goes down the
pipeline like any message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import structlog

from wiremq.config.groups import DestinationPolicy
from wiremq.config.settings import Settings
from wiremq.modules.destination import domain_of
from wiremq.modules.errors import Refused
from wiremq.modules.journal.recorder import CleanupRun, Journal
from wiremq.modules.message import Message
from wiremq.modules.persistence import Persistence
from wiremq.modules.pipeline import Batch
from wiremq.stores.api import Committed, Position, StoreTransaction
from wiremq.stores.model import grouped
from wiremq.stores.records import StoredMessage

log = structlog.get_logger("wiremq.expiry")

EXPIRED = "expired"


def effective_expiry(header: str | None, now_ms: int, max_ttl: int) -> int:
    """The expiry to apply, from the ``expires`` header and the destination's max TTL."""
    expires = 0
    if header is not None and header != "0":
        if not (header.isascii() and header.isdigit()):
            raise Refused(
                "invalid expires header",
                f"expires {header[:64]!r} is not milliseconds since the epoch",
            )
        expires = int(header)
    if max_ttl:
        cap = now_ms + max_ttl
        if not expires or cap < expires:
            expires = cap
    return expires


class Expiry:
    """Discards expired messages or moves them to a dead message queue, per destination."""

    def __init__(
        self,
        settings: Settings,
        persistence: Persistence | None,
        submit: Callable[[str, Batch], None],
        journal: Journal,
    ) -> None:
        """``submit(domain, batch)`` starts messages down a pipeline."""
        self.settings = settings
        self.persistence = persistence
        self.submit = submit
        self.journal = journal

    def _dead_message_queue(self, destination: str) -> str | None:
        """Where expired messages of ``destination`` go, or None when they are discarded."""
        policy = DestinationPolicy.for_destination(self.settings, destination)
        dmq = policy.deadmessagequeue
        if policy.expiredmessages != "deadmessagequeue" or destination == dmq:
            return None
        return dmq

    def expired(self, destination: str, messages: list[Message]) -> None:
        """Expired messages held in memory only (non-persistent): logged, then discarded or
        copied to the dead message queue."""
        if not messages:
            return
        dmq = self._dead_message_queue(destination)
        self._log(destination, [m.message_id for m in messages], dmq)
        self.journal.expired(destination, messages, dmq)
        if dmq is None:
            return
        copies = [
            Message(m.message_id, dmq, _dead_headers(m.user_headers, destination, False), m.body)
            for m in messages
        ]
        self._forward(dmq, copies)

    def expired_stored(
        self,
        found: list[tuple[Position, StoredMessage]],
        then: Callable[[], None] = lambda: None,
        run: CleanupRun | None = None,
    ) -> None:
        """Expired messages in the store: removed, and moved to their destinations' dead
        message queues where configured, in one store transaction; ``then`` after it.
        ``run``: the cleanup run that found them."""
        persistence = self.persistence
        if not found or persistence is None:
            then()
            return
        removals: list[Position] = []
        moves: list[tuple[Position, StoredMessage]] = []
        for destination, entries in grouped((p[0], (p, m)) for p, m in found).items():
            dmq = self._dead_message_queue(destination)
            self._log(destination, [m.message_id for _, m in entries], dmq)
            if dmq is None:
                removals += [position for position, _ in entries]
            else:
                moves += [(position, _dead_copy(m, dmq)) for position, m in entries]
        transaction = StoreTransaction(removals=tuple(removals), moves=tuple(moves))

        def moved(result: Committed) -> None:
            self.journal.expired_stored(transaction, found, result, run)
            copies = [
                Message.from_stored(copy, seq)
                for (_, copy), seq in zip(moves, result.moved, strict=True)
                if seq is not None  # None: gone meanwhile (acknowledged), nothing moved
            ]
            self.journal.stored(copies)
            for dmq, batch in grouped((m.destination, m) for m in copies).items():
                self._forward(dmq, batch)
            then()

        def failed(error: Exception) -> None:
            log.error("expiry.move_failed", messages=len(found), error=str(error))
            then()

        persistence.commit(transaction, moved, failed)

    def _forward(self, dmq: str, copies: list[Message]) -> None:
        domain = domain_of(dmq)
        if domain is None:
            log.error("expiry.bad_dead_message_queue", destination=dmq)
            return
        self.submit(domain, copies)

    @staticmethod
    def _log(destination: str, message_ids: list[str], dmq: str | None) -> None:
        log.info(
            "message.expired",
            destination=destination,
            count=len(message_ids),
            action="moved to " + dmq if dmq else "discarded",
            message_ids=message_ids[:20],
        )


def _dead_headers(
    headers: Iterable[tuple[str, str]], destination: str, persistent: bool
) -> dict[str, str]:
    """A dead copy's headers: the original's, without ``expires``, plus where it came from."""
    copied = {k: v for k, v in headers if k != "expires"}
    copied["original-destination"] = destination
    copied["dead-reason"] = EXPIRED
    if persistent:
        copied["persistent"] = "true"
    return copied


def _dead_copy(stored: StoredMessage, dmq: str) -> StoredMessage:
    headers = _dead_headers(stored.headers, stored.destination, True)
    return StoredMessage(
        stored.message_id,
        dmq,
        tuple(headers.items()),
        stored.body,
        priority=stored.priority,
        timestamp=stored.timestamp,
    )
