"""What an operator does to the running server: the admin console's actions.

Make a destination, purge a queue, delete a destination, disconnect a client,
publish a message, browse a queue's messages (a page at a time, those a JMS
selector selects) and read one whole, copy one to another destination, and take
single messages out of a queue: delete them, move them to another destination,
or send a dead message back where it came from; list a topic's durable
subscriptions and remove one.
Messages delivered and not yet acknowledged are the consumer's: no action
touches them.

A queue's waiting messages are in memory (non-persistent ones, and the
persistent ones of its live buffer) and, past its live buffer, in the store
only (its backlog); an action covers both, reading the backlog in steps on
the store's reader worker. A stored message leaves the store in one store
transaction; a moved one is removed and appended to its new destination in
the same transaction (so a crash never leaves it in neither place nor in
both), and its copy then goes down that destination's pipeline like any
message. The results come back through ``done`` callbacks on the event loop.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import structlog

from wiremq.modules.client.connection import ClientConnection
from wiremq.modules.destinations.copies import Copier, sent_copy
from wiremq.modules.destinations.deadletter import DEAD_HEADERS, ORIGINAL_DESTINATION
from wiremq.modules.destinations.destination import Destination
from wiremq.modules.destinations.queue import Queue
from wiremq.modules.destinations.registry import Destinations, check_name
from wiremq.modules.destinations.topic import Topic
from wiremq.modules.domains import domain_of
from wiremq.modules.errors import Refused
from wiremq.modules.journal.recorder import Journal
from wiremq.modules.journal.schema import DELETED, PURGED
from wiremq.modules.message import Message
from wiremq.modules.persistence.store import Persistence
from wiremq.modules.pipeline.chain import Batch
from wiremq.modules.selector import SelectorError, compile_selector
from wiremq.modules.stomp.frames import ProtocolError
from wiremq.stores.api import Batch as StoredBatch
from wiremq.stores.api import Committed, StoreTransaction
from wiremq.stores.records import StoredMessage

log = structlog.get_logger("wiremq.operations")

READ_STEP = 500  # stored messages read at once while an action looks through a backlog
READ_BYTES = 4 << 20


class OperationError(Exception):
    """An action that cannot be done; ``status`` is the HTTP status that says why."""

    def __init__(self, status: int, problem: str) -> None:
        super().__init__(problem)
        self.status = status
        self.problem = problem


def not_found(what: str) -> OperationError:
    return OperationError(404, what)


@dataclass(frozen=True, slots=True)
class MessageView:
    """One waiting message as the console shows it."""

    message_id: str
    persistent: bool
    priority: int
    size: int
    expires: int
    redelivered: bool
    headers: dict[str, str]
    body: bytes  # its first bytes (Admin.browsebytes browsing, Admin.messagebytes opened)
    stored_at: int  # its position in the store (0: not stored)

    def json(self) -> dict[str, object]:
        """Its fields; a body that is text as text, else as hex (``encoding``)."""
        truncated = len(self.body) < self.size
        text = _text(self.body, truncated)
        body, encoding = (self.body.hex(), "hex") if text is None else (text, "text")
        return {
            "message_id": self.message_id,
            "persistent": self.persistent,
            "priority": self.priority,
            "size": self.size,
            "expires": self.expires,
            "redelivered": self.redelivered,
            "headers": self.headers,
            "body": body,
            "encoding": encoding,
            "body_truncated": truncated,
            "stored_at": self.stored_at,
        }


def _text(body: bytes, truncated: bool) -> str | None:
    """``body`` as text if it is UTF-8 without control characters but tab and line ends
    (the first bytes of a longer body may end inside a character); None if binary."""
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(body, final=not truncated)
    except UnicodeDecodeError:
        return None
    if any(ord(c) < 32 and c not in "\t\n\r" for c in text):
        return None
    return text


def _view(message: Message, head: int) -> MessageView:
    return MessageView(
        message.message_id,
        message.persistent,
        message.priority,
        message.size,
        message.expires,
        message.redelivered,
        dict(message.user_headers),
        message.body[:head],
        message.store_seq,
    )


def _stored_view(seq: int, stored: StoredMessage, head: int) -> MessageView:
    return MessageView(
        stored.message_id,
        True,
        stored.priority,
        len(stored.body),
        stored.expires,
        False,
        dict(stored.headers),
        stored.body[:head],
        seq,
    )


Failed = Callable[[Exception], None]
# A stored message waiting in a queue, at its position: go on looking (True) or stop.
Visit = Callable[[int, StoredMessage], bool]


@dataclass(frozen=True, slots=True)
class BrowsePage:
    """One page of a queue's waiting messages, and whether more follow it."""

    messages: list[MessageView]
    more: bool


def _selector(text: str) -> Callable[[Message], bool] | None:
    """The match of a JMS selector (None: blank, every message); a bad one is a 400."""
    if not text.strip():
        return None
    try:
        return compile_selector(text).match
    except SelectorError as error:
        raise OperationError(400, f"invalid selector: {error}") from None


class Operations:
    """The operator's actions on one server's destinations, clients and messages."""

    def __init__(
        self,
        destinations: Destinations,
        clients: set[ClientConnection],
        persistence: Persistence | None,
        submit: Callable[[str, Batch], None],
        journal: Journal,
        copier: Copier,
    ) -> None:
        """``submit(domain, batch)`` starts messages down a pipeline; ``journal`` records
        what the actions do to messages (discarded, moved); ``copier`` makes the copies of
        moved messages."""
        self.destinations = destinations
        self.clients = clients
        self.persistence = persistence
        self.submit = submit
        self.journal = journal
        self.copier = copier

    # -- finding things ------------------------------------------------------------------

    def destination(self, name: str) -> Destination:
        found = self.destinations.get(name)
        if found is None:
            raise not_found(f"no destination {name!r}")
        return found

    def queue(self, name: str) -> Queue:
        found = self.destination(name)
        if not isinstance(found, Queue):
            raise OperationError(400, f"{name!r} is a topic: only a queue holds its messages")
        return found

    def client(self, session: str) -> ClientConnection:
        for client in self.clients:
            if client.session.session_id == session:
                return client
        raise not_found(f"no connection with session {session!r}")

    # -- clients -------------------------------------------------------------------------

    def disconnect(self, session: str) -> None:
        """The client gets an ERROR saying so and its connection closes; what it had not
        acknowledged goes back to its queues."""
        client = self.client(session)
        log.info("operator.disconnected", session=session, peer=client.peer)
        client.drop(ProtocolError("disconnected", "the operator closed this connection"))

    # -- destinations ----------------------------------------------------------------------

    def check_new(self, name: str) -> None:
        """That ``name`` may be made a destination: 400 if it is no destination's name, 409
        if it exists."""
        try:
            check_name(name)
        except Refused as refusal:
            raise OperationError(400, refusal.detail) from None
        if self.destinations.get(name) is not None:
            raise OperationError(409, f"{name} exists already")

    def create(self, name: str) -> Destination:
        """Make the destination ``name`` now (``check_new`` first)."""
        self.check_new(name)
        return self.destinations.resolve(name)

    def purge(self, name: str, done: Callable[[int], None], failed: Failed) -> None:
        """Remove every message waiting in a queue (``done(count)``), in memory and in the
        store up to the last one stored when the purge began."""
        queue = self.queue(name)
        # A queue restored at start-up does not know where its backlog ends: to its end.
        upto = queue.left_upto or None
        taken = queue.take_waiting(lambda m: True)
        positions = [(name, m.store_seq) for m in taken if m.store_seq]
        count = len(taken)

        def finish(found: list[tuple[int, StoredMessage]], scanned: int) -> None:
            positions.extend((name, seq) for seq, _ in found)

            def removed(result: object) -> None:
                queue.backlog_purged(scanned)
                queue.fates.count("discarded", count + len(found))
                self.journal.operator_discarded(
                    taken, [((name, seq), m) for seq, m in found], PURGED
                )
                log.info("operator.purged", destination=name, messages=count + len(found))
                done(count + len(found))

            self._commit(StoreTransaction(removals=tuple(positions)), removed, failed)

        self._scan(queue, upto, lambda seq, m: True, finish, failed, purge=True)

    def delete(self, name: str, done: Callable[[int], None], failed: Failed) -> None:
        """Purge a destination and remove it (``done(messages removed)``). A destination
        with consumers (or durable subscriptions) is refused: they would make it again."""
        target = self.destination(name)
        if target.consumers:
            raise OperationError(
                409, f"{name} has {len(target.consumers)} consumers: disconnect them first"
            )
        if isinstance(target, Topic):
            if target.durable_count():
                raise OperationError(
                    409, f"{name} has durable subscriptions: they would lose their messages"
                )
            self.destinations.retire(target)
            log.info("operator.deleted", destination=name)
            done(0)
            return

        def purged(count: int) -> None:
            if not target.unused():
                failed(OperationError(409, f"{name} received messages meanwhile: not deleted"))
                return
            self.destinations.retire(target)
            log.info("operator.deleted", destination=name, messages=count)
            done(count)

        self.purge(name, purged, failed)

    # -- messages ----------------------------------------------------------------------------

    def browse(
        self,
        name: str,
        offset: int,
        limit: int,
        selector: str,
        head: int,
        done: Callable[[BrowsePage], None],
        failed: Failed,
    ) -> None:
        """The ``limit`` messages waiting in a queue after the first ``offset`` (of those
        ``selector`` selects), in delivery order, each with the first ``head`` bytes of its
        body: those in memory, then its backlog in the store, read in steps."""
        queue = self.queue(name)
        match = _selector(selector)
        page: list[MessageView] = []
        skipped = [0]

        def take(selected: bool, view: Callable[[], MessageView]) -> bool:
            """Count one waiting message in; False once the page is full and one more
            is met."""
            if not selected:
                return True
            if skipped[0] < offset:
                skipped[0] += 1
                return True
            if len(page) == limit:
                return False
            page.append(view())
            return True

        for waiting in queue.waiting():
            if not take(match is None or match(waiting), partial(_view, waiting, head)):
                done(BrowsePage(page, True))
                return
        more = [False]

        def visit(seq: int, stored: StoredMessage) -> bool:
            selected = match is None or match(Message.from_stored(stored, seq))
            more[0] = not take(selected, partial(_stored_view, seq, stored, head))
            return not more[0]

        self._read_waiting(queue, visit, lambda: done(BrowsePage(page, more[0])), failed)

    def message(
        self,
        name: str,
        message_id: str,
        head: int,
        done: Callable[[MessageView], None],
        failed: Failed,
    ) -> None:
        """One waiting message: all its headers and the first ``head`` bytes of its body
        (Admin.messagebytes: a body of any size is never sent whole to a browser); 404 if
        none of that id waits in the queue."""

        def found(views: list[MessageView]) -> None:
            if views:
                done(views[0])
            else:
                failed(not_found(f"no message {message_id!r} waits in {name}"))

        self._find(name, message_id, found, failed, head=head)

    def copy(
        self,
        name: str,
        message_id: str,
        to: str,
        done: Callable[[str], None],
        failed: Failed,
    ) -> None:
        """Copy one waiting message to ``to`` (it stays where it is): the copy carries its
        id, headers, body and expiry (``copies.py``) and goes down ``to``'s pipeline like
        any message, stored there if the original is persistent."""
        queue = self.queue(name)
        self._check_target(to)
        memory = [m for m in queue.waiting() if m.message_id == message_id]

        def send(content: StoredMessage, persistent: bool) -> None:
            copy = self.copier.copy(
                content, to, moved_headers(content, to), dead=False, persistent=persistent
            )
            log.info(
                "operator.message",
                destination=name,
                message_id=message_id,
                action=f"copied to {to}",
            )
            domain = domain_of(to)
            assert domain is not None
            self.submit(domain, [sent_copy(copy)])
            done(to)

        if memory:
            send(memory[0].to_stored(0), memory[0].persistent)
            return
        found: list[StoredMessage] = []

        def visit(seq: int, stored: StoredMessage) -> bool:
            if stored.message_id == message_id:
                found.append(stored)
            return not found

        def searched() -> None:
            if not found:
                failed(not_found(f"no message {message_id!r} waits in {name}"))
            else:
                send(found[0], True)

        self._read_waiting(queue, visit, searched, failed)

    def take(
        self,
        name: str,
        message_id: str,
        to: str | None,
        done: Callable[[str | None], None],
        failed: Failed,
    ) -> None:
        """Take one waiting message out of a queue: deleted (``to`` None) or moved to ``to``;
        ``done(destination)`` once it is. A message not waiting there (delivered, gone, or
        never there) is a 404."""
        queue = self.queue(name)
        if to is not None:
            self._check_target(to)
        found = queue.take_waiting(lambda m: m.message_id == message_id)
        if found:
            self._relocate(name, found[0], None, to, done, failed)
            return

        def searched(stored: list[tuple[int, StoredMessage]], scanned: int) -> None:
            if not stored:
                failed(not_found(f"no message {message_id!r} waits in {name}"))
                return
            seq, message = stored[0]
            self._relocate(name, None, (seq, message), to, done, failed)

        self._scan(
            queue,
            None,
            lambda seq, m: m.message_id == message_id,
            searched,
            failed,
            first_only=True,
        )

    def retry(
        self,
        name: str,
        message_id: str,
        done: Callable[[str | None], None],
        failed: Failed,
        may_write: Callable[[str], bool] = lambda destination: True,
    ) -> None:
        """Send a dead message back to the destination it came from (its
        ``original-destination`` header), without the headers that made it dead, if
        ``may_write`` there (else 403)."""

        def original(views: list[MessageView]) -> None:
            view = next((v for v in views if v.message_id == message_id), None)
            back = view.headers.get(ORIGINAL_DESTINATION) if view is not None else None
            if view is None or back is None:
                failed(
                    not_found(f"no message {message_id!r} waits in {name}")
                    if view is None
                    else OperationError(
                        400, f"message {message_id!r} has no {ORIGINAL_DESTINATION} header"
                    )
                )
                return
            if not may_write(back):
                failed(OperationError(403, f"permission denied: write {back[:200]}"))
                return
            try:
                self.take(name, message_id, back, done, failed)
            except OperationError as error:
                failed(error)

        self._find(name, message_id, original, failed)

    def _find(
        self,
        name: str,
        message_id: str,
        done: Callable[[list[MessageView]], None],
        failed: Failed,
        head: int = 0,
    ) -> None:
        """The view of one waiting message (a list of none or one), with the first ``head``
        bytes of its body (-1: all of it); nothing is taken or withheld."""
        queue = self.queue(name)
        memory = [_view(m, head) for m in queue.waiting() if m.message_id == message_id]
        if memory:
            done(memory)
            return
        found: list[MessageView] = []

        def visit(seq: int, stored: StoredMessage) -> bool:
            if stored.message_id == message_id:
                found.append(_stored_view(seq, stored, head))
            return not found

        self._read_waiting(queue, visit, lambda: done(found), failed)

    def _check_target(self, to: str) -> None:
        domain = domain_of(to)
        if domain is None:
            raise OperationError(400, f"{to!r} is neither /queue/NAME nor /topic/NAME")
        try:
            target = self.destinations.resolve(to)
        except Refused as refusal:
            raise OperationError(400, refusal.detail) from None
        if target.policy.shutdown:
            raise OperationError(409, f"{to} is shut down: it takes no new messages")

    def _relocate(
        self,
        source: str,
        message: Message | None,
        stored: tuple[int, StoredMessage] | None,
        to: str | None,
        done: Callable[[str | None], None],
        failed: Failed,
    ) -> None:
        """Delete a message taken from ``source`` or move it to ``to``: a stored one in one
        store transaction, then its copy down the new destination's pipeline."""
        seq = message.store_seq if message is not None else stored[0]  # type: ignore[index]
        content = stored[1] if stored is not None else message.to_stored(0)  # type: ignore[union-attr]
        message_id = content.message_id
        action = "deleted" if to is None else f"moved to {to}"
        copy = None
        if to is not None:
            persistent = message is None or message.persistent
            headers = moved_headers(content, to)
            copy = self.copier.copy(content, to, headers, dead=False, persistent=persistent)

        def moved(copy_seq: int | None) -> None:
            log.info("operator.message", destination=source, message_id=message_id, action=action)
            held = [message] if message is not None else []
            read = [((source, stored[0]), stored[1])] if stored is not None else []
            fates = self.destinations.services.fates
            if copy is None:
                self.journal.operator_discarded(held, read, DELETED)
                fates.count(source, "discarded", 1)
            else:
                self.journal.operator_moved(held, read, copy.destination)
                fates.count(source, "moved", 1)
                sent = sent_copy(copy, copy_seq or 0)
                if copy_seq:
                    self.journal.stored([sent])
                domain = domain_of(copy.destination)
                assert domain is not None
                self.submit(domain, [sent])
            done(to)

        if not seq:  # a non-persistent message: in memory only
            moved(None)
            return
        if copy is None:
            self._commit(StoreTransaction(removals=((source, seq),)), lambda _: moved(None), failed)
            return
        self._commit(
            StoreTransaction(moves=(((source, seq), copy),)),
            lambda result: moved(result.moved[0]),
            failed,
        )

    # -- the store -----------------------------------------------------------------------

    def _commit(
        self, transaction: StoreTransaction, done: Callable[[Committed], None], failed: Failed
    ) -> None:
        if transaction.empty or self.persistence is None:
            done(Committed())
            return
        self.persistence.commit(transaction, done, failed)

    def _read_waiting(
        self, queue: Queue, visit: Visit, done: Callable[[], None], failed: Failed
    ) -> None:
        """Read a queue's backlog in the store in steps, from its start, giving each
        waiting message to ``visit`` until it says stop or the backlog ends; then ``done``.
        Nothing is withheld (a look, not an action)."""
        start = queue.backlog_start()
        persistence = self.persistence
        if start is None or persistence is None:
            done()
            return

        def step(after: int) -> None:
            persistence.read(queue.name, after, READ_STEP, READ_BYTES, read, failed)

        def read(batch: StoredBatch) -> None:
            for seq, stored in queue.waiting_stored(batch.messages):
                if not visit(seq, stored):
                    done()
                    return
            if batch.at_end:
                done()
            else:
                step(batch.last_seq)

        step(start)

    def _scan(
        self,
        queue: Queue,
        upto: int | None,
        wanted: Callable[[int, StoredMessage], bool],
        done: Callable[[list[tuple[int, StoredMessage]], int], None],
        failed: Failed,
        first_only: bool = False,
        purge: bool = False,
    ) -> None:
        """Look through a queue's backlog in the store (up to ``upto``, or its end) for the
        waiting messages ``wanted``; they are withheld from the queue's own reads, and
        ``done`` gets them (the first only, if ``first_only``) and the last position
        looked at. A ``purge`` takes the expired messages met too."""
        start = queue.backlog_start()
        persistence = self.persistence
        found: list[tuple[int, StoredMessage]] = []
        if start is None or persistence is None:
            done(found, upto or 0)
            return

        def step(after: int) -> None:
            persistence.read(queue.name, after, READ_STEP, READ_BYTES, read, failed)

        def read(batch: StoredBatch) -> None:
            hits = [(seq, m) for seq, m in queue.waiting_stored(batch.messages) if wanted(seq, m)]
            if purge:
                hits += queue.waiting_stored(batch.expired)
            if upto is not None:
                hits = [(seq, m) for seq, m in hits if seq <= upto]
            if first_only:
                hits = hits[:1]
            found.extend(hits)
            queue.withhold([seq for seq, _ in hits])
            finished = batch.at_end or (upto is not None and batch.last_seq >= upto)
            if finished or (first_only and found):
                done(found, batch.last_seq if upto is None else min(upto, batch.last_seq))
            else:
                step(batch.last_seq)

        step(start)


def moved_headers(content: StoredMessage, to: str) -> dict[str, str]:
    """A moved message's headers: a dead one sent back where it came from loses the headers
    that made it dead."""
    headers = dict(content.headers)
    if headers.get(ORIGINAL_DESTINATION) == to:
        for name in DEAD_HEADERS:
            headers.pop(name, None)
    return headers
