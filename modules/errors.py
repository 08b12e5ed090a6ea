"""The domain's refusal: the server will not do what a client asked.

A ``ProtocolError`` says the client broke STOMP; a ``Refused`` says a valid
request cannot be served (an unknown transaction, a full spool, a destination
that does not take the message...). The connection turns either into an
ERROR frame naming the request's receipt.
"""

from __future__ import annotations


class Refused(Exception):
    """A request the server will not serve; ``message`` is short, ``detail`` says why."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
