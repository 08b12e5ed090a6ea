"""The broker side of one client connection: its subscriptions, acks and transactions.

It is the ``SessionHandler`` of the connection's STOMP session: the session
validates frames, this turns them into pipeline work.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import structlog

from wiremq.modules.broker import Broker
from wiremq.modules.egress import Egress
from wiremq.modules.message import Message
from wiremq.modules.stomp.frames import Frame, ProtocolError
from wiremq.modules.stomp.session import SessionSettings, StompSession
from wiremq.modules.subscription import Subscription

log = structlog.get_logger("wiremq.client")


class ClientConnection:
    """One connected client."""

    def __init__(
        self,
        broker: Broker,
        egress: Egress,
        clock: Callable[[], float],
        peer: str,
        settings: SessionSettings | None = None,
    ) -> None:
        self.broker = broker
        self.peer = peer
        self.egress = egress
        self.session = StompSession(self, egress, clock, broker.next_session_id(), settings)
        self.subscriptions: dict[str, Subscription] = {}
        self._by_number: dict[int, Subscription] = {}
        self._numbers = 0
        self.inflight = 0  # messages of this client still in the pipeline
        self._on_idle: Callable[[], None] | None = None
        broker.clients.add(self)

    # -- SessionHandler ----------------------------------------------------------------

    def on_connect(self, frame: Frame) -> None:
        log.info(
            "client.connected",
            session=self.session.session_id,
            peer=self.peer,
            login=frame.headers.get("login"),
        )

    def on_send(self, frame: Frame, destination: str) -> None:
        target = self.broker.destination(destination)
        headers = frame.headers
        transaction = headers.get("transaction")
        if transaction is not None:
            self.broker.transactions.check(self, transaction, target.domain)
        message = Message(
            self.broker.next_message_id(),
            destination,
            headers,
            frame.body,
            receipt=headers.get("receipt"),
            transaction=transaction,
            origin=self,
        )
        message.target = target
        self.inflight += 1
        self.broker.submit(message)

    def message_completed(self, message: Message) -> None:
        """The pipeline is done with a message this client sent."""
        self.inflight -= 1
        if message.receipt is not None:
            self.session.send_receipt(message.receipt)
        if not self.inflight and self._on_idle is not None:
            action, self._on_idle = self._on_idle, None
            action()

    def on_subscribe(self, frame: Frame, sub_id: str, destination: str, ack_mode: str) -> None:
        if sub_id in self.subscriptions:
            raise ProtocolError(
                "duplicate subscription", f"subscription id {sub_id!r} is already in use"
            )
        target = self.broker.destination(destination)
        self._numbers += 1
        version = self.session.version or "1.2"
        subscription = Subscription(sub_id, self._numbers, target, ack_mode, self.egress, version)
        self.subscriptions[sub_id] = subscription
        self._by_number[self._numbers] = subscription
        target.subscribe(subscription)

    def on_unsubscribe(self, frame: Frame, sub_id: str) -> None:
        subscription = self.subscriptions.pop(sub_id, None)
        if subscription is None:
            raise ProtocolError("unknown subscription", f"no subscription with id {sub_id!r}")
        del self._by_number[subscription.number]
        subscription.destination.unsubscribe(subscription)

    def on_ack(self, frame: Frame, nack: bool) -> None:
        subscription, message_id = self._find_delivery(frame)
        requeue = frame.headers.get("requeue", "true") != "false"
        action = partial(self._acknowledge, subscription, message_id, nack, requeue)
        transaction = frame.headers.get("transaction")
        if transaction is None:
            action()
        else:
            self.broker.transactions.check(self, transaction, subscription.destination.domain)
            self.broker.transactions.hold(self, transaction, action)

    def on_transaction(self, frame: Frame, transaction: str) -> None:
        manager = self.broker.transactions
        {"BEGIN": manager.begin, "COMMIT": manager.commit, "ABORT": manager.abort}[frame.command](
            self, transaction
        )

    def when_idle(self, action: Callable[[], None]) -> None:
        if self.inflight:
            self._on_idle = action
        else:
            action()

    # -- helpers -----------------------------------------------------------------------

    def _find_delivery(self, frame: Frame) -> tuple[Subscription, str]:
        """The subscription and message an ACK/NACK refers to, per protocol version."""
        headers = frame.headers
        candidates: list[Subscription]
        if self.session.version == "1.2":
            message_id, _, number = headers["id"].rpartition("@")
            found = self._by_number.get(int(number)) if number.isdigit() else None
            candidates = [found] if found is not None else []
        else:
            message_id = headers["message-id"]
            if "subscription" in headers:
                found = self.subscriptions.get(headers["subscription"])
                candidates = [found] if found is not None else []
            else:
                candidates = list(self.subscriptions.values())
        for subscription in candidates:
            if subscription.unacked is not None and message_id in subscription.unacked:
                return subscription, message_id
        raise ProtocolError(
            "unknown message",
            f"{frame.command} of {message_id!r}: no such message awaits acknowledgement "
            "on this connection",
        )

    def _acknowledge(
        self, subscription: Subscription, message_id: str, nack: bool, requeue: bool
    ) -> None:
        if subscription.unacked is None or message_id not in subscription.unacked:
            return  # already covered by an earlier cumulative ACK, or unsubscribed
        messages = subscription.take_acknowledged(message_id)
        if nack:
            subscription.destination.rejected(messages, requeue)

    def connection_lost(self) -> None:
        """The socket closed: give back unacknowledged messages and drop transactions."""
        for subscription in self.subscriptions.values():
            subscription.destination.unsubscribe(subscription)
        self.subscriptions.clear()
        self._by_number.clear()
        self.broker.transactions.abort_all(self)
        self.broker.clients.discard(self)
        log.info("client.disconnected", session=self.session.session_id, peer=self.peer)
