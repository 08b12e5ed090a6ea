"""The shape in which a message is handed to and read back from a store.

Stores never see the server's in-memory ``Message`` (which carries pre-encoded
wire bytes and delivery state); they keep only what must survive a restart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

JMS_DEFAULT_PRIORITY = 4  # a message without a priority header has JMS's default priority


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One message as a store keeps it."""

    message_id: str
    destination: str  # full STOMP destination, e.g. "/queue/orders"
    headers: tuple[tuple[str, str], ...]  # user headers, in arrival order, unescaped
    body: bytes
    priority: int = JMS_DEFAULT_PRIORITY  # 0..9
    expires: int = 0  # ms since epoch; 0 = never
    timestamp: int = 0  # ms since epoch when the server received it
    # Bytes counted against watermarks: body plus header text (derived, not stored).
    size: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        size = len(self.body) + sum(len(k) + len(v) + 2 for k, v in self.headers)
        object.__setattr__(self, "size", size)

    def fields(self) -> tuple[object, ...]:
        """The stored fields in declaration order: ``StoredMessage(*m.fields())`` rebuilds ``m``."""
        return (
            self.message_id,
            self.destination,
            self.headers,
            self.body,
            self.priority,
            self.expires,
            self.timestamp,
        )

    def expired(self, now_ms: int) -> bool:
        return self.expires != 0 and self.expires <= now_ms
