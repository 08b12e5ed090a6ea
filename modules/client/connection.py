"""The server side of one client connection: it drives the STOMP session and acts on it.

Bytes from the socket go to the sans-io session, which returns request events;
this turns them into pipeline work (SENDs become messages, one batch per
domain and read), subscriptions, acknowledgements and transactions, and
writes the session's replies to the client's egress. It counts the work of
this client still in progress (messages in the pipeline, acknowledgements
and COMMITs not yet stored), so that a DISCONNECT's receipt, or an ERROR,
comes after everything the client sent before it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import structlog

from wiremq.config.groups import ClientBounds, DestinationPolicy
from wiremq.modules.client.egress import Egress
from wiremq.modules.destinations.browser import BrowserSubscription, QueueBrowser
from wiremq.modules.destinations.destination import Destination, domain_of
from wiremq.modules.destinations.queue import Queue
from wiremq.modules.destinations.registry import Destinations
from wiremq.modules.destinations.subscription import Subscription
from wiremq.modules.destinations.topic import Topic
from wiremq.modules.destinations.wildcard import Wildcard, is_wildcard
from wiremq.modules.errors import Refused
from wiremq.modules.flow.egress_queues import Policy
from wiremq.modules.flow.unfinished import UnfinishedFrames
from wiremq.modules.ids import Ids
from wiremq.modules.memory.memwatch import MemWatch
from wiremq.modules.message import Message
from wiremq.modules.persistence.store import Persistence
from wiremq.modules.pipeline.chain import Batch, Pipelines
from wiremq.modules.pipeline.transaction import (
    Transaction,
    TransactionManager,
    Unit,
    UnitOwner,
    apply_acks,
)
from wiremq.modules.pipeline.xa import XAController
from wiremq.modules.runtime import Runtime
from wiremq.modules.security.authentication import Authenticator
from wiremq.modules.security.permissions import CREATE, READ, Access
from wiremq.modules.selector import Selector, SelectorError, compile_selector
from wiremq.modules.stomp.events import (
    Abort,
    Acknowledge,
    BadInput,
    Begin,
    Commit,
    Connect,
    Connected,
    Disconnect,
    Error,
    Receipt,
    Recover,
    Recovered,
    Request,
    Send,
    Subscribe,
    TransactionError,
    Unsubscribe,
)
from wiremq.modules.stomp.frames import ProtocolError
from wiremq.modules.stomp.session import SessionSettings, StompSession
from wiremq.stores.api import StoreTransaction
from wiremq.stores.durable import SubscriptionInfo

if TYPE_CHECKING:
    from wiremq.modules.journal.recorder import Journal
    from wiremq.stores.durable import SubscriptionKey

log = structlog.get_logger("wiremq.connection")

DURABLE_NAME = "activemq.subscriptionName"
SELECTOR = "selector"
BROWSER = "browser"
EXCLUSIVE = "activemq.exclusive"
# SUBSCRIBE headers that set a consumer's window, in messages and in bytes.
WINDOW_MESSAGES = ("consumerQueueEntriesSize", "activemq.prefetchSize", "prefetch-count")
WINDOW_BYTES = ("consumerQueueEntriesBytes", "prefetch-bytes")

Failure: TypeAlias = ProtocolError | Refused
CONTROL_BACKLOG = "control queue full"  # why a client that does not read is not read


class ReadControl(Protocol):
    """Stops and restarts reading from the client's socket (its transport, in ``server/``)."""

    def pause(self) -> None: ...
    def resume(self) -> None: ...


@dataclass
class ConnectionServices:
    """What a client connection uses of the rest of the server."""

    session: SessionSettings
    runtime: Runtime
    ids: Ids
    pipelines: Pipelines
    destinations: Destinations
    transactions: TransactionManager
    persistence: Persistence | None
    clients: set[ClientConnection]
    addresses: Counter[str]  # connections open per client address
    unfinished: UnfinishedFrames
    bounds: ClientBounds
    journal: Journal
    authenticator: Authenticator
    memwatch: MemWatch
    xa: XAController


class ClientConnection:
    """One connected client."""

    def __init__(
        self,
        services: ConnectionServices,
        egress: Egress,
        peer: str,
        reader: ReadControl,
        now: float,
        certificate: Callable[[], str | None] | None = None,
    ) -> None:
        """``certificate``: the user name the client's verified TLS certificate gives, asked
        when its CONNECT is read (None: not a TLS connection)."""
        self.services = services
        self.egress = egress
        egress.throttle = self
        self.peer = peer
        self.address = peer.rpartition(":")[0]  # the host of "host:port"
        self.reader = reader
        self.session = StompSession(services.session, services.ids.session(), now)
        self._connect_deadline = services.runtime.call_later(
            services.bounds.connecttimeout, self._connect_overdue
        )
        self.stops: set[object] = set()  # why reading is stopped (watermarks); empty = reading
        self.client_id = ""
        self.opened_at = now
        self.certificate = certificate
        self.user: str | None = None  # the login, once CONNECTED
        # What the user may do (None: anything, there are no users); checked on SEND by
        # the admission module, on SUBSCRIBE and durable subscriptions here.
        self.access: Access | None = None
        self.on_connected: Callable[[], None] | None = None  # the socket side's: heart-beats
        self.subscriptions: dict[str, Subscription] = {}
        self._by_number: dict[str, Subscription] = {}  # by the number in 1.2 ack values
        self._numbers = 0
        self._blocking = 0  # subscriptions whose policy is not discard-oldest
        self.inflight = 0  # this client's work still in progress
        self._on_idle: Callable[[], None] | None = None
        # SENDs read and not yet submitted: consecutive ones of one domain go down its
        # pipeline together, in the order they came.
        self._sends: Batch = []
        self._sends_domain = ""
        self._failing = False  # an ERROR is on its way: nothing more is done for the client
        self._held: list[Request] | None = None  # requests waiting for earlier ones (_act)
        self._checked = -1  # the pending frame MemWatch checked (by the decoder's count)
        services.clients.add(self)
        services.addresses[self.address] += 1

    # -- input ---------------------------------------------------------------------------

    def data_received(self, data: bytes, now: float) -> None:
        """Act on everything the bytes complete, in order."""
        events = self.session.receive_data(data, now)
        if self._held is not None:
            self._held.extend(events)
        else:
            self._act(events)

    def _act(self, events: list[Request]) -> None:
        """Act on requests in order. SUBSCRIBE and UNSUBSCRIBE change where messages go, so
        each waits until what came before it is done (the messages sent before it are
        where they were going), and what comes after waits for it to be done (a durable
        subscription stored; for CONNECT, its login checked): the rest is held, and the
        socket not read, meanwhile."""
        new_message = self.services.ids.message
        now_ms = self.services.runtime.now_ms()  # when these messages were received
        for index, event in enumerate(events):
            if type(event) is Send:
                destination, headers, body = event
                domain = domain_of(destination)
                if domain is not None:
                    if domain != self._sends_domain:
                        self._submit()
                        self._sends_domain = domain
                    self._sends.append(
                        Message(new_message(), destination, headers, body, self, 0, now_ms)
                    )
                    continue
            self._submit()
            ordered = type(event) in _ORDERED
            if ordered and self.inflight and not self._failing:
                self._hold(events[index:])
                return
            if isinstance(event, BadInput):
                self.fail(event.error)
                continue
            try:
                self._handle(event)
            except (ProtocolError, Refused) as failure:
                self.fail(failure, event.headers.get("receipt"))
            if ordered and self.inflight and not self._failing:
                self._hold(events[index + 1 :])
                return
        self._submit()
        decoder = self.session.decoder
        buffered = decoder.buffered
        self.services.unfinished.held(self, buffered)
        if buffered and decoder.completed != self._checked:
            self._check_memory()
        self._check_connect_size()

    def _check_memory(self) -> None:
        """MemWatch's check before a large frame is read (once per frame)."""
        decoder = self.session.decoder
        services = self.services
        size = decoder.pending_size
        if size <= services.memwatch.settings.messagethreshold:
            return
        self._checked = decoder.completed
        if not services.memwatch.check_frame(self, size):
            self.fail(
                Refused(
                    "server memory full",
                    f"a frame of {size} bytes arrived while the server's memory is at its "
                    "top level (MemWatch.whenfull is disconnect)",
                )
            )

    def _check_connect_size(self) -> None:
        """Until CONNECT is read, a client may only make the server hold a little."""
        session = self.session
        limit = self.services.bounds.maxconnectsize
        if session.version is None and session.decoder.buffered > limit:
            self.fail(
                ProtocolError(
                    "connect frame too large", f"a CONNECT frame may take at most {limit} bytes"
                )
            )

    def _connect_overdue(self) -> None:
        if self.session.version is None:
            deadline = self.services.bounds.connecttimeout
            self.fail(ProtocolError("connect timeout", f"no CONNECT within {deadline:g} s"))

    def _hold(self, events: list[Request]) -> None:
        """Hold ``events`` (and whatever is read meanwhile) until the client's work in
        progress is done."""
        self._held = events
        self.stop_reading(_ORDERING)
        self.when_idle(lambda: self.services.runtime.call_soon(self._release))

    def _release(self) -> None:
        held, self._held = self._held, None
        self.start_reading(_ORDERING)
        if held and not self.session.closed:
            self._act(held)

    def _handle(self, event: Request) -> None:
        if type(event) is Send:  # a destination that is neither a queue nor a topic
            raise Refused(
                "unknown destination",
                f"{event.destination[:200]!r} is neither /queue/NAME nor /topic/NAME",
            )
        _HANDLERS[type(event)](self, event)

    def _submit(self) -> None:
        if self._sends:
            batch, self._sends = self._sends, []
            self.inflight += len(batch)
            self.services.pipelines.submit(self._sends_domain, batch)

    # -- what the pipeline reports -------------------------------------------------------

    def messages_completed(self, messages: list[Message]) -> None:
        """The pipeline is done with messages this client sent: their receipts go."""
        for message in messages:
            if message.receipt is not None:
                self._reply(Receipt(message.receipt))
        self._done(None, len(messages))

    def message_refused(self, message: Message, refusal: Refused) -> None:
        """The server does not take a message: the client is told which one (the ERROR
        takes the place of anything waiting for this, a DISCONNECT's receipt say)."""
        self.fail(refusal, message.receipt)
        self._done(None)

    def unit_completed(self, unit: Unit) -> None:
        """A COMMIT is stored and its messages have left the pipeline."""
        self._done(unit.receipt)

    def unit_failed(self, unit: Unit, refusal: Refused) -> None:
        self.fail(refusal, unit.receipt)
        self._done(None)

    def transaction_discarded(self, name: str, refusal: Refused) -> None:
        """A transaction of this client was discarded: it is told at once (its COMMIT
        will fail with the same ERROR)."""
        data = self.session.send(TransactionError(name, refusal.message, refusal.detail))
        if data:
            self.egress.push(data)

    def _done(self, receipt: str | None, count: int = 1) -> None:
        """``count`` pieces of this client's work are done; ``receipt`` is sent."""
        self.inflight -= count
        if receipt is not None:
            self._reply(Receipt(receipt))
        if not self.inflight and self._on_idle is not None:
            action, self._on_idle = self._on_idle, None
            action()

    def _reply(self, reply: Receipt) -> None:
        data = self.session.send(reply)
        if data:
            self.egress.push(data)

    def _receipt(self, event: Request) -> None:
        receipt = event.headers.get("receipt")
        if receipt is not None:
            self._reply(Receipt(receipt))

    def when_idle(self, action: Callable[[], None]) -> None:
        """Run ``action`` once everything this client sent so far is done."""
        if self.inflight:
            self._on_idle = action
        else:
            action()

    # -- failing and closing -------------------------------------------------------------

    def fail(self, failure: Failure, receipt: str | None = None) -> None:
        """Read nothing more; once earlier work is done, send an ERROR and close.

        Messages the client sent before the bad request still get their receipts.
        """
        session = self.session
        if session.closed or self._failing:
            return
        self._failing = True
        session.reading = False
        if isinstance(failure, ProtocolError) and failure.receipt_id is not None:
            receipt = failure.receipt_id
        error = Error(failure.message, failure.detail, receipt)
        self.when_idle(lambda: self._close(self.session.send(error)))

    def _close(self, last_frame: bytes = b"") -> None:
        """Close once queued frames, then ``last_frame``, are written."""
        if not self.egress.close_requested:
            self.session.reading = False
            self.closing()
            self.egress.close_after_flush(last_frame)

    def closing(self) -> None:
        """End the subscriptions (what they had not acknowledged goes back to their queues)
        and drop open transactions: nothing more is delivered to this client."""
        for subscription in list(self.subscriptions.values()):
            self.detach(subscription)
        self.services.transactions.abort_all(self)

    def connection_lost(self) -> None:
        """The socket closed: end everything this client had."""
        self.session.closed = True
        self.session.reading = False
        self._connect_deadline.cancel()
        self.closing()
        services = self.services
        services.destinations.forget_producer(self)
        services.unfinished.forget(self)
        services.memwatch.forget(self)
        if self in services.clients:
            services.clients.discard(self)
            services.addresses[self.address] -= 1
            if not services.addresses[self.address]:
                del services.addresses[self.address]
        log.info("client.disconnected", session=self.session.session_id, peer=self.peer)

    def drop(self, failure: Failure) -> None:
        """Disconnect a client that does not read (a slow subscriber): its ERROR is sent if
        its socket takes it, and the connection is closed without waiting."""
        self.egress.abort = True
        self.fail(failure)

    def disconnect_slow(self, subscription: Subscription) -> None:
        """A subscriber under the ``disconnect`` policy fell behind: its client is dropped."""
        subscription = self.subscriptions.get(subscription.sub_id, subscription)  # a wildcard's
        name = subscription.destination.name
        log.info("client.slow_disconnected", destination=name, subscription=subscription.sub_id)
        self.detach(subscription)
        self.drop(
            ProtocolError("slow subscriber", f"{name} disconnects subscribers that fall behind")
        )

    # -- requests ------------------------------------------------------------------------

    def _connect(self, event: Connect) -> None:
        """Check the login (maybe on a worker, maybe after a failure's delay); what the
        client sent after CONNECT waits for it (``_ORDERED``)."""
        self._connect_deadline.cancel()
        self._check_room()
        self.client_id = event.headers.get("client-id", "")
        self.inflight += 1
        certificate = self.certificate() if self.certificate is not None else None
        self.services.authenticator.login(
            event.headers, self.address, certificate, self._logged_in, self._login_refused
        )

    def _logged_in(self, access: Access | None, user: str | None) -> None:
        self.access = access
        self.user = user
        if not self.session.closed:
            log.info(
                "client.connected",
                session=self.session.session_id,
                peer=self.peer,
                login=user,
                client_id=self.client_id or None,
            )
            self.egress.push(self.session.send(Connected()))
            self.session.last_received = self.services.runtime.monotonic()  # not silent yet
            if self.on_connected is not None:
                self.on_connected()
        self._done(None)

    def _login_refused(self, refusal: Refused) -> None:
        self.fail(refusal)
        self._done(None)

    def _check_room(self) -> None:
        """Refuse a client over the limits on connections, in all and from its address."""
        services = self.services
        bounds = services.bounds
        if len(services.clients) > bounds.maxconnections:
            raise Refused(
                "too many connections",
                f"the server takes at most {bounds.maxconnections} connections at once",
            )
        if services.addresses[self.address] > bounds.maxconnectionsperaddress:
            raise Refused(
                "too many connections",
                f"the server takes at most {bounds.maxconnectionsperaddress} connections at "
                f"once from one address ({self.address})",
            )

    def _disconnect(self, event: Disconnect) -> None:
        """Read nothing more; the receipt follows once earlier frames are done."""

        def goodbye() -> None:
            self._receipt(event)
            self._close()

        self.when_idle(goodbye)

    def _subscribe(self, event: Subscribe) -> None:
        if event.sub_id in self.subscriptions:
            raise ProtocolError(
                "duplicate subscription", f"subscription id {event.sub_id!r} is already in use"
            )
        limit = self.services.bounds.maxsubscriptions
        if len(self.subscriptions) >= limit:
            raise Refused(
                "too many subscriptions", f"a connection may hold {limit} subscriptions at once"
            )
        headers = event.headers
        selector = _selector(headers)
        browsing = headers.get(BROWSER, "").lower() == "true"
        destinations = self.services.destinations
        target: Destination | Wildcard | QueueBrowser
        if is_wildcard(event.destination):  # may_read decides for each matching destination
            target = self._wildcard(event)
            policy = DestinationPolicy.for_destination(
                destinations.services.settings, event.destination
            )
        else:
            if self.access is not None:
                self._check_subscribe(self.access, event)
            destination = destinations.resolve(event.destination)
            policy = destination.policy
            target = destination
            if browsing:
                if not isinstance(destination, Queue):
                    raise ProtocolError("not a queue", "only a queue can be browsed")
                target = QueueBrowser(destination)
        durable_key = self._durable_key(event, target)
        window = (
            _window(headers, WINDOW_MESSAGES, policy.consumerQueueEntriesSize),
            _window(headers, WINDOW_BYTES, policy.consumerQueueEntriesBytes),
        )
        self._numbers += 1
        version = self.session.version or "1.2"
        subscription = (BrowserSubscription if browsing else Subscription)(
            event.sub_id,
            self._numbers,
            target,  # type: ignore[arg-type]
            "auto" if browsing else event.ack,
            self.egress,
            version,
            durable_key,
            window,
            selector,
            headers.get(EXCLUSIVE, "").lower() == "true",
        )
        subscription.client = self
        self.subscriptions[event.sub_id] = subscription
        self._by_number[str(self._numbers)] = subscription
        if durable_key is not None:
            assert self.services.persistence is not None
            self.services.persistence.active[durable_key] = subscription
        if isinstance(target, Wildcard):
            target.subscription = subscription
            destinations.add_wildcard(target)
        elif isinstance(target, QueueBrowser):
            target.start(subscription)
        else:
            target.subscribe(subscription)
        self._policy_changed(subscription, 1)
        if durable_key is None:
            self._receipt(event)
            return
        assert isinstance(target, Topic) and self.services.persistence is not None
        self.inflight += 1

        def registered(info: SubscriptionInfo, created: bool) -> None:
            if created:
                log.info(
                    "durable.created", client_id=info.client_id, name=info.name, topic=info.topic
                )
            target.registered(subscription, info)
            self._done(event.headers.get("receipt"))

        def failed(error: Exception) -> None:
            self.fail(
                Refused("durable subscription failed", str(error)), event.headers.get("receipt")
            )
            self._done(None)

        self.services.persistence.subscribe(
            durable_key, target.name, selector.text if selector else "", registered, failed
        )

    def _wildcard(self, event: Subscribe) -> Wildcard:
        """The destination of a SUBSCRIBE to a wildcard name (checked by the registry)."""
        if domain_of(event.destination) is None:
            raise Refused(
                "unknown destination",
                f"{event.destination[:200]!r} is neither /queue/NAME nor /topic/NAME",
            )
        headers = event.headers
        if _durable_name(headers, event.sub_id) is not None:
            raise ProtocolError("durable wildcard", "a durable subscription names one topic")
        if headers.get(BROWSER, "").lower() == "true":
            raise ProtocolError("browsing a wildcard", "a browser browses one queue")
        return Wildcard(event.destination, self.services.destinations.services)

    def _check_subscribe(self, access: Access, event: Subscribe) -> None:
        """A SUBSCRIBE needs read, and create for a destination that does not exist yet
        and for a durable subscription."""
        destination = event.destination
        access.check(READ, destination)
        creates = self.services.destinations.get(destination) is None
        if creates or _durable_name(event.headers, event.sub_id) is not None:
            access.check(CREATE, destination)

    def may_read(self, destination: str) -> bool:
        """Whether this client may see messages of ``destination``: asked for each
        destination a wildcard subscription matches."""
        return self.access is None or self.access.allows(READ, destination)

    def _policy_changed(self, subscription: Subscription, added: int) -> None:
        """A client whose subscriptions all discard-oldest lets its egress queues discard;
        any other keeps every message (BLOCK): one policy per client, as in a client profile.
        Counted as subscriptions come and go (``added`` 1 or -1), so that neither costs
        more for a client that holds many."""
        if subscription.policy != "discard-oldest":
            self._blocking += added
        discard = self.subscriptions and not self._blocking
        self.egress.queues.policy = Policy.DISCARD_OLDEST if discard else Policy.BLOCK

    def _durable_key(self, event: Subscribe, target: object) -> SubscriptionKey | None:
        """(client id, name) if the SUBSCRIBE asks for a durable subscription.

        Accepted spellings: ``activemq.subscriptionName`` (with CONNECT's
        ``client-id``), or ``durable:true`` / ``persistent:true`` (named by the
        subscription id, scoped by ``client-id`` when there is one).
        """
        headers = event.headers
        name = _durable_name(headers, event.sub_id)
        if name is None:
            return None
        if not isinstance(target, Topic):
            raise ProtocolError("not a topic", "durable subscriptions are made on topics")
        if self.services.persistence is None:
            raise ProtocolError("durable subscriptions unavailable", "no persistent store")
        if DURABLE_NAME in headers and not self.client_id:
            raise ProtocolError(
                "missing client-id", "a durable subscription needs client-id on CONNECT"
            )
        key = (self.client_id, name)
        if key in self.services.persistence.active:
            raise ProtocolError(
                "durable subscription in use",
                f"durable subscription {name!r} of client {self.client_id!r} is already active",
            )
        return key

    def _unsubscribe(self, event: Unsubscribe) -> None:
        name = _durable_name(event.headers, event.sub_id)
        subscription = self.subscriptions.get(event.sub_id)
        if subscription is None and name is None:
            raise ProtocolError("unknown subscription", f"no subscription with id {event.sub_id!r}")
        key = (self.client_id, name or event.sub_id)
        if subscription is not None:
            key = subscription.durable_key or key
        persistence = self.services.persistence
        if name is not None and persistence is not None and self.access is not None:
            topic = persistence.durables.get(key)
            if topic is not None:  # removing a durable subscription needs create
                self.access.check(CREATE, topic)
        if subscription is not None:
            self.detach(subscription)
        if name is None or persistence is None:
            self._receipt(event)
            return
        self.inflight += 1

        def removed(topic: str | None) -> None:
            if topic is not None:
                log.info("durable.removed", client_id=key[0], name=key[1], topic=topic)
                self.services.journal.subscription_removed(topic, key)
            self._done(event.headers.get("receipt"))

        persistence.unsubscribe(key, removed)

    def detach(self, subscription: Subscription) -> None:
        """End one subscription of this client; what was queued for it and not yet written
        is taken back from the egress (never written after it ended)."""
        del self.subscriptions[subscription.sub_id]
        del self._by_number[str(subscription.number)]
        if subscription.durable_key is not None and self.services.persistence is not None:
            self.services.persistence.active.pop(subscription.durable_key, None)
        unwritten = subscription.end()
        subscription.destination.unsubscribe(subscription, unwritten)
        self._policy_changed(subscription, -1)

    # -- acknowledgements ----------------------------------------------------------------

    def _acknowledge(self, event: Acknowledge) -> None:
        subscription = self._find_delivery(event)
        message_id = event.message_id
        requeue = event.headers.get("requeue", "true").lower() != "false"
        transaction = event.headers.get("transaction")
        if transaction is None:
            taken = self._take(subscription, message_id, event.nack, requeue)
            changes = taken[2] if taken is not None else StoreTransaction()
            self.store_acknowledgement(changes, event.headers.get("receipt"))
            return
        manager = self.services.transactions
        manager.check(self, transaction, subscription.destination.domain)
        manager.hold_ack(
            self, transaction, lambda: self._take(subscription, message_id, event.nack, requeue)
        )
        self._receipt(event)

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
        self.services.journal.acknowledgement(subscription, messages, nack, requeue)
        destination = subscription.destination
        if nack:
            return subscription, [], destination.rejected(subscription, messages, requeue)
        return subscription, messages, destination.acknowledged(subscription, messages)

    def store_acknowledgement(self, changes: StoreTransaction, receipt: str | None) -> None:
        """Store what acknowledgements changed; ``receipt`` is sent once it is stored."""
        persistence = self.services.persistence
        if persistence is None or changes.empty:
            if receipt is not None:
                self._reply(Receipt(receipt))
            return
        if receipt is None:
            persistence.acknowledge(changes, None)
            return
        self.inflight += 1
        persistence.acknowledge(changes, lambda: self._done(receipt))

    def _find_delivery(self, event: Acknowledge) -> Subscription:
        """The subscription an ACK/NACK refers to, per protocol version."""
        candidates: list[Subscription]
        if self.session.version == "1.2":
            found = self._by_number.get(event.subscription or "")
            candidates = [found] if found is not None else []
        elif event.subscription is not None:
            found = self.subscriptions.get(event.subscription)
            candidates = [found] if found is not None else []
        else:
            candidates = list(self.subscriptions.values())
        for subscription in candidates:
            if subscription.unacked is not None and event.message_id in subscription.unacked:
                return subscription
        command = "NACK" if event.nack else "ACK"
        where = "on this connection"
        if self.session.version == "1.1" and event.subscription is not None:
            where = f"on subscription {event.subscription[:200]!r}"
            if any(
                s.unacked is not None and event.message_id in s.unacked
                for s in self.subscriptions.values()
            ):
                where += " (it awaits acknowledgement on another subscription)"
        raise ProtocolError(
            "unknown message",
            f"{command} of {event.message_id!r}: no such message awaits acknowledgement {where}",
        )

    # -- transactions --------------------------------------------------------------------

    def _begin(self, event: Begin) -> None:
        xa = event.headers.get("xa")
        if xa is None:
            self.services.transactions.begin(self, event.transaction)
        elif xa == "start":
            self.services.xa.start(self, event.transaction, event.headers.get("xa-timeout"))
        elif xa == "join":
            self.services.xa.join(self, event.transaction)
        else:
            raise ProtocolError("invalid xa header", "BEGIN takes xa:start or xa:join")
        self._receipt(event)

    def _abort(self, event: Abort) -> None:
        """ABORT of a standard transaction, or the rollback of an XA branch (plain, or
        ``xa:rollback``); a prepared branch's RECEIPT follows its rollback's commit."""
        xa = event.headers.get("xa")
        xid = event.transaction
        transactions = self.services.transactions
        found = transactions.find(self, event.transaction)
        if xa is None and found is not None and not found.xa:
            transactions.abort(self, event.transaction)
            self._receipt(event)
        elif xa in (None, "rollback"):
            self._answer_later(
                event, lambda done, failed: self.services.xa.rollback(self, xid, done, failed)
            )
        else:
            raise ProtocolError("invalid xa header", "ABORT takes xa:rollback")

    def _commit(self, event: Commit) -> None:
        xa = event.headers.get("xa")
        xid = event.transaction
        receipt = event.headers.get("receipt")
        transactions = self.services.transactions
        if xa is None:
            found = transactions.find(self, event.transaction)
            if found is not None and found.xa:
                raise Refused(
                    "XA protocol error",
                    f"COMMIT of XA branch {event.transaction!r} says what to do: xa:end, "
                    "xa:prepare, xa:commit or xa:onephase",
                )
            transaction = transactions.take(self, event.transaction)
            self.commit_unit(transaction, StoreTransaction(), self, receipt)
            return
        controller = self.services.xa
        if xa == "end":
            controller.end(self, event.transaction)
            self._receipt(event)
        elif xa == "prepare":
            self._answer_later(
                event, lambda done, failed: controller.prepare(self, xid, done, failed)
            )
        elif xa in ("commit", "onephase"):
            controller.commit(self, event.transaction, xa == "onephase", self._unit(receipt), self)
        else:
            raise ProtocolError(
                "invalid xa header", "COMMIT takes xa:end, xa:prepare, xa:commit or xa:onephase"
            )

    def _answer_later(
        self,
        event: Request,
        call: Callable[[Callable[[], None], Callable[[Refused], None]], None],
    ) -> None:
        """Run ``call(done, failed)`` for a request answered later: its RECEIPT when
        ``done``, an ERROR naming it when ``failed``; it counts as work in progress until
        then (unless ``call`` refuses it at once)."""
        receipt = event.headers.get("receipt")

        def failed(refusal: Refused) -> None:
            self.fail(refusal, receipt)
            self._done(None)

        self.inflight += 1
        try:
            call(lambda: self._done(receipt), failed)
        except (Refused, ProtocolError):
            self.inflight -= 1
            raise

    def _recover(self, event: Recover) -> None:
        reply = Recovered(event.headers["receipt"], self.services.xa.recover())
        data = self.session.send(reply)
        if data:
            self.egress.push(data)

    def _unit(
        self, receipt: str | None
    ) -> Callable[[Transaction, StoreTransaction, UnitOwner], None]:
        return lambda transaction, changes, owner: self.commit_unit(
            transaction, changes, owner, receipt
        )

    def commit_unit(
        self,
        transaction: Transaction,
        changes: StoreTransaction,
        owner: UnitOwner,
        receipt: str | None,
    ) -> None:
        """Apply the transaction's acknowledgements and send its messages on as one
        ``Unit`` whose store transaction also makes ``changes``; ``owner`` is told how it
        ended (a RECEIPT or an ERROR to this client)."""
        services = self.services
        acknowledged, taken = apply_acks(transaction.acks)
        unit = Unit(
            owner,
            transaction.name,
            receipt,
            transaction.messages,
            StoreTransaction.merged([*acknowledged, changes]),
            taken,
            services.persistence,
            services.runtime.now_ms(),
        )
        self.inflight += 1
        unit.start(services.transactions)

    # -- flow control --------------------------------------------------------------------

    def stop_reading(self, reason: object) -> None:
        """A watermark stops this producer: its socket is not read until it clears."""
        if not self.stops:
            self.session.reading_stopped(True, self.services.runtime.monotonic())
            self.reader.pause()
        self.stops.add(reason)

    def start_reading(self, reason: object) -> None:
        if reason not in self.stops:
            return
        self.stops.discard(reason)
        if not self.stops:
            self.session.reading_stopped(False, self.services.runtime.monotonic())
            self.reader.resume()

    def control_full(self) -> None:
        """The client does not read its RECEIPTs: read nothing more until it does."""
        self.stop_reading(CONTROL_BACKLOG)

    def control_drained(self) -> None:
        self.start_reading(CONTROL_BACKLOG)

    def tick(self, now: float) -> float | None:
        """Heart-beats: send one if due, fail a silent client; when to tick again."""
        egress = self.egress
        tick = self.session.tick(now, egress.active)
        egress.active = False
        if tick.send:
            egress.push(tick.send)
            egress.active = False
        if tick.timed_out is not None:
            self.fail(tick.timed_out)
        return tick.next_at

    def state(self) -> dict[str, object]:
        """Flow-control state of this connection, for the admin view."""
        return {
            "session": self.session.session_id,
            "peer": self.peer,
            "client_id": self.client_id or None,
            "user": self.user,
            "connected": self.session.version is not None,
            "uptime": round(self.services.runtime.monotonic() - self.opened_at, 3),
            "reading": not self.stops,
            "stopped_by": sorted(str(reason) for reason in self.stops),
            "subscriptions": [s.state() for s in self.subscriptions.values()],
            "egress_policy": self.egress.queues.policy.value,
            "egress": self.egress.queues.stats(),
        }


# Requests that take effect only once the client's earlier ones are done, and before its
# later ones (see ClientConnection._act); and the reason its socket is not read meanwhile.
_ORDERED = frozenset({Connect, Subscribe, Unsubscribe})
_ORDERING = "waiting for earlier requests"

# What each request does (SENDs to a queue or topic go down the pipelines in batches).
_HANDLERS: dict[type, Callable[[ClientConnection, Any], None]] = {
    Connect: ClientConnection._connect,
    Subscribe: ClientConnection._subscribe,
    Unsubscribe: ClientConnection._unsubscribe,
    Acknowledge: ClientConnection._acknowledge,
    Begin: ClientConnection._begin,
    Commit: ClientConnection._commit,
    Abort: ClientConnection._abort,
    Recover: ClientConnection._recover,
    Disconnect: ClientConnection._disconnect,
}


def _window(headers: dict[str, str], names: tuple[str, ...], default: int) -> int:
    """A window size from the first of ``names`` the SUBSCRIBE carries, else the default."""
    for name in names:
        text = headers.get(name)
        if text is not None:
            if not (text.isascii() and text.isdigit()) or int(text) < 1:
                raise ProtocolError(
                    f"invalid {name} header", f"{name} must be a positive whole number"
                )
            return int(text)
    return default


def _selector(headers: dict[str, str]) -> Selector | None:
    """The SUBSCRIBE's compiled selector (none if the header is absent or blank); a bad
    one is refused with the position of what is wrong."""
    text = headers.get(SELECTOR, "")
    if not text.strip():
        return None
    try:
        return compile_selector(text)
    except SelectorError as error:
        raise Refused("invalid selector", f"{error}\n{error.pointer()}") from error


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
