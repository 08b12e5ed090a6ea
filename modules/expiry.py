"""Message expiry: the effective expiry time, and what happens to expired messages.

A message's expiry is the publisher's ``expires`` header (ms since the epoch,
0 = never) capped by its destination's ``maxttl``: the smaller wins. An expired
message is never delivered; it is discarded or moved to the destination's dead
message queue (``expiredmessages`` / ``deadmessagequeue``), carrying its origin
destination and the reason in the headers ``original-destination`` and
``dead-reason``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import structlog

from wiremq.modules.message import Message
from wiremq.modules.stomp.frames import ProtocolError
from wiremq.stores.records import StoredMessage

if TYPE_CHECKING:
    from wiremq.modules.broker import Broker

log = structlog.get_logger("wiremq.expiry")


def effective_expiry(header: str | None, now_ms: int, max_ttl: int) -> int:
    """The expiry to apply, from the ``expires`` header and the destination's max TTL."""
    expires = 0
    if header is not None and header != "0":
        if not (header.isascii() and header.isdigit()):
            raise ProtocolError(
                "invalid expires header",
                f"expires {header[:64]!r} is not milliseconds since the epoch",
            )
        expires = int(header)
    if max_ttl:
        cap = now_ms + max_ttl
        if not expires or cap < expires:
            expires = cap
    return expires


class ExpiryHandler:
    """Discards expired messages or moves them to a dead message queue, per destination."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def expired_stored(self, destination: str, stored: Iterable[StoredMessage]) -> None:
        """Messages a persistent store found expired (and removed): they are handled as
        any expired message, so they too reach the dead message queue if configured."""
        self.expired(destination, [Message.from_stored(m, 0) for m in stored])

    def expired(
        self, destination: str, messages: Iterable[Message], reason: str = "expired"
    ) -> None:
        """Log the expired ``messages`` of ``destination`` and discard them or move them
        to its dead message queue, as its ``expiredmessages`` setting says."""
        messages = list(messages)
        if not messages:
            return
        settings = self.broker.settings
        dmq = str(settings.for_destination(destination, "deadmessagequeue"))
        to_dmq = (
            settings.for_destination(destination, "expiredmessages") == "deadmessagequeue"
            and destination != dmq
        )
        log.info(
            "message.expired",
            destination=destination,
            count=len(messages),
            action="moved to " + dmq if to_dmq else "discarded",
            message_ids=[m.message_id for m in messages[:20]],
        )
        if not to_dmq:
            return
        target = self.broker.destination(dmq)
        for message in messages:
            headers = {k: v for k, v in message.user_headers if k != "expires"}
            headers["original-destination"] = destination
            headers["dead-reason"] = reason
            if message.persistent:
                headers["persistent"] = "true"
            dead = Message(message.message_id, dmq, headers, message.body)
            dead.target = target
            self.broker.submit(dead)
