"""One STOMP client connection: the adapter between the STOMP session and the core session.

Bytes from the socket go to the sans-io ``StompSession``, which returns
request events; this turns each into a call on the client's ``CoreSession``
(``core_session.py``): SENDs become messages, one batch per domain and read;
the ACKs and NACKs of a read act as one run; SUBSCRIBE, BEGIN, COMMIT and the
rest become the core's typed requests, their STOMP headers read here. The core
answers through this connection's ``SessionCallback`` methods, which the
session encodes into frames for the client's egress. What is STOMP's stays
here: the order in which a client's frames act, the bounds on a connection
before its CONNECT, heart-beats, and the ERROR that ends a connection once
everything the client sent before it is done. TCP, TLS and WebSocket
connections are all this one class (the transport differs, in ``server/``);
another protocol would be another adapter over the same core session.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import structlog

from wiremq.config.groups import ClientBounds
from wiremq.modules.client.core_session import Login, Sessions
from wiremq.modules.client.egress import Egress
from wiremq.modules.client.reading import ReadControl
from wiremq.modules.client.subscriptions import (
    AckNaming,
    Acknowledgement,
    AcknowledgementRefused,
    SubscribeRequest,
)
from wiremq.modules.domains import PREFIXES, domain_of, require_domain
from wiremq.modules.errors import Refused
from wiremq.modules.flow.unfinished import UnfinishedFrames
from wiremq.modules.ids import Ids
from wiremq.modules.memory.memwatch import MemWatch
from wiremq.modules.message import take_sends
from wiremq.modules.pipeline.chain import Batch
from wiremq.modules.runtime import Answer, Runtime, Timer
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
    SubscriptionError,
    TransactionError,
    Unsubscribe,
)
from wiremq.modules.stomp.frames import ProtocolError
from wiremq.modules.stomp.session import SessionSettings, StompSession

log = structlog.get_logger("wiremq.connection")

DURABLE_NAME = "activemq.subscriptionName"
SELECTOR = "selector"
BROWSER = "browser"
EXCLUSIVE = "activemq.exclusive"
# SUBSCRIBE headers that set a consumer's window, in messages and in bytes.
WINDOW_MESSAGES = ("consumerQueueEntriesSize", "activemq.prefetchSize", "prefetch-count")
WINDOW_BYTES = ("consumerQueueEntriesBytes", "prefetch-bytes")
# How each STOMP version's ACK names the subscription of the delivery.
ACK_NAMING = {"1.0": AckNaming.ID_IF_GIVEN, "1.1": AckNaming.ID, "1.2": AckNaming.NUMBER}

Failure: TypeAlias = ProtocolError | Refused
_new_tuple = tuple.__new__  # a NamedTuple without its Python-level __new__: one per ACK


@dataclass
class Admissions:
    """The connections whose CONNECT was taken (its login accepted or being checked), in
    all and per client address: what ``maxconnections`` and ``maxconnectionsperaddress``
    bound. A socket that has not sent CONNECT does not count: it may never, and counted,
    it made the CONNECTs of others fail while it was open (``connecttimeout`` and the
    descriptors the listeners may use bound those)."""

    total: int = 0
    per_address: Counter[str] = field(default_factory=Counter)


@dataclass
class ConnectionServices:
    """What a client connection uses of the rest of the server."""

    session: SessionSettings
    runtime: Runtime
    ids: Ids
    clients: set[ClientConnection]
    admitted: Admissions
    unfinished: UnfinishedFrames
    bounds: ClientBounds
    memwatch: MemWatch
    sessions: Sessions  # where its core session is opened


class ClientConnection:
    """One connected STOMP client: its ``SessionCallback`` (see the module docstring)."""

    def __init__(
        self,
        services: ConnectionServices,
        egress: Egress,
        peer: str,
        reader: ReadControl,
        now: float,
        certificate: Callable[[], str | None] | None = None,
    ) -> None:
        """``reader``: the socket's reading; ``certificate``: the user name the client's
        verified TLS certificate gives, asked when its CONNECT is read (None: not a TLS
        connection)."""
        self.services = services
        self.egress = egress
        self.peer = peer
        self.address = peer.rpartition(":")[0]  # the host of "host:port"
        self.reader = reader
        self.core_session = services.sessions.open(self, egress, self.address)
        self.session = StompSession(services.session, self.core_session.session_id, now)
        self._connect_deadline = services.runtime.call_later(
            services.bounds.connecttimeout, self._connect_overdue
        )
        self.opened_at = now
        self.certificate = certificate
        self.on_connected: Callable[[], None] | None = None  # the socket side's: heart-beats
        # SENDs read and not yet submitted: consecutive ones of one domain go down its
        # pipeline together, in the order they came.
        self._sends: Batch = []
        self._sends_domain = ""
        self._acks: list[Acknowledge] = []  # ACKs and NACKs read and not yet acted on
        self.published = 0  # SENDs to a queue or topic submitted (the console's rates)
        self._failing = False  # an ERROR is on its way: nothing more is done for the client
        self._held: list[Request] | None = None  # requests waiting for earlier ones (_act)
        self._checked = -1  # the pending frame MemWatch checked (by the decoder's count)
        # The rest of a frame refused for its size is being read and thrown away before the
        # connection closes (``_close``); until when, at the latest.
        self._discarding: Timer | None = None
        self._admitted = False  # counted in ``services.admitted``
        services.clients.add(self)

    # -- input ---------------------------------------------------------------------------

    def data_received(self, data: bytes, now: float) -> None:
        """Act on everything the bytes complete, in order."""
        events = self.session.receive_data(data, now)
        if self._discarding is not None:
            if not self._refused_frame_left():
                self._discarded()
            return
        if self._held is not None:
            self._held.extend(events)
        else:
            self._act(events)

    def _act(self, events: list[Request]) -> None:
        """Act on requests in order. SUBSCRIBE and UNSUBSCRIBE change where messages go, so
        each waits until what came before it is done (the messages sent before it are
        where they were going), and what comes after waits for it to be done (a durable
        subscription stored; for CONNECT, its login checked): the rest is held, and the
        socket not read, meanwhile. Once the client is failing (an ERROR is on its way),
        nothing more it sent acts: not even a SEND read behind a refused CONNECT."""
        core = self.core_session
        progress = core.progress
        sender = core.sender
        new_message = self.services.ids.message
        now_ms = self.services.runtime.now_ms()  # when these messages were received
        index, count = 0, len(events)
        while index < count:
            event = events[index]
            kind = type(event)
            if kind is Acknowledge:
                if self._sends:
                    self._submit()
                self._acks.append(event)
                index += 1
                continue
            if kind is Send:
                domain = domain_of(event.destination)
                if domain is not None:
                    if domain != self._sends_domain or self._acks:
                        self._submit()
                        self._sends_domain = domain
                    # this SEND and those after it to the same domain, made in C
                    index = take_sends(
                        events,
                        index,
                        Send,
                        PREFIXES[domain],
                        self._sends,
                        new_message,
                        sender,
                        progress,
                        now_ms,
                    )
                    continue
            self._submit()
            if self._failing:
                break  # the client is told it failed: nothing it sent after that acts
            ordered = kind in _ORDERED
            if ordered and progress.count and not self._failing:
                self._hold(events[index:])
                return
            if isinstance(event, BadInput):
                self.fail(event.error)
                index += 1
                continue
            try:
                self._handle(event)
            except (ProtocolError, Refused) as failure:
                self.fail(failure, event.headers.get("receipt"))
            sender = core.sender  # made once a CONNECT's login is accepted
            index += 1
            if ordered and progress.count and not self._failing:
                self._hold(events[index:])
                return
        self._submit()
        session = self.session
        decoder = session.decoder
        buffered = decoder.buffered
        self.services.unfinished.held(core.reading, buffered)
        if buffered and decoder.completed != self._checked:
            self._check_memory()
        if session.version is None:
            self._check_connect_size()

    def _check_memory(self) -> None:
        """MemWatch's check before a large frame is read (once per frame)."""
        decoder = self.session.decoder
        memwatch = self.services.memwatch
        size = decoder.pending_size
        if size <= memwatch.settings.messagethreshold:
            return
        self._checked = decoder.completed
        if not memwatch.check_frame(self.core_session.reading, size):
            self.fail(
                Refused(
                    "server memory full",
                    f"a frame of {size} bytes arrived while the server's memory is at its "
                    "top level (MemWatch.whenfull is disconnect)",
                )
            )

    def _check_connect_size(self) -> None:
        """Until CONNECT is read, a client may only make the server hold a little."""
        limit = self.services.bounds.maxconnectsize
        if self.session.decoder.buffered > limit:
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
        self.core_session.reading.stop_reading(_ORDERING)
        self.core_session.progress.when_idle(lambda: self.services.runtime.call_soon(self._release))

    def _release(self) -> None:
        held, self._held = self._held, None
        self.core_session.reading.start_reading(_ORDERING)
        if held and not self.session.closed:
            self._act(held)

    def _handle(self, event: Request) -> None:
        if type(event) is Send:  # not batched: its destination is neither queue nor topic
            require_domain(event.destination)
        _HANDLERS[type(event)](self, event)

    def _submit(self) -> None:
        """Act on the run of SENDs, or of ACKs and NACKs, read so far (one of them at most
        is gathering): what came after a failure does not act."""
        if self._sends:
            batch, self._sends = self._sends, []
            if not self._failing:
                self.published += len(batch)
                self.core_session.send(self._sends_domain, batch)
        elif self._acks:
            acks, self._acks = self._acks, []
            if not self._failing:
                self._acknowledge(acks)

    # -- SessionCallback -------------------------------------------------------------------

    def logged_in(self) -> None:
        """The login was accepted: CONNECTED, and heart-beats start."""
        if self.session.closed:
            return
        core = self.core_session
        log.info(
            "client.connected",
            session=self.session.session_id,
            peer=self.peer,
            login=core.user,
            client_id=core.client_id or None,
        )
        self.egress.push(self.session.send(Connected()))
        self.session.last_received = self.services.runtime.monotonic()  # not silent yet
        if self.on_connected is not None:
            self.on_connected()

    def completed(self, receipt: str) -> None:
        self._reply(Receipt(receipt))

    def early_answer(self, receipt: str) -> Answer | None:
        writer = self.egress.writer
        if writer is None or not writer.can_answer(self.egress):
            return None
        data = self.session.send(Receipt(receipt))
        return writer.answer(data) if data else None

    def refused(self, refusal: Refused, receipt: str | None) -> None:
        """The ERROR takes the place of anything waiting (a DISCONNECT's receipt, say)."""
        self.fail(refusal, receipt)

    def transaction_discarded(self, name: str, refusal: Refused) -> None:
        """A transaction of this client was discarded: it is told at once (its COMMIT
        will fail with the same ERROR)."""
        self._reply(TransactionError(name, refusal.message, refusal.detail))

    def disconnect(self, refusal: Refused) -> None:
        self.drop(refusal)

    def rights_changed(self) -> None:
        """The users file changed: a client whose user was removed is disconnected with an
        ERROR; each subscription whose destination it may no longer read ends with an
        ERROR naming it (``SubscriptionError``), and the connection goes on."""
        access = self.core_session.access
        if access is None or self.session.closed or self._failing:
            return
        if access.removed:
            log.info("client.user_removed", session=self.session.session_id, peer=self.peer)
            self.fail(Refused("user removed", f"{access.who} is no longer in the users file"))
            return
        for subscription in self.core_session.subscriptions.review():
            name, sub_id = subscription.destination.name, subscription.sub_id
            self._reply(
                SubscriptionError(
                    sub_id,
                    name,
                    f"permission revoked: read {name}",
                    f"{access.who} may no longer read {name}: subscription {sub_id!r} ended",
                )
            )

    def pause(self) -> None:
        """Flow control stops reading the client: its silence meanwhile is not its own.
        (Not while the rest of a refused frame is read: it is thrown away.)"""
        self.session.reading_stopped(True, self.services.runtime.monotonic())
        if self._discarding is None:
            self.reader.pause()

    def resume(self) -> None:
        self.session.reading_stopped(False, self.services.runtime.monotonic())
        self.reader.resume()

    def _reply(self, reply: Receipt | Recovered | TransactionError | SubscriptionError) -> None:
        data = self.session.send(reply)
        if data:
            self.egress.push(data)

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
        self.core_session.progress.when_idle(lambda: self._close(self.session.send(error)))

    def _close(self, last_frame: bytes = b"") -> None:
        """Close once queued frames, then ``last_frame``, are written. After a frame refused
        for its size, ``last_frame`` (its ERROR) is written at once, and the connection
        closes only once the rest of that frame is read and thrown away (within
        ``discardbytes`` and ``discardtime``): closed with unread bytes, the socket would
        be reset, the client's write of the frame would fail and the ERROR be lost."""
        if self.egress.close_requested or self._discarding is not None:
            return
        self.session.reading = False
        self.core_session.close()
        if self._refused_frame_left():
            self.egress.push(last_frame)
            self._discarding = self.services.runtime.call_later(
                self.services.bounds.discardtime, self._discarded
            )
            self.reader.resume()  # whatever stopped it: what comes now is thrown away
            return
        self.egress.close_after_flush(last_frame)

    def _refused_frame_left(self) -> bool:
        """Whether bytes of a frame refused for its size are still to come, within the
        bound on what is read of it."""
        decoder = self.session.decoder
        return bool(decoder.refused_rest) and (
            decoder.discarded < self.services.bounds.discardbytes
        )

    def _discarded(self) -> None:
        """The rest of the refused frame was read (or the time or bytes for it are up):
        close once the ERROR is written."""
        timer, self._discarding = self._discarding, None
        if timer is not None:
            timer.cancel()
            self.egress.close_after_flush()

    def connection_lost(self) -> None:
        """The socket closed: end everything this client had."""
        self.session.closed = True
        self.session.reading = False
        self._connect_deadline.cancel()
        if self._discarding is not None:
            self._discarding.cancel()
            self._discarding = None
        self.core_session.connection_lost()
        services = self.services
        reading = self.core_session.reading
        services.unfinished.forget(reading)
        services.memwatch.forget(reading)
        services.clients.discard(self)
        if self._admitted:
            self._admitted = False
            admitted = services.admitted
            admitted.total -= 1
            admitted.per_address[self.address] -= 1
            if not admitted.per_address[self.address]:
                del admitted.per_address[self.address]
        log.info("client.disconnected", session=self.session.session_id, peer=self.peer)

    def drop(self, failure: Failure) -> None:
        """Disconnect a client that does not read (a slow subscriber): its ERROR is sent if
        its socket takes it, and the connection is closed without waiting."""
        self.egress.abort = True
        self.fail(failure)

    # -- requests ------------------------------------------------------------------------

    def _connect(self, event: Connect) -> None:
        """The login is checked (maybe on a worker, maybe after a failure's delay); what
        the client sent after CONNECT waits for it (``_ORDERED``)."""
        self._connect_deadline.cancel()
        self._check_room()
        headers = event.headers
        version = self.session.version
        assert version is not None  # the session negotiated it
        self.core_session.login(
            Login(
                headers.get("login"),
                headers.get("passcode"),
                headers.get("client-id", ""),
                self.certificate() if self.certificate is not None else None,
                ACK_NAMING[version],
            )
        )

    def _check_room(self) -> None:
        """Refuse a client over the limits on connections, in all and from its address;
        else count it (``Admissions``)."""
        services = self.services
        bounds = services.bounds
        admitted = services.admitted
        if admitted.total >= bounds.maxconnections:
            raise Refused(
                "too many connections",
                f"the server takes at most {bounds.maxconnections} connections at once",
            )
        if admitted.per_address[self.address] >= bounds.maxconnectionsperaddress:
            raise Refused(
                "too many connections",
                f"the server takes at most {bounds.maxconnectionsperaddress} connections at "
                f"once from one address ({self.address})",
            )
        admitted.total += 1
        admitted.per_address[self.address] += 1
        self._admitted = True

    def _disconnect(self, event: Disconnect) -> None:
        """Read nothing more; the receipt follows once earlier frames are done."""
        receipt = event.headers.get("receipt")

        def goodbye() -> None:
            if receipt is not None:
                self._reply(Receipt(receipt))
            self._close()

        self.core_session.progress.when_idle(goodbye)

    def _subscribe(self, event: Subscribe) -> None:
        headers = event.headers
        browse = headers.get(BROWSER, "").lower() == "true"
        durable_name = _durable_name(headers, event.sub_id)
        request = SubscribeRequest(
            event.sub_id,
            event.destination,
            event.ack,
            self.session.version or "1.2",
            headers.get(SELECTOR, ""),
            browse,
            durable_name,
            DURABLE_NAME in headers,
            _window(headers, WINDOW_MESSAGES),
            _window(headers, WINDOW_BYTES),
            headers.get(EXCLUSIVE, "").lower() == "true",
        )
        self.core_session.subscriptions.subscribe(request, headers.get("receipt"))

    def _unsubscribe(self, event: Unsubscribe) -> None:
        self.core_session.subscriptions.unsubscribe(
            event.sub_id,
            _durable_name(event.headers, event.sub_id),
            event.headers.get("receipt"),
        )

    def _acknowledge(self, events: list[Acknowledge]) -> None:
        """ACKs and NACKs read together act together (``SessionSubscriptions.acknowledge``)."""
        acks = [
            _new_tuple(
                Acknowledgement,
                (
                    message_id,
                    subscription,
                    nack,
                    not nack or headers.get("requeue", "true").lower() != "false",
                    headers.get("transaction"),
                    headers.get("receipt"),
                ),
            )
            for nack, message_id, subscription, headers in events
        ]
        try:
            self.core_session.subscriptions.acknowledge(acks)
        except AcknowledgementRefused as refused:
            self.fail(refused, refused.receipt)

    def _begin(self, event: Begin) -> None:
        xa = event.headers.get("xa")
        receipt = event.headers.get("receipt")
        core = self.core_session
        if xa is None:
            core.transactions.begin(event.transaction, receipt)
        elif xa == "start":
            core.xa.start(event.transaction, event.headers.get("xa-timeout"), receipt)
        elif xa == "join":
            core.xa.join(event.transaction, receipt)
        else:
            raise ProtocolError("invalid xa header", "BEGIN takes xa:start or xa:join")

    def _commit(self, event: Commit) -> None:
        xa = event.headers.get("xa")
        receipt = event.headers.get("receipt")
        core = self.core_session
        if xa is None:
            core.transactions.commit(event.transaction, receipt)
        elif xa == "end":
            core.xa.end(event.transaction, receipt)
        elif xa == "prepare":
            core.xa.prepare(event.transaction, receipt)
        elif xa in ("commit", "onephase"):
            core.xa.commit(event.transaction, xa == "onephase", receipt)
        else:
            raise ProtocolError(
                "invalid xa header", "COMMIT takes xa:end, xa:prepare, xa:commit or xa:onephase"
            )

    def _abort(self, event: Abort) -> None:
        """ABORT of a standard transaction, or the rollback of an XA branch (plain, or
        ``xa:rollback``)."""
        xa = event.headers.get("xa")
        receipt = event.headers.get("receipt")
        if xa is None:
            self.core_session.abort(event.transaction, receipt)
        elif xa == "rollback":
            self.core_session.xa.rollback(event.transaction, receipt)
        else:
            raise ProtocolError("invalid xa header", "ABORT takes xa:rollback")

    def _recover(self, event: Recover) -> None:
        self._reply(Recovered(event.headers["receipt"], self.core_session.xa.recover()))

    # -- heart-beats and the admin view ----------------------------------------------------

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
        core = self.core_session
        return {
            "session": self.session.session_id,
            "peer": self.peer,
            "client_id": core.client_id or None,
            "user": core.user,
            "connected": self.session.version is not None,
            "uptime": round(self.services.runtime.monotonic() - self.opened_at, 3),
            "reading": core.reading.reading,
            "stopped_by": core.reading.stopped_by(),
            "subscriptions": core.subscriptions.state(),
            "egress_policy": self.egress.queues.policy.value,
            "egress": self.egress.queues.stats(),
            "published": self.published,
            "messages_sent": self.egress.queues.messages_written(),
        }


# Requests that take effect only once the client's earlier ones are done, and before its
# later ones (see ClientConnection._act); and the reason its socket is not read meanwhile.
_ORDERED = frozenset({Connect, Subscribe, Unsubscribe})
_ORDERING = "waiting for earlier requests"

# What each request does (SENDs to a queue or topic go down the pipelines in batches, and
# ACKs and NACKs read together act together: ``_submit``).
_HANDLERS: dict[type, Callable[[ClientConnection, Any], None]] = {
    Connect: ClientConnection._connect,
    Subscribe: ClientConnection._subscribe,
    Unsubscribe: ClientConnection._unsubscribe,
    Begin: ClientConnection._begin,
    Commit: ClientConnection._commit,
    Abort: ClientConnection._abort,
    Recover: ClientConnection._recover,
    Disconnect: ClientConnection._disconnect,
}


def _window(headers: dict[str, str], names: tuple[str, ...]) -> int | None:
    """A window size from the first of ``names`` the SUBSCRIBE carries (None: none does)."""
    for name in names:
        text = headers.get(name)
        if text is not None:
            if not (text.isascii() and text.isdigit()) or int(text) < 1:
                raise ProtocolError(
                    f"invalid {name} header", f"{name} must be a positive whole number"
                )
            return int(text)
    return None


def _durable_name(headers: dict[str, str], sub_id: str) -> str | None:
    """The durable subscription a SUBSCRIBE or UNSUBSCRIBE names, or None if none.

    One rule for both, so that an UNSUBSCRIBE finds the subscription its
    SUBSCRIBE made: ``activemq.subscriptionName`` names it (even when empty;
    scoped by CONNECT's ``client-id``, which it then needs), ``durable:true`` /
    ``persistent:true`` name it by the subscription id (scoped by ``client-id``
    when there is one).
    """
    if DURABLE_NAME in headers:
        return headers[DURABLE_NAME]
    if "true" in (headers.get("durable"), headers.get("persistent")):
        return sub_id
    return None
