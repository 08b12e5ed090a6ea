"""A message's copy for another destination: dead-lettered, moved or copied by an operator,
or sent back from a dead message queue. One rule for what the copy carries.

The copy keeps the message's id, body, priority and time of arrival, and the
headers its maker gives (``dead_headers``, ``moved_headers``). Its expiry:

- A moved or copied message keeps its own expiry (the producer's time to live
  is a property of the message: ActiveMQ's move and copy keep JMSExpiration,
  a RabbitMQ shovel keeps ``expiration``), capped by the target's ``maxttl``
  counted from the copy, as a message sent there would be.
- A dead-lettered message loses its own (the dead message queue keeps it for
  the operator: ActiveMQ's dead letter strategy sets the expiration to 0 by
  default, RabbitMQ removes ``expiration`` when it dead-letters); only the dead
  message queue's own ``maxttl`` applies, from the time it died.

The stored copy and the one that goes down the target's pipeline are the same
content, ``expires`` header included, so that admission keeps its expiry and a
restart reads back what was delivered before it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from wiremq.config.groups import DestinationPolicy
from wiremq.config.settings import Settings
from wiremq.modules.destinations.ttl import capped_expiry
from wiremq.modules.message import Message
from wiremq.stores.records import StoredMessage

EXPIRES = "expires"
PERSISTENT = "persistent"


class Copier:
    """Makes copies (see the module docstring) with each target's ``maxttl``, now."""

    def __init__(self, settings: Settings, now_ms: Callable[[], int]) -> None:
        self.settings = settings
        self.now_ms = now_ms

    def copy(
        self,
        content: StoredMessage,
        to: str,
        headers: Iterable[tuple[str, str]],
        *,
        dead: bool,
        persistent: bool,
    ) -> StoredMessage:
        """The copy of ``content`` for ``to`` with ``headers``; ``dead``: a dead-lettered
        copy (its own expiry is dropped); ``persistent``: whether it is stored there."""
        max_ttl = DestinationPolicy.for_destination(self.settings, to).maxttl
        expires = capped_expiry(0 if dead else content.expires, self.now_ms(), max_ttl)
        copied = dict(headers)
        if expires:
            copied[EXPIRES] = str(expires)
        else:
            copied.pop(EXPIRES, None)
        if persistent:
            copied[PERSISTENT] = "true"
        else:
            copied.pop(PERSISTENT, None)
        return StoredMessage(
            content.message_id,
            to,
            tuple(copied.items()),
            content.body,
            priority=content.priority,
            expires=expires,
            timestamp=content.timestamp,
        )


def sent_copy(copy: StoredMessage, seq: int = 0) -> Message:
    """The message that goes down its destination's pipeline for ``copy``: stored at
    ``seq`` already (by the move that made it), or to be stored there if persistent."""
    if seq:
        return Message.from_stored(copy, seq)
    return Message(
        copy.message_id,
        copy.destination,
        dict(copy.headers),
        copy.body,
        expires=copy.expires,
        timestamp=copy.timestamp,
    )
