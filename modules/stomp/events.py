"""What a STOMP session hands out (client requests) and takes in (server replies).

``StompSession.receive_data`` turns bytes into the request events below, each
checked for what its command and protocol version require; the connection
acts on them and answers with ``StompSession.send(reply) -> bytes``. Events are
NamedTuples rather than frozen dataclasses: one is built for every frame on
the hot path, and tuple construction is several times cheaper.
"""

from __future__ import annotations

from typing import NamedTuple

from wiremq.modules.stomp.frames import ProtocolError

# -- requests (client -> server) ------------------------------------------------------


class Connect(NamedTuple):
    """CONNECT or STOMP; the session has negotiated the version and heart-beats."""

    headers: dict[str, str]


class Send(NamedTuple):
    destination: str
    headers: dict[str, str]  # as sent, ``receipt`` and ``transaction`` included
    body: bytes


class Subscribe(NamedTuple):
    sub_id: str
    destination: str
    ack: str  # auto, client or client-individual
    headers: dict[str, str]


class Unsubscribe(NamedTuple):
    sub_id: str
    headers: dict[str, str]


class Acknowledge(NamedTuple):
    """ACK or NACK of one delivery.

    ``message_id`` and ``subscription`` name the delivery as the version does:
    in 1.2 the MESSAGE's ``ack`` value is split at its last ``@`` into the
    message id and the subscription's number; in 1.0/1.1 they are the
    ``message-id`` and (optional in 1.0) ``subscription`` headers.
    """

    nack: bool
    message_id: str
    subscription: str | None
    headers: dict[str, str]


class Begin(NamedTuple):
    transaction: str
    headers: dict[str, str]


class Commit(NamedTuple):
    transaction: str
    headers: dict[str, str]


class Abort(NamedTuple):
    transaction: str
    headers: dict[str, str]


class Recover(NamedTuple):
    """RECOVER (wiremq's XA extension): which XA branches are prepared."""

    headers: dict[str, str]


class Disconnect(NamedTuple):
    headers: dict[str, str]


class BadInput(NamedTuple):
    """The client broke the protocol: nothing more is read from it. Always the last event."""

    error: ProtocolError


Request = (
    Connect
    | Send
    | Subscribe
    | Unsubscribe
    | Acknowledge
    | Begin
    | Commit
    | Abort
    | Recover
    | Disconnect
    | BadInput
)

# -- replies (server -> client) -------------------------------------------------------


class Connected(NamedTuple):
    """Accept the CONNECT; the session fills in the version and heart-beats it negotiated."""


class Receipt(NamedTuple):
    receipt_id: str


class Recovered(NamedTuple):
    """RECOVER's answer: a RECEIPT listing the prepared XIDs (``xa-count``, ``xids``)."""

    receipt_id: str
    xids: list[str]


class Error(NamedTuple):
    """The last frame of a connection: nothing is sent after it."""

    message: str
    detail: str
    receipt_id: str | None


class TransactionError(NamedTuple):
    """An ERROR naming a transaction the server discarded, sent at once; unlike ``Error``
    the connection stays open (wiremq's extension: the transaction's COMMIT fails with
    the same ERROR, which then ends the connection)."""

    transaction: str
    message: str
    detail: str


class SubscriptionError(NamedTuple):
    """An ERROR naming a subscription the server ended (its client lost the read
    permission on its destination), sent at once; the connection stays open, like after a
    ``TransactionError``."""

    subscription: str
    destination: str
    message: str
    detail: str


class Heartbeat(NamedTuple):
    pass


Reply = Connected | Receipt | Recovered | Error | TransactionError | SubscriptionError | Heartbeat
