"""The core session: what one client may ask of the server, whatever protocol it speaks.

A protocol adapter (the STOMP connection, ``connection.py``) turns what its
client sends into calls on a ``CoreSession``, as ActiveMQ Artemis's STOMP
module calls its core ``ServerSession``; the core never sees a frame. A
session is opened with ``Sessions.open(callback, egress, address)``; its API:

- ``login(Login)``: who the client is; answered by ``SessionCallback.logged_in``
  or ``refused``. Nothing else is asked before it is answered.
- ``send(domain, batch)``: messages (made by the adapter, each carrying the
  session's ``sender``) go down the domain's pipeline.
- ``subscriptions`` (``subscriptions.py``): ``subscribe(SubscribeRequest)``,
  ``unsubscribe``, ``acknowledge`` (ACK and NACK).
- ``transactions`` (``transactions.py``): ``begin``, ``commit``; ``abort`` here
  (an ABORT of a name that is no standard transaction is an XA rollback).
- ``xa`` (``xa_verbs.py``): ``start``, ``join``, ``end``, ``prepare``,
  ``commit``, ``rollback``, ``recover() -> list[str]``.
- ``close()``: nothing more is delivered; ``connection_lost()``: everything
  the session had is ended.

Every request that may carry a receipt takes it and hands it back through the
callback's ``completed`` once the request took effect (at once, or when its
work is done: a message delivered, an acknowledgement stored, a COMMIT stored
and delivered), or names it in ``refused``. A refusal at once is raised
(``Refused``); the adapter answers it. ``progress`` counts the work still in
progress, so that the adapter can make a DISCONNECT's receipt, or an ERROR,
wait for everything the client sent before it.

The core calls the protocol side back only through ``SessionCallback``, as
Artemis's core calls ``SessionCallback``; deliveries go to the session's
``Egress`` (the subscriptions queue their MESSAGE frames there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from wiremq.modules.client.egress import Egress
from wiremq.modules.client.progress import WorkInProgress
from wiremq.modules.client.reading import ReadControl, ReadGate
from wiremq.modules.client.subscriptions import AckNaming, SessionSubscriptions
from wiremq.modules.client.transactions import SessionTransactions
from wiremq.modules.client.xa_verbs import SessionXA
from wiremq.modules.destinations.registry import Destinations
from wiremq.modules.errors import Refused
from wiremq.modules.ids import Ids
from wiremq.modules.journal.recorder import Journal
from wiremq.modules.persistence.store import Persistence
from wiremq.modules.pipeline.chain import Batch, Pipelines
from wiremq.modules.pipeline.transaction_manager import TransactionManager
from wiremq.modules.pipeline.xa import XAController
from wiremq.modules.runtime import Answer
from wiremq.modules.security.authentication import Authenticator
from wiremq.modules.security.permissions import Access
from wiremq.modules.sender import Sender


class SessionCallback(ReadControl, Protocol):
    """All the core asks of the protocol side of a session (``ReadControl``'s pause and
    resume included: flow control stops reading the client)."""

    def logged_in(self) -> None:
        """The login was accepted (``CoreSession.user``): the client is told."""

    def completed(self, receipt: str) -> None:
        """The request (or message) that carried ``receipt`` took effect."""

    def early_answer(self, receipt: str) -> Answer | None:
        """The receipt of a message whose store commit is about to be synced, held for
        the log writer to send the moment it is (``modules/runtime.Answer``); None if the
        client's connection cannot take it that way now (it then goes as usual)."""

    def refused(self, refusal: Refused, receipt: str | None) -> None:
        """A request (the one that carried ``receipt``, if any) was refused: the client
        is told, once what it sent before is done, and the session ends."""

    def transaction_discarded(self, name: str, refusal: Refused) -> None:
        """An open transaction was discarded (memory, an XA timeout): the client is told
        at once and the session goes on (its COMMIT fails with ``refusal``)."""

    def disconnect(self, refusal: Refused) -> None:
        """End the connection without waiting for a client that does not read (a slow
        subscriber's); ``refusal`` says why, if the client still takes it."""


@dataclass(frozen=True, slots=True)
class Login:
    """Who a client says it is, and how its session names deliveries."""

    login: str | None
    passcode: str | None
    client_id: str  # scopes its durable subscriptions ("": none)
    certificate: str | None  # the user name its verified TLS certificate gives, if any
    ack_naming: AckNaming  # how its acknowledgements name their subscription


@dataclass
class Sessions:
    """Where core sessions are opened: what each uses of the rest of the server."""

    ids: Ids
    pipelines: Pipelines
    destinations: Destinations
    transactions: TransactionManager
    xa: XAController
    persistence: Persistence | None
    journal: Journal
    authenticator: Authenticator
    max_subscriptions: int  # per session

    def open(self, callback: SessionCallback, egress: Egress, address: str) -> CoreSession:
        """A new session of a client at ``address`` (its host: failed logins are counted
        per address); ``egress``: where its deliveries and answers are queued."""
        return CoreSession(self, self.ids.session(), callback, egress, address)


class CoreSession:
    """One client's session with the core (see the module docstring)."""

    def __init__(
        self,
        services: Sessions,
        session_id: str,
        callback: SessionCallback,
        egress: Egress,
        address: str,
    ) -> None:
        self.services = services
        self.session_id = session_id
        self.callback = callback
        self.address = address
        self.reading = ReadGate(callback)  # why the client is not read: its Producer
        egress.throttle = self.reading
        self.progress = WorkInProgress(callback)
        self.transactions = SessionTransactions(
            services.transactions, self.progress, self.reading, callback.transaction_discarded
        )
        self.subscriptions = SessionSubscriptions(
            services.destinations,
            services.persistence,
            services.transactions,
            self.transactions,
            services.journal,
            services.max_subscriptions,
            egress,
            self.progress,
            callback.disconnect,
            session_id,
        )
        self.xa = SessionXA(services.xa, self.transactions, self.progress)
        self.client_id = ""
        self.user: str | None = None  # the login, once accepted
        # What the user may do (None: anything, there are no users): checked on SEND by
        # the admission module, on SUBSCRIBE and durable subscriptions by the session.
        self.access: Access | None = None
        self.sender: Sender | None = None  # made once the login is accepted

    def login(self, login: Login) -> None:
        """Check who the client is (maybe on a worker, maybe after a failure's delay): the
        callback's ``logged_in`` or ``refused`` answers, maybe before this returns."""
        self.client_id = self.subscriptions.client_id = login.client_id
        self.subscriptions.ack_naming = login.ack_naming
        self.progress.started()
        self.services.authenticator.login(
            login.login,
            login.passcode,
            self.address,
            login.certificate,
            self._logged_in,
            self._login_refused,
        )

    def _logged_in(self, access: Access | None, user: str | None) -> None:
        self.access = self.subscriptions.access = access
        self.user = user
        self.sender = Sender(access, self.reading, self.transactions)
        self.callback.logged_in()
        self.progress.done(None)

    def _login_refused(self, refusal: Refused) -> None:
        self.progress.failed(refusal, None)

    def send(self, domain: str, batch: Batch) -> None:
        """Messages of one domain, in the order they were sent, go down its pipeline; each
        one's receipt is answered once the pipeline is done with it."""
        self.progress.started(len(batch))
        self.services.pipelines.submit(domain, batch)

    def abort(self, name: str, receipt: str | None) -> None:
        """ABORT a standard transaction, or roll back the XA branch ``name`` names (a
        prepared branch's receipt is answered once its rollback is stored)."""
        if self.transactions.is_standard(name):
            self.transactions.abort(name, receipt)
        else:
            self.xa.rollback(name, receipt)

    def close(self) -> None:
        """End the subscriptions (what they had not acknowledged goes back to their queues)
        and drop the open transactions: nothing more is delivered to this session."""
        self.subscriptions.end_all()
        self.transactions.abort_all()

    def connection_lost(self) -> None:
        """The client is gone: everything the session had ends."""
        self.close()
        self.services.destinations.forget_producer(self.reading)
