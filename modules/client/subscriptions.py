"""One session's subscriptions and its acknowledgements: the core's side of SUBSCRIBE,
UNSUBSCRIBE, ACK and NACK, whatever the protocol.

A subscription is made on a queue, a topic, a wildcard pattern (one
``Subscription`` whose destination is a ``Wildcard``), or as a browser of a
queue; a durable one (on a topic) is stored before it counts as made. The
session numbers its subscriptions, so that an acknowledgement can name its
subscription by number (STOMP 1.2) as well as by id. An acknowledgement takes
its messages from the consumer and tells the store (a stored queue message
removed, a durable subscriber's position moved); inside a transaction it is
held until COMMIT. When a subscriber under the ``disconnect`` policy falls too
far behind, the session ends it and disconnects the client
(``SlowSubscriberDrop``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

import structlog

from wiremq.config.groups import DestinationPolicy
from wiremq.modules.client.egress import Egress
from wiremq.modules.client.progress import WorkInProgress
from wiremq.modules.destinations.browser import BrowserSubscription, QueueBrowser
from wiremq.modules.destinations.destination import NOTHING, Destination
from wiremq.modules.destinations.queue import Queue
from wiremq.modules.destinations.registry import Destinations
from wiremq.modules.destinations.subscription import Subscription
from wiremq.modules.destinations.topic import Topic
from wiremq.modules.destinations.wildcard import Wildcard, is_wildcard
from wiremq.modules.domains import require_domain
from wiremq.modules.errors import Refused
from wiremq.modules.flow.egress_queues import Policy
from wiremq.modules.journal.recorder import Journal
from wiremq.modules.message import Message
from wiremq.modules.persistence.store import Persistence
from wiremq.modules.pipeline.transaction_manager import TransactionManager
from wiremq.modules.security.permissions import CREATE, READ, Access
from wiremq.modules.selector import Selector, SelectorError, compile_selector
from wiremq.modules.sender import TransactionOwner
from wiremq.stores.api import StoreTransaction
from wiremq.stores.durable import SubscriptionInfo, SubscriptionKey

log = structlog.get_logger("wiremq.connection")

DisconnectClient = Callable[[Refused], None]


@dataclass(frozen=True, slots=True)
class SubscribeRequest:
    """What a client asks for when it subscribes."""

    sub_id: str
    destination: str  # a queue, a topic, or a wildcard pattern of either
    ack_mode: str  # auto, client or client-individual
    stomp_version: str  # how its MESSAGE frames are encoded
    selector: str = ""  # a JMS message selector; blank: every message
    browse: bool = False  # browse a queue: see what waits, take nothing
    durable_name: str | None = None  # a durable subscription of this name (on a topic)
    named_by_client_id: bool = False  # the durable name is scoped by the client id it needs
    window_messages: int | None = None  # the consumer's window (None: the destination's)
    window_bytes: int | None = None
    exclusive: bool = False  # the queue's only consumer while it lives


class AckNaming(Enum):
    """How a session's acknowledgements name the subscription of the delivery."""

    NUMBER = "number"  # by the subscription's number (STOMP 1.2: in the MESSAGE's ack value)
    ID = "id"  # by the subscription's id, always given (STOMP 1.1): an error names it
    ID_IF_GIVEN = "id if given"  # by its id if given, else any subscription (STOMP 1.0)


# Read once: an enum member read from its class costs a good part of an ACK's handling.
_BY_NUMBER = AckNaming.NUMBER
_BY_ID = AckNaming.ID


class Acknowledgement(NamedTuple):
    """An ACK or NACK of one delivery, as the client named it."""

    message_id: str
    subscription: str | None  # names the delivery's subscription (see ``AckNaming``)
    nack: bool
    requeue: bool  # a NACK's: deliver it again (else: to the dead message queue)
    transaction: str | None
    receipt: str | None


class AcknowledgementRefused(Refused):
    """An ACK/NACK that cannot be applied; ``receipt``: its receipt (the ERROR names it)."""

    def __init__(self, refusal: Refused, receipt: str | None) -> None:
        super().__init__(refusal.message, refusal.detail)
        self.receipt = receipt


class SessionSubscriptions:
    """The subscriptions of one session (see the module docstring); the
    ``SlowSubscriberDrop`` of each."""

    def __init__(
        self,
        destinations: Destinations,
        persistence: Persistence | None,
        transactions: TransactionManager,
        owner: TransactionOwner,
        journal: Journal,
        limit: int,
        egress: Egress,
        progress: WorkInProgress,
        disconnect: DisconnectClient,
        session_id: str,
    ) -> None:
        """``owner``: the session's transactions' owner (acknowledgements join its
        transactions); ``limit``: subscriptions it may hold at once; ``disconnect``
        ends the client's connection (a slow subscriber's)."""
        self.destinations = destinations
        self.persistence = persistence
        self.transactions = transactions
        self.owner = owner
        self.journal = journal
        self.limit = limit
        self.egress = egress
        self.progress = progress
        self.disconnect = disconnect
        self.session_id = session_id
        self.client_id = ""  # set at login: scopes its durable subscriptions
        self.access: Access | None = None  # set at login; None: anything is allowed
        self.ack_naming = AckNaming.NUMBER  # set at login
        self.by_id: dict[str, Subscription] = {}
        self._by_number: dict[str, Subscription] = {}  # by the number in 1.2 ack values
        self._numbers = 0
        self._blocking = 0  # subscriptions whose policy is not discard-oldest

    # -- subscribe -------------------------------------------------------------------------

    def subscribe(self, request: SubscribeRequest, receipt: str | None) -> None:
        if request.sub_id in self.by_id:
            raise Refused(
                "duplicate subscription", f"subscription id {request.sub_id!r} is already in use"
            )
        if len(self.by_id) >= self.limit:
            raise Refused(
                "too many subscriptions",
                f"a connection may hold {self.limit} subscriptions at once",
            )
        selector = _selector(request.selector)
        destinations = self.destinations
        target: Destination | Wildcard | QueueBrowser
        if is_wildcard(request.destination):  # the read permission is asked per destination
            target = self._wildcard(request)
            policy = DestinationPolicy.for_destination(
                destinations.services.settings, request.destination
            )
        else:
            if self.access is not None:
                self._check_subscribe(self.access, request)
            destination = destinations.resolve(request.destination)
            policy = destination.policy
            target = destination
            if request.browse:
                if not isinstance(destination, Queue):
                    raise Refused("not a queue", "only a queue can be browsed")
                target = QueueBrowser(destination)
        durable_key = self._durable_key(request, target)
        window = (
            _or_default(request.window_messages, policy.consumerQueueEntriesSize),
            _or_default(request.window_bytes, policy.consumerQueueEntriesBytes),
        )
        self._numbers += 1
        subscription = (BrowserSubscription if request.browse else Subscription)(
            request.sub_id,
            self._numbers,
            target,  # type: ignore[arg-type]
            "auto" if request.browse else request.ack_mode,
            self.egress,
            request.stomp_version,
            durable_key,
            window,
            selector,
            request.exclusive,
            self.session_id,
        )
        subscription.slow_drop = self
        self.by_id[request.sub_id] = subscription
        self._by_number[str(self._numbers)] = subscription
        if durable_key is not None:
            assert self.persistence is not None
            self.persistence.active.add(durable_key)
        if isinstance(target, Wildcard):
            target.subscription = subscription
            destinations.add_wildcard(target)
        elif isinstance(target, QueueBrowser):
            target.start(subscription)
        else:
            target.subscribe(subscription)
        self._policy_changed(subscription, 1)
        if durable_key is None:
            self.progress.answer(receipt)
            return
        assert isinstance(target, Topic) and self.persistence is not None
        topic = target
        self.progress.started()

        def registered(info: SubscriptionInfo, created: bool) -> None:
            if created:
                log.info(
                    "durable.created", client_id=info.client_id, name=info.name, topic=info.topic
                )
            topic.registered(subscription, info)
            self.progress.done(receipt)

        def failed(error: Exception) -> None:
            self.progress.failed(Refused("durable subscription failed", str(error)), receipt)

        self.persistence.subscribe(
            durable_key, topic.name, selector.text if selector else "", registered, failed
        )

    def _wildcard(self, request: SubscribeRequest) -> Wildcard:
        """The destination of a subscription to a wildcard pattern."""
        require_domain(request.destination)
        if request.durable_name is not None:
            raise Refused("durable wildcard", "a durable subscription names one topic")
        if request.browse:
            raise Refused("browsing a wildcard", "a browser browses one queue")
        return Wildcard(request.destination, self.destinations.services, self.access)

    def _check_subscribe(self, access: Access, request: SubscribeRequest) -> None:
        """A subscription needs read, and create for a destination that does not exist
        yet and for a durable subscription."""
        destination = request.destination
        access.check(READ, destination)
        creates = self.destinations.get(destination) is None
        if creates or request.durable_name is not None:
            access.check(CREATE, destination)

    def _durable_key(self, request: SubscribeRequest, target: object) -> SubscriptionKey | None:
        """(client id, name) if the request asks for a durable subscription."""
        name = request.durable_name
        if name is None:
            return None
        if not isinstance(target, Topic):
            raise Refused("not a topic", "durable subscriptions are made on topics")
        if self.persistence is None:
            raise Refused("durable subscriptions unavailable", "no persistent store")
        if request.named_by_client_id and not self.client_id:
            raise Refused("missing client-id", "a durable subscription needs client-id on CONNECT")
        key = (self.client_id, name)
        if key in self.persistence.active:
            raise Refused(
                "durable subscription in use",
                f"durable subscription {name!r} of client {self.client_id!r} is already active",
            )
        return key

    def _policy_changed(self, subscription: Subscription, added: int) -> None:
        """A client whose subscriptions all discard-oldest lets its egress queues discard;
        any other keeps every message (BLOCK): one policy per client, as in a client profile.
        Counted as subscriptions come and go (``added`` 1 or -1), so that neither costs
        more for a client that holds many."""
        if subscription.policy != "discard-oldest":
            self._blocking += added
        discard = self.by_id and not self._blocking
        self.egress.queues.policy = Policy.DISCARD_OLDEST if discard else Policy.BLOCK

    # -- unsubscribe -------------------------------------------------------------------------

    def unsubscribe(self, sub_id: str, durable_name: str | None, receipt: str | None) -> None:
        """End subscription ``sub_id``; with ``durable_name``, remove that durable
        subscription too (even while its subscriber is away)."""
        subscription = self.by_id.get(sub_id)
        if subscription is None and durable_name is None:
            raise Refused("unknown subscription", f"no subscription with id {sub_id!r}")
        key = (self.client_id, durable_name or sub_id)
        if subscription is not None:
            key = subscription.durable_key or key
        persistence = self.persistence
        if durable_name is not None and persistence is not None and self.access is not None:
            topic = persistence.durables.get(key)
            if topic is not None:  # removing a durable subscription needs create
                self.access.check(CREATE, topic)
        if subscription is not None:
            self.detach(subscription)
        if durable_name is None or persistence is None:
            self.progress.answer(receipt)
            return
        self.progress.started()

        def removed(topic: str | None) -> None:
            if topic is not None:
                log.info("durable.removed", client_id=key[0], name=key[1], topic=topic)
                self.journal.subscription_removed(topic, key)
            self.progress.done(receipt)

        persistence.unsubscribe(key, removed)

    def detach(self, subscription: Subscription) -> None:
        """End one subscription; what was queued for it and not yet written is taken back
        from the egress (never written after it ended)."""
        del self.by_id[subscription.sub_id]
        del self._by_number[str(subscription.number)]
        if subscription.durable_key is not None and self.persistence is not None:
            self.persistence.subscriber_left(subscription.durable_key)
        unwritten = subscription.end()
        subscription.destination.unsubscribe(subscription, unwritten)
        self._policy_changed(subscription, -1)

    def end_all(self) -> None:
        """End every subscription (what they had not acknowledged goes back to their
        queues): nothing more is delivered to this session."""
        for subscription in list(self.by_id.values()):
            self.detach(subscription)

    def review(self) -> list[Subscription]:
        """The users file changed: each subscription whose client may no longer read its
        destination ends (what it had not acknowledged goes back to its queue), and is
        returned for its client to be told; a wildcard subscription leaves the
        destinations it may no longer read and goes on."""
        access = self.access
        if access is None:
            return []
        ended = []
        for subscription in list(self.by_id.values()):
            target = subscription.destination
            if isinstance(target, Wildcard):
                for name in target.review():
                    log.info(
                        "subscription.left", subscription=subscription.sub_id, destination=name
                    )
            elif not access.allows(READ, target.name):
                log.info(
                    "subscription.revoked",
                    subscription=subscription.sub_id,
                    destination=target.name,
                    session=self.session_id,
                )
                self.detach(subscription)
                ended.append(subscription)
        return ended

    def disconnect_slow(self, subscription: Subscription) -> None:
        """A subscriber under the ``disconnect`` policy fell behind: its client is dropped."""
        subscription = self.by_id.get(subscription.sub_id, subscription)  # a wildcard's
        name = subscription.destination.name
        log.info("client.slow_disconnected", destination=name, subscription=subscription.sub_id)
        self.detach(subscription)
        self.disconnect(
            Refused("slow subscriber", f"{name} disconnects subscribers that fall behind")
        )

    # -- acknowledgements ----------------------------------------------------------------

    def acknowledge(self, acks: Sequence[Acknowledgement]) -> None:
        """Apply ACKs and NACKs read together, in order (see ``AckNaming`` for how each
        names its delivery). A run of plain ACKs (no transaction) is applied as one: each
        takes its messages from its consumer, then each consumer's window, counters and
        journal are settled and the store told once for the run, its receipts answered
        once that is stored. A NACK or an ACK in a transaction is applied after what came
        before it. The first that cannot be applied raises ``AcknowledgementRefused``:
        those before it took effect, it and those after it do not."""
        taken: dict[Subscription, list[Message]] = {}
        receipts: list[str] = []
        try:
            for ack in acks:
                message_id = ack.message_id
                subscription = self._find_delivery(message_id, ack.subscription, ack.nack)
                if ack.transaction is None and not ack.nack:
                    messages = subscription.take_acknowledged(message_id)
                    run = taken.get(subscription)
                    if run is None:
                        taken[subscription] = messages
                    else:
                        run += messages
                    if ack.receipt is not None:
                        receipts.append(ack.receipt)
                    continue
                if taken:
                    self._settle(taken, receipts)
                    taken, receipts = {}, []
                self._acknowledge_one(subscription, ack)
        except Refused as refusal:
            raise AcknowledgementRefused(refusal, ack.receipt) from refusal
        finally:
            if taken:
                self._settle(taken, receipts)

    def _acknowledge_one(self, subscription: Subscription, ack: Acknowledgement) -> None:
        """A NACK, or an ACK in a transaction (held there until COMMIT)."""
        message_id, nack, requeue = ack.message_id, ack.nack, ack.requeue
        if ack.transaction is None:
            taken = self._take(subscription, message_id, nack, requeue)
            receipts = () if ack.receipt is None else (ack.receipt,)
            self._store(taken[2] if taken is not None else NOTHING, receipts)
            return
        manager = self.transactions
        manager.check(self.owner, ack.transaction, subscription.destination.domain)
        manager.hold_ack(
            self.owner, ack.transaction, lambda: self._take(subscription, message_id, nack, requeue)
        )
        self.progress.answer(ack.receipt)

    def _settle(self, taken: dict[Subscription, list[Message]], receipts: list[str]) -> None:
        """A run of plain ACKs took these messages from their consumers: each consumer is
        settled once, the store told once, and the receipts answered once it is stored."""
        changes = [self._settled(s, messages, False, True) for s, messages in taken.items()]
        changes = [change for change in changes if not change.empty]
        if not changes:
            for receipt in receipts:
                self.progress.answer(receipt)
            return
        self._store(changes[0] if len(changes) == 1 else StoreTransaction.merged(changes), receipts)

    def _take(
        self, subscription: Subscription, message_id: str, nack: bool, requeue: bool
    ) -> tuple[Subscription, list[Message], StoreTransaction] | None:
        """Apply an ACK/NACK: the subscription, the messages an ACK took from the consumer
        (given back if its transaction fails) and what the store must change; None when it
        was already covered (an earlier cumulative ACK, or the consumer went away). A NACK
        takes nothing to give back: its messages are delivered again, or moved to the dead
        message queue, when it is applied."""
        if subscription.unacked is None or message_id not in subscription.unacked:
            return None
        messages = subscription.take_acknowledged(message_id)
        changes = self._settled(subscription, messages, nack, requeue)
        return subscription, [] if nack else messages, changes

    def _settled(
        self, subscription: Subscription, messages: list[Message], nack: bool, requeue: bool
    ) -> StoreTransaction:
        """What ACKs or a NACK took from ``subscription`` leaves its window, is journaled
        and counted (NACKed: delivered again, or dead-lettered); what the store must
        change."""
        subscription.release(messages)
        self.journal.acknowledgement(subscription, messages, nack, requeue)
        destination = subscription.destination
        if nack:
            return destination.rejected(subscription, messages, requeue)
        subscription.acknowledged += len(messages)
        destination.count("acknowledged", messages)
        return destination.acknowledged(subscription, messages)

    def _store(self, changes: StoreTransaction, receipts: Sequence[str]) -> None:
        """Store what acknowledgements changed; the ``receipts`` are answered once it is
        stored. Without receipts it is still work in progress until then, as a SEND is:
        a DISCONNECT's receipt follows only once the acknowledgements before it are
        stored, so that a server killed after it delivers none of them again."""
        progress = self.progress
        persistence = self.persistence
        if persistence is None or changes.empty:
            for receipt in receipts:
                progress.answer(receipt)
            return
        progress.started(len(receipts) or 1)

        def stored() -> None:
            if not receipts:
                progress.done(None)
            for receipt in receipts:
                progress.done(receipt)

        persistence.acknowledge(changes, stored)

    def _find_delivery(self, message_id: str, name: str | None, nack: bool) -> Subscription:
        """The subscription an ACK/NACK refers to (see ``AckNaming``)."""
        naming = self.ack_naming
        if naming is _BY_NUMBER:
            found = self._by_number.get(name or "")
        elif name is not None:
            found = self.by_id.get(name)
        else:
            awaiting = (s for s in self.by_id.values() if s.unacked and message_id in s.unacked)
            found = next(awaiting, None)
        if found is not None and found.unacked is not None and message_id in found.unacked:
            return found
        command = "NACK" if nack else "ACK"
        where = "on this connection"
        if naming is _BY_ID and name is not None:
            where = f"on subscription {name[:200]!r}"
            if any(s.unacked is not None and message_id in s.unacked for s in self.by_id.values()):
                where += " (it awaits acknowledgement on another subscription)"
        raise Refused(
            "unknown message",
            f"{command} of {message_id!r}: no such message awaits acknowledgement {where}",
        )

    def state(self) -> list[dict[str, object]]:
        return [s.state() for s in self.by_id.values()]


def _or_default(asked: int | None, default: int) -> int:
    return default if asked is None else asked


def _selector(text: str) -> Selector | None:
    """The compiled selector (none if blank); a bad one is refused with the position of
    what is wrong."""
    if not text.strip():
        return None
    try:
        return compile_selector(text)
    except SelectorError as error:
        raise Refused("invalid selector", f"{error}\n{error.pointer()}") from error
