"""STOMP frames and the one error type the codec and session raise.

A frame is a NamedTuple rather than a frozen dataclass: it is built once per
frame on the hot path, and tuple construction is several times cheaper.
"""

from __future__ import annotations

from typing import NamedTuple

VERSIONS = ("1.0", "1.1", "1.2")

CLIENT_COMMANDS = frozenset(
    {
        "CONNECT",
        "STOMP",
        "SEND",
        "SUBSCRIBE",
        "UNSUBSCRIBE",
        "ACK",
        "NACK",
        "BEGIN",
        "COMMIT",
        "ABORT",
        "DISCONNECT",
    }
)


class Frame(NamedTuple):
    """One decoded frame. Header names are case-sensitive; the first of a repeated header wins."""

    command: str
    headers: dict[str, str]
    body: bytes = b""


class ProtocolError(Exception):
    """A client broke the protocol; the text becomes the ERROR frame's ``message`` header.

    ``detail`` goes into the ERROR body; ``receipt_id`` names the receipt of the
    frame that failed, so the client can tell which request was refused.
    """

    def __init__(self, message: str, detail: str = "", receipt_id: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        self.receipt_id = receipt_id
