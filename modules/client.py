"""The broker side of one client connection: its subscriptions, acks and transactions.

It is the ``SessionHandler`` of the connection's STOMP session: the session
validates frames, this turns them into pipeline work. It counts the work of
this client still in progress (messages in the pipeline, acknowledgements not
yet committed to a store), so that DISCONNECT and ERROR wait for it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Protocol

import structlog

from wiremq.modules.broker import Broker
from wiremq.modules.destinations import Topic
from wiremq.modules.egress import Egress
from wiremq.modules.expiry import effective_expiry
from wiremq.modules.flow.egress_queues import Policy
from wiremq.modules.message import BY_CLASS_OF_SERVICE, CLASS_OF_SERVICE, Message
from wiremq.modules.stomp.frames import Frame, ProtocolError
from wiremq.modules.stomp.session import SessionSettings, StompSession
from wiremq.modules.subscription import Subscription

log = structlog.get_logger("wiremq.client")

DURABLE_NAME = "activemq.subscriptionName"
# SUBSCRIBE headers that set a consumer's window, in messages and in bytes.
WINDOW_MESSAGES = ("consumerQueueEntriesSize", "activemq.prefetchSize", "prefetch-count")
WINDOW_BYTES = ("consumerQueueEntriesBytes", "prefetch-bytes")


class ReadControl(Protocol):
    """Stops and restarts reading from the client's socket (its transport, in ``server/``)."""

    def pause(self) -> None: ...
    def resume(self) -> None: ...


class ClientConnection:
    """One connected client."""

    def __init__(
        self,
        broker: Broker,
        egress: Egress,
        clock: Callable[[], float],
        peer: str,
        settings: SessionSettings | None = None,
        reader: ReadControl | None = None,
    ) -> None:
        self.broker = broker
        self.reader = reader
        self.stops: set[object] = set()  # why reading is stopped (watermarks); empty = reading
        self.peer = peer
        self.egress = egress
        self.session = StompSession(self, egress, clock, broker.next_session_id(), settings)
        self.client_id = ""
        self.subscriptions: dict[str, Subscription] = {}
        self._by_number: dict[int, Subscription] = {}
        self._numbers = 0
        self.inflight = 0  # this client's work still in progress
        self._on_idle: Callable[[], None] | None = None
        broker.clients.add(self)

    # -- SessionHandler ----------------------------------------------------------------

    def on_connect(self, frame: Frame) -> None:
        self.client_id = frame.headers.get("client-id", "")
        log.info(
            "client.connected",
            session=self.session.session_id,
            peer=self.peer,
            login=frame.headers.get("login"),
            client_id=self.client_id or None,
        )

    def on_send(self, frame: Frame, destination: str) -> None:
        target = self.broker.destination(destination)
        if self not in target.producers:
            target.add_producer(self)
        headers = frame.headers
        if CLASS_OF_SERVICE in headers and headers[CLASS_OF_SERVICE] not in BY_CLASS_OF_SERVICE:
            raise ProtocolError(
                "invalid class-of-service header", "class-of-service must be 1, 2 or 3"
            )
        transaction = headers.get("transaction")
        if transaction is not None:
            self.broker.transactions.check(self, transaction, target.domain)
        expires = 0
        header = headers.get("expires")
        if header is not None or target.max_ttl:
            expires = effective_expiry(header, self.broker.runtime.now_ms(), target.max_ttl)
            if expires and header != str(expires):
                headers["expires"] = str(expires)
        message = Message(
            self.broker.next_message_id(),
            destination,
            headers,
            frame.body,
            receipt=headers.get("receipt"),
            transaction=transaction,
            origin=self,
            expires=expires,
        )
        message.target = target
        self.inflight += 1
        self.broker.submit(message)

    def message_completed(self, message: Message) -> None:
        """The pipeline is done with a message this client sent."""
        self._done(message.receipt)

    def message_refused(self, message: Message, reason: str) -> None:
        """The server could not take a message: the client is told which one."""
        self._done(None)
        self.session.fail(ProtocolError("message not accepted", reason, receipt_id=message.receipt))

    def _done(self, receipt: str | None) -> None:
        self.inflight -= 1
        if receipt is not None:
            self.session.send_receipt(receipt)
        if not self.inflight and self._on_idle is not None:
            action, self._on_idle = self._on_idle, None
            action()

    def on_subscribe(self, frame: Frame, sub_id: str, destination: str, ack_mode: str) -> None:
        if sub_id in self.subscriptions:
            raise ProtocolError(
                "duplicate subscription", f"subscription id {sub_id!r} is already in use"
            )
        target = self.broker.destination(destination)
        durable_key = self._durable_key(frame, sub_id, target)
        window = (
            _window(frame, WINDOW_MESSAGES, int(target.setting("consumerQueueEntriesSize"))),
            _window(frame, WINDOW_BYTES, int(target.setting("consumerQueueEntriesBytes"))),
        )
        self._numbers += 1
        version = self.session.version or "1.2"
        subscription = Subscription(
            sub_id, self._numbers, target, ack_mode, self.egress, version, durable_key, window
        )
        subscription.client = self
        self.subscriptions[sub_id] = subscription
        self._by_number[self._numbers] = subscription
        if durable_key is not None:
            self.broker.active_durables[durable_key] = subscription
        target.subscribe(subscription)
        self._set_egress_policy()

    def _set_egress_policy(self) -> None:
        """A client whose subscriptions all discard-oldest lets its egress queues discard;
        any other keeps every message (BLOCK): one policy per client, as in a client profile."""
        policies = {s.policy for s in self.subscriptions.values()}
        discard = policies == {"discard-oldest"}
        self.egress.queues.policy = Policy.DISCARD_OLDEST if discard else Policy.BLOCK

    def _durable_key(self, frame: Frame, sub_id: str, target: object) -> tuple[str, str] | None:
        """(client id, name) if the SUBSCRIBE asks for a durable subscription.

        Accepted spellings: ``activemq.subscriptionName`` (with CONNECT's
        ``client-id``), or ``durable:true`` / ``persistent:true`` (named by the
        subscription id, scoped by ``client-id`` when there is one).
        """
        headers = frame.headers
        name = _durable_name(headers, sub_id)
        if name is None:
            return None
        if not isinstance(target, Topic):
            raise ProtocolError("not a topic", "durable subscriptions are made on topics")
        if self.broker.persistence is None:
            raise ProtocolError("durable subscriptions unavailable", "no persistent store")
        if DURABLE_NAME in headers and not self.client_id:
            raise ProtocolError(
                "missing client-id", "a durable subscription needs client-id on CONNECT"
            )
        key = (self.client_id, name)
        if key in self.broker.active_durables:
            raise ProtocolError(
                "durable subscription in use",
                f"durable subscription {name!r} of client {self.client_id!r} is already active",
            )
        return key

    def on_unsubscribe(self, frame: Frame, sub_id: str) -> None:
        name = _durable_name(frame.headers, sub_id)
        remove_durable = name is not None
        subscription = self.subscriptions.get(sub_id)
        if subscription is None and not remove_durable:
            raise ProtocolError("unknown subscription", f"no subscription with id {sub_id!r}")
        key = (self.client_id, name or sub_id)
        if subscription is not None:
            self.detach(subscription)
            key = subscription.durable_key or key
        if remove_durable:
            self._remove_durable(key)

    def _remove_durable(self, key: tuple[str, str]) -> None:
        persistence = self.broker.persistence
        if persistence is None:
            return

        def remove() -> str:
            found = persistence.topics.subscription(*key)
            if found is None:
                return ""
            persistence.topics.unsubscribe(*key)
            return found.topic

        def done(name: str) -> None:
            if name:
                persistence.durable_topics[name] -= 1
                log.info("durable.removed", client_id=key[0], name=key[1], topic=name)

        persistence.topic_worker.submit(
            remove, done, lambda error: log.error("durable.remove_failed", error=str(error))
        )

    def on_ack(self, frame: Frame, nack: bool) -> bool:
        subscription, message_id = self._find_delivery(frame)
        requeue = frame.headers.get("requeue", "true") != "false"
        action = partial(self._acknowledge, subscription, message_id, nack, requeue)
        transaction = frame.headers.get("transaction")
        if transaction is not None:
            self.broker.transactions.check(self, transaction, subscription.destination.domain)
            self.broker.transactions.hold(self, transaction, action)
            return True
        if not action():
            return True
        persistence = self.broker.persistence
        assert persistence is not None
        batches = (
            persistence.removals
            if subscription.durable_key is None
            else (persistence.acknowledgements)
        )
        self.inflight += 1
        batches.when_committed(partial(self._done, frame.headers.get("receipt")))
        return False

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
    ) -> bool:
        """Apply an ACK/NACK; True if it changed a persistent store."""
        if subscription.unacked is None or message_id not in subscription.unacked:
            return False  # already covered by an earlier cumulative ACK, or unsubscribed
        messages = subscription.take_acknowledged(message_id)
        destination = subscription.destination
        if nack:
            destination.rejected(messages, requeue)
            return not requeue and any(m.store_seq for m in messages)
        destination.acknowledged(subscription, messages)
        return any(m.store_seq for m in messages)

    def detach(self, subscription: Subscription) -> None:
        """End one subscription of this client."""
        del self.subscriptions[subscription.sub_id]
        del self._by_number[subscription.number]
        if subscription.durable_key is not None:
            self.broker.active_durables.pop(subscription.durable_key, None)
        subscription.destination.unsubscribe(subscription)
        self._set_egress_policy()

    # -- flow control ----------------------------------------------------------------------

    def stop_reading(self, reason: object) -> None:
        """A watermark stops this producer: its socket is not read until it clears."""
        if not self.stops:
            self.session.reading_stopped(True)
            if self.reader is not None:
                self.reader.pause()
        self.stops.add(reason)

    def start_reading(self, reason: object) -> None:
        if reason not in self.stops:
            return
        self.stops.discard(reason)
        if not self.stops:
            self.session.reading_stopped(False)
            if self.reader is not None:
                self.reader.resume()

    def drop(self, error: ProtocolError) -> None:
        """Disconnect a client that does not read (a slow subscriber): its ERROR is sent if
        its socket takes it, and the connection is closed without waiting."""
        self.egress.abort = True
        self.session.fail(error)

    def state(self) -> dict[str, object]:
        """Flow-control state of this connection, for the admin view."""
        return {
            "session": self.session.session_id,
            "peer": self.peer,
            "client_id": self.client_id or None,
            "reading": not self.stops,
            "stopped_by": sorted(str(reason) for reason in self.stops),
            "subscriptions": [s.state() for s in self.subscriptions.values()],
            "egress_policy": self.egress.queues.policy.value,
            "egress": self.egress.queues.stats(),
        }

    def closing(self) -> None:
        """The session is closing: end the subscriptions (what they had not acknowledged
        goes back to their queues) and drop open transactions."""
        for subscription in list(self.subscriptions.values()):
            self.detach(subscription)
        self.broker.transactions.abort_all(self)

    def connection_lost(self) -> None:
        """The socket closed: end everything this client had."""
        self.closing()
        self.broker.forget_producer(self)
        self.broker.clients.discard(self)
        log.info("client.disconnected", session=self.session.session_id, peer=self.peer)


def _window(frame: Frame, names: tuple[str, ...], default: int) -> int:
    """A window size from the first of ``names`` the SUBSCRIBE carries, else the default."""
    for name in names:
        text = frame.headers.get(name)
        if text is not None:
            if not (text.isascii() and text.isdigit()) or int(text) < 1:
                raise ProtocolError(
                    f"invalid {name} header", f"{name} must be a positive whole number"
                )
            return int(text)
    return default


def _durable_name(headers: dict[str, str], sub_id: str) -> str | None:
    """The durable subscription a SUBSCRIBE or UNSUBSCRIBE names, or None if none.

    One rule for both, so that an UNSUBSCRIBE finds the subscription its
    SUBSCRIBE made: ``activemq.subscriptionName`` names it (even when empty),
    ``durable:true`` / ``persistent:true`` name it by the subscription id.
    """
    if DURABLE_NAME in headers:
        return headers[DURABLE_NAME]
    if "true" in (headers.get("durable"), headers.get("persistent")):
        return sub_id
    return None
