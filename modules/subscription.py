"""A consumer: one SUBSCRIBE of one connection, and the messages it has not acknowledged."""

from __future__ import annotations

from typing import TYPE_CHECKING

from wiremq.modules.egress import Egress
from wiremq.modules.message import Message
from wiremq.modules.stomp.codec import escape

if TYPE_CHECKING:
    from wiremq.modules.destinations import Destination


class Subscription:
    """Delivers messages to a client's egress and tracks them until acknowledged.

    In STOMP 1.2 the MESSAGE ``ack`` header is ``<message-id>@<number>``, where
    ``number`` identifies the subscription within its connection, so that an
    ACK names exactly one delivery even when two subscriptions of a connection
    receive the same topic message.
    """

    __slots__ = (
        "sub_id",
        "number",
        "destination",
        "ack_mode",
        "egress",
        "flavour",
        "head",
        "unacked",
        "ack_suffix",
        "durable_key",
        "replaying",
        "acked_position",
    )

    def __init__(
        self,
        sub_id: str,
        number: int,
        destination: Destination,
        ack_mode: str,
        egress: Egress,
        version: str,
        durable_key: tuple[str, str] | None = None,
    ) -> None:
        self.sub_id = sub_id
        self.number = number
        self.destination = destination
        self.ack_mode = ack_mode
        self.egress = egress
        self.flavour = version
        self.head = b"MESSAGE\nsubscription:" + escape(sub_id, version).encode() + b"\n"
        # Delivered and not yet acknowledged, in delivery order; None in auto mode.
        self.unacked: dict[str, Message] | None = None if ack_mode == "auto" else {}
        self.ack_suffix = (
            f"@{number}\n".encode() if version == "1.2" and ack_mode != "auto" else None
        )
        self.durable_key = durable_key  # (client id, name) of a durable topic subscription
        self.replaying = durable_key is not None  # catching up from the store first
        self.acked_position = 0  # a durable subscriber's acknowledged store position

    def deliver(self, message: Message) -> None:
        tail = message.wire_tail(self.flavour)
        unacked = self.unacked
        if unacked is None:
            self.egress.push_pair(self.head, tail)
            if message.store_seq:  # auto mode: taken is acknowledged
                self.destination.acknowledged(self, [message])
            return
        unacked[message.message_id] = message
        if self.ack_suffix is None:
            self.egress.push_pair(self.head, tail)
        else:
            ack = b"ack:" + message.message_id.encode() + self.ack_suffix
            self.egress.push_pair(self.head + ack, tail)

    def take_acknowledged(self, message_id: str) -> list[Message]:
        """Remove what an ACK/NACK of ``message_id`` covers (client mode: all up to it).

        The caller has checked that ``message_id`` is awaiting acknowledgement.
        """
        unacked = self.unacked
        assert unacked is not None
        if self.ack_mode == "client-individual":
            return [unacked.pop(message_id)]
        covered = []
        for key in unacked:
            covered.append(key)
            if key == message_id:
                break
        return [unacked.pop(key) for key in covered]

    def take_unacked(self) -> list[Message]:
        """Remove and return every unacknowledged message, oldest first."""
        if not self.unacked:
            return []
        messages = list(self.unacked.values())
        self.unacked.clear()
        return messages
