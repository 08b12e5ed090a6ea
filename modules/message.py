"""A message inside the server: what the pipeline carries and destinations deliver.

The MESSAGE frame's bytes after the ``subscription`` line are the same for every
subscriber, so they are encoded once per message (per header-escaping flavour)
and shared by every delivery; a delivery only prepends its own short head.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from wiremq.modules.stomp.codec import escape

if TYPE_CHECKING:
    from collections.abc import Iterable

    from wiremq.modules.destinations import Destination

# Headers of a SEND that describe the SEND itself, not the message.
_FRAME_ONLY_HEADERS = frozenset(
    {"destination", "receipt", "transaction", "content-length", "message-id", "subscription", "ack"}
)
_SPECIAL = frozenset("\\\n:\r")


class MessageOrigin(Protocol):
    """The client connection a message came from, told when the pipeline is done with it."""

    def message_completed(self, message: Message) -> None: ...


class Message:
    """One message; immutable content, mutable delivery state (``redelivered``)."""

    __slots__ = (
        "message_id",
        "destination",
        "headers",
        "body",
        "persistent",
        "transaction",
        "receipt",
        "origin",
        "target",
        "size",
        "redelivered",
        "_wire",
    )

    def __init__(
        self,
        message_id: str,
        destination: str,
        headers: dict[str, str],
        body: bytes,
        *,
        receipt: str | None = None,
        transaction: str | None = None,
        origin: MessageOrigin | None = None,
    ) -> None:
        self.message_id = message_id
        self.destination = destination
        self.headers = headers  # as sent, including the frame-only ones
        self.body = body
        self.persistent = headers.get("persistent") == "true"
        self.receipt = receipt
        self.transaction = transaction
        self.origin = origin
        self.target: Destination | None = None  # resolved by the connection that received it
        self.size = len(body)
        self.redelivered = False
        self._wire: dict[str, bytes] = {}

    @property
    def user_headers(self) -> Iterable[tuple[str, str]]:
        """Headers passed on to consumers."""
        return ((k, v) for k, v in self.headers.items() if k not in _FRAME_ONLY_HEADERS)

    def wire_tail(self, flavour: str) -> bytes:
        """The MESSAGE frame after its subscription/ack lines, escaped for ``flavour``."""
        cached = self._wire.get(flavour)
        if cached is not None:
            return cached
        lines = [f"message-id:{self.message_id}"]
        if self.redelivered:
            lines.append("redelivered:true")
        for name, value in (("destination", self.destination), *self.user_headers):
            if _SPECIAL.isdisjoint(name) and _SPECIAL.isdisjoint(value):
                lines.append(f"{name}:{value}")
            else:
                lines.append(f"{escape(name, flavour)}:{escape(value, flavour)}")
        lines.append(f"content-length:{len(self.body)}\n\n")
        tail = "\n".join(lines).encode() + self.body + b"\0"
        self._wire[flavour] = tail
        return tail

    def mark_redelivered(self) -> None:
        """Flag the message for its next delivery; its cached wire form changes."""
        if not self.redelivered:
            self.redelivered = True
            self._wire.clear()

    def __repr__(self) -> str:
        return f"<Message {self.message_id} to {self.destination} ({self.size} B)>"
