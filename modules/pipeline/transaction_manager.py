"""Transactions: the transaction manager, and committed units.

A SEND inside a transaction passes admission, then the transaction module
(``transaction.py``) hands it to the transaction manager, which holds it until
COMMIT; the SEND is acknowledged (its RECEIPT) once held. ACKs inside a
transaction are held too. ABORT, or the session going away, drops what is held.

A COMMIT meets here, whole (``TransactionManager.commit``): the held ACKs are
applied (their messages taken from their consumers, what the store must
change for them collected) and the held messages become a ``Unit``. Its
messages go on down their pipelines from each domain's transaction module
(which passes a unit's messages on), and the storage step of each pipeline
hands them to the unit instead of storing them itself. When every message
of the unit has reached a storage step (or been refused on the way), the
unit stores all its persistent messages and acknowledgements in ONE store
transaction, and only then do its messages go on to distribution. If any
message was refused before that, nothing of the transaction is applied: the
COMMIT fails with an ERROR saying which message and why, and the messages its
ACKs took are given back. The unit's owner is told the COMMIT is done (its
RECEIPT) once every message of the unit has left the pipeline. A module after
the storage step that refuses a message of a committed unit removes that
message only; the COMMIT then fails with an ERROR naming it, the rest of the
transaction having been applied.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, ClassVar, Protocol

import structlog

from wiremq.config.groups import TransactionMemorySettings
from wiremq.modules.errors import Refused
from wiremq.modules.journal.recorder import Journal
from wiremq.modules.journal.schema import (
    TRANSACTION_ABORTED,
    TRANSACTION_DISCARDED,
    TRANSACTION_FAILED,
)
from wiremq.modules.memory.txmemory import Candidate, TransactionMemory
from wiremq.modules.message import Batch, Message, Stage, StorageStep
from wiremq.modules.runtime import Answer
from wiremq.modules.sender import TransactionOwner
from wiremq.stores.api import Committed, StoreTransaction

if TYPE_CHECKING:
    from wiremq.modules.destinations.subscription import Subscription
    from wiremq.modules.persistence.store import Persistence

log = structlog.get_logger("wiremq.transaction")

NO_JOURNAL = Journal()


class UnitOwner(Protocol):
    """Who is told how a COMMIT ended (the session that asked for it, which sends its
    RECEIPT or ERROR; for an XA branch's second phase, the controller first)."""

    def unit_completed(self, unit: Unit) -> None: ...
    def unit_failed(self, unit: Unit, refusal: Refused) -> None: ...


# An acknowledgement held until COMMIT: applied then, it returns the messages it took
# from their consumer, their destination and what the store must change for it.
HeldAck = Callable[[], "tuple[Subscription, list[Message], StoreTransaction] | None"]
Taken = list["tuple[Subscription, list[Message]]"]  # messages acknowledgements took


def apply_acks(acks: list[HeldAck]) -> tuple[list[StoreTransaction], Taken]:
    """Apply a transaction's held acknowledgements, in order: what each changes in the
    store, and the messages they took from their consumers, by subscription."""
    changes = []
    taken = []
    for ack in acks:
        applied = ack()
        if applied is not None:
            subscription, messages, change = applied
            changes.append(change)
            if messages:
                taken.append((subscription, messages))
    return changes, taken


@dataclass(eq=False)
class Transaction:
    """One open transaction: what it holds until COMMIT, and whether it was discarded."""

    xa: ClassVar[bool] = False

    name: str
    owner: TransactionOwner | None  # the session it is on (None: an XA branch on none)
    started: float  # monotonic time of its BEGIN
    messages: list[Message] = field(default_factory=list)
    acks: list[HeldAck] = field(default_factory=list)
    nbytes: int = 0  # bytes of its messages, as the memory manager counts them
    # Why it was discarded (it is then rollback-only: its COMMIT fails with this).
    discarded: Refused | None = None

    def candidate(self, now: float) -> Candidate:
        """What the discard strategies know of it."""
        return Candidate(id(self), self.xa, self.nbytes, len(self.messages), self.started)

    def dropped(self) -> None:
        """What it held was dropped (discarded or rolled back); XA branches say more."""


class TransactionManager:
    """Open transactions of every session (standard ones, and the XA branches a session
    is associated with), the bytes they hold, each domain's transaction module, and the
    COMMIT of each."""

    def __init__(
        self,
        per_connection: int,
        memory: TransactionMemorySettings,
        monotonic: Callable[[], float],
        journal: Journal = NO_JOURNAL,
        persistence: Persistence | None = None,
    ) -> None:
        """``per_connection``: transactions one session may have open at once; ``journal``
        records the messages of transactions aborted or discarded; ``persistence``
        stores committed units (None: the server has no store)."""
        self.per_connection = per_connection
        self.monotonic = monotonic
        self.journal = journal
        self.persistence = persistence
        # Per connection, so that its transactions are counted and dropped without
        # looking at anyone else's.
        self._open: dict[TransactionOwner, dict[str, Transaction]] = {}
        self.modules: dict[str, Stage] = {}  # each domain's transaction module, if it has one
        self.memory: TransactionMemory[Transaction] = TransactionMemory(
            memory, self.discard, monotonic
        )

    def find(self, owner: TransactionOwner | None, name: str) -> Transaction | None:
        """The transaction ``name`` of the session, if it has one open (None: the server's
        own messages, which have none)."""
        if owner is None:
            return None
        return self._open.get(owner, {}).get(name)

    def _require(self, owner: TransactionOwner | None, name: str) -> Transaction:
        transaction = self.find(owner, name)
        if transaction is None:
            raise Refused(
                "unknown transaction", f"transaction {name!r} was not begun on this connection"
            )
        return transaction

    def check(self, owner: TransactionOwner | None, name: str, domain: str) -> None:
        """Refuse work for a transaction that is not open, or a domain without transactions."""
        if domain not in self.modules:
            raise Refused(
                "transactions disabled",
                f"the {domain} pipeline has no transaction module (see config.xml)",
            )
        self._require(owner, name)

    def begin(self, owner: TransactionOwner, name: str) -> None:
        transaction = Transaction(name, owner, self.monotonic())
        self.associate(owner, transaction)
        self.memory.opened(transaction)

    def associate(self, owner: TransactionOwner, transaction: Transaction) -> None:
        """Put ``transaction`` on the connection: its SENDs and ACKs name it from now on."""
        if not self.modules:
            raise Refused(
                "transactions disabled", "no pipeline has a transaction module (see config.xml)"
            )
        mine = self._open.setdefault(owner, {})
        if transaction.name in mine:
            raise Refused(
                "transaction already begun", f"transaction {transaction.name!r} is already open"
            )
        if len(mine) >= self.per_connection:
            raise Refused(
                "too many transactions",
                f"a connection may have {self.per_connection} transactions open at once",
            )
        mine[transaction.name] = transaction
        transaction.owner = owner

    def dissociate(self, transaction: Transaction) -> None:
        """Take ``transaction`` off its connection (it stays open: an ended XA branch)."""
        owner = transaction.owner
        if owner is None:
            return
        mine = self._open[owner]
        del mine[transaction.name]
        if not mine:
            del self._open[owner]
        transaction.owner = None

    def count(self, owner: TransactionOwner) -> int:
        """Transactions ``owner`` has open."""
        return len(self._open.get(owner, ()))

    def hold(self, owner: TransactionOwner | None, name: str, message: Message) -> None:
        """Hold a SEND of the transaction until COMMIT; a discarded transaction drops it
        (its COMMIT fails anyway)."""
        transaction = self._require(owner, name)
        if transaction.discarded is None:
            transaction.messages.append(message)
            self.memory.add(transaction, message.size)
        else:
            self.journal.discarded((message,), TRANSACTION_DISCARDED)

    def hold_ack(self, owner: TransactionOwner, name: str, ack: HeldAck) -> None:
        transaction = self._require(owner, name)
        if transaction.discarded is None:
            transaction.acks.append(ack)

    def take(self, owner: TransactionOwner, name: str) -> Transaction:
        """End a transaction for COMMIT: what it holds is the caller's now. A discarded
        one is refused, saying why it was discarded."""
        transaction = self._require(owner, name)
        self.end(transaction)
        if transaction.discarded is not None:
            raise transaction.discarded
        return transaction

    def end(self, transaction: Transaction) -> None:
        """The transaction is over (committed, aborted or rolled back): it leaves its
        connection and no longer counts in the memory held."""
        self.dissociate(transaction)
        self.memory.released(transaction)

    def abort(self, owner: TransactionOwner, name: str) -> None:
        transaction = self._require(owner, name)
        self.end(transaction)
        self.journal.discarded(transaction.messages, TRANSACTION_ABORTED)
        transaction.dropped()

    def abort_all(self, owner: TransactionOwner) -> None:
        """Drop every open transaction of a connection that went away."""
        for transaction in list(self._open.get(owner, {}).values()):
            self.end(transaction)
            self.journal.discarded(transaction.messages, TRANSACTION_ABORTED)
            transaction.dropped()
        self.memory.forget(owner)

    def discard(self, transaction: Transaction, refusal: Refused) -> None:
        """Discard an open transaction: to free memory (the reduce strategy chose it), or
        an XA branch past its timeout. The one place this happens.

        What it holds is dropped at once and it stays open as rollback-only: its
        later SENDs are dropped, its COMMIT fails with ``refusal`` (its ABORT
        succeeds); the connection it is on is told at once.
        """
        log.info(
            "transaction.discarded",
            transaction=transaction.name,
            xa=transaction.xa,
            messages=len(transaction.messages),
            bytes=transaction.nbytes,
            reason=refusal.detail,
        )
        self.journal.discarded(transaction.messages, TRANSACTION_DISCARDED)
        transaction.messages = []
        transaction.acks = []
        transaction.discarded = refusal
        self.memory.released(transaction)
        transaction.dropped()
        if transaction.owner is not None:
            transaction.owner.transaction_discarded(transaction.name, refusal)

    def state(self) -> dict[str, int]:
        """Open transactions and what they hold, for the admin view."""
        transactions = [t for mine in self._open.values() for t in mine.values()]
        return {
            "open": len(transactions),
            "messages": sum(len(t.messages) for t in transactions),
            "bytes": sum(m.size for t in transactions for m in t.messages),
            "acks": sum(len(t.acks) for t in transactions),
        }

    def commit(
        self,
        transaction: Transaction,
        owner: UnitOwner,
        receipt: str | None,
        changes: StoreTransaction | None = None,
    ) -> None:
        """COMMIT a transaction taken for it (``take``): apply its held acknowledgements
        and send its messages on as one ``Unit`` whose store transaction also makes
        ``changes``; ``owner`` is told how it ended (with ``receipt``)."""
        acknowledged, taken = apply_acks(transaction.acks)
        if changes is not None:
            acknowledged.append(changes)
        persistence = self.persistence
        unit = Unit(
            owner,
            transaction.name,
            receipt,
            transaction.messages,
            StoreTransaction.merged(acknowledged),
            taken,
            persistence,
            persistence.runtime.now_ms() if persistence is not None else 0,
            self.journal,
        )
        if not unit.messages:
            unit.store()
            return
        by_domain: dict[str, Batch] = {}
        for message in unit.messages:
            assert message.target is not None
            by_domain.setdefault(message.target.domain, []).append(message)
        for domain, batch in by_domain.items():
            self.modules[domain].handle(batch)


class Unit:
    """A committed transaction on its way down the pipelines (see the module docstring).

    It waits for its messages (their ``MessageWaiter``): each one's completion or
    refusal is reported here, and its owner is told once all are done.
    """

    def __init__(
        self,
        owner: UnitOwner,
        name: str,
        receipt: str | None,
        messages: list[Message],
        changes: StoreTransaction,
        taken: Taken,
        persistence: Persistence | None,
        now_ms: int,
        journal: Journal,
    ) -> None:
        self.owner = owner
        self.now_ms = now_ms  # when it was committed: its messages' store timestamp
        self.name = name
        self.receipt = receipt  # handed back to the owner: the COMMIT's RECEIPT
        self.messages = messages
        self.changes = changes  # what its acknowledgements change in the store
        self.taken = taken  # the messages its acknowledgements took, by subscription
        self.persistence = persistence
        self.journal = journal
        self.stored = False
        self.failure: Refused | None = None
        self._outstanding = len(messages)  # not yet at a storage step (nor refused)
        self._arrived: list[tuple[Message, StorageStep, bool]] = []
        self._finished = 0  # messages that left the pipeline (completed or refused)
        for message in messages:
            message.waiter = self
            message.unit = self

    # -- the storage rendezvous -----------------------------------------------------------

    def arrive(self, message: Message, step: StorageStep, store: bool) -> None:
        """A storage step took a message of this unit (``store``: it is to be stored)."""
        self._arrived.append((message, step, store))
        self._outstanding -= 1
        if not self._outstanding:
            self.store()

    def store(self) -> None:
        """Every message arrived (or was refused): store the whole transaction in one
        store transaction, or apply nothing of it if a message was refused."""
        if self.failure is not None:
            self._roll_back(self.failure)
            return
        to_store = [m for m, _, store in self._arrived if store]
        transaction = replace(
            self.changes, appends=tuple(m.to_stored(self.now_ms) for m in to_store)
        )
        if self.persistence is None or transaction.empty:
            self._stored(to_store, Committed(positions=(0,) * len(to_store)))
            return
        self.persistence.commit(
            transaction,
            lambda result: self._stored(to_store, result),
            lambda error: self._roll_back(
                Refused("transaction not stored", f"the store failed: {error}")
            ),
        )

    def _stored(self, stored: list[Message], result: Committed) -> None:
        self.stored = True
        for message, seq in zip(stored, result.positions, strict=True):
            message.store_seq = seq or 0
        self.journal.stored(stored)
        for step, batch, kept in self._by_step():
            step.unit_stored(batch, kept)
        if not self.messages:
            self.owner.unit_completed(self)

    def _roll_back(self, refusal: Refused) -> None:
        """Nothing of the transaction is applied: its messages are dropped and what its
        acknowledgements took is given back."""
        log.info("transaction.failed", transaction=self.name, reason=refusal.detail)
        for step, batch, kept in self._by_step():
            for message in batch:
                message.waiter = None
            self.journal.discarded(batch, TRANSACTION_FAILED)
            step.unit_dropped(kept)
        for subscription, messages in self.taken:
            self.journal.unacknowledged(subscription, messages)
            subscription.destination.count("acknowledged", messages, undone=True)
            subscription.destination.rejected(subscription, messages, requeue=True)
        self.owner.unit_failed(self, refusal)

    def _by_step(self) -> list[tuple[StorageStep, Batch, Batch]]:
        """The arrived messages by storage step: (step, all, those it keeps); the
        arrivals are cleared."""
        groups: dict[StorageStep, tuple[Batch, Batch]] = {}
        for message, step, keep in self._arrived:
            batch, kept = groups.setdefault(step, ([], []))
            batch.append(message)
            if keep:
                kept.append(message)
        self._arrived = []
        return [(step, batch, kept) for step, (batch, kept) in groups.items()]

    # -- MessageWaiter --------------------------------------------------------------------

    def messages_completed(self, messages: list[Message]) -> None:
        self._finished += len(messages)
        if self._finished == len(self.messages):
            if self.failure is None:
                self.owner.unit_completed(self)
            else:
                self.owner.unit_failed(self, self.failure)

    def early_answer(self, receipt: str) -> Answer | None:
        """None: a transaction's messages are stored with its COMMIT, which answers for
        them all once they are distributed."""
        return None

    def message_refused(self, message: Message, refusal: Refused) -> None:
        position = self.messages.index(message) + 1
        receipt = message.receipt
        which = f"message {position} of transaction {self.name!r}" + (
            f" (receipt {receipt!r})" if receipt is not None else ""
        )
        if self.stored:
            self.failure = self.failure or Refused(
                "transaction partly applied",
                f"{which} was refused after the transaction was stored: "
                f"{refusal.detail or refusal.message}",
            )
            self.messages_completed([message])
            return
        self.failure = self.failure or Refused(
            "transaction failed",
            f"{which} was refused: {refusal.detail or refusal.message}; "
            "nothing of the transaction was applied",
        )
        self._outstanding -= 1
        if not self._outstanding:
            self.store()
