"""The storage module: persistent messages into the store, through the small processing buffer.

A persistent message that must be kept (every persistent queue message; a
persistent topic message while its topic has durable subscriptions) first
passes the spool checks, then waits in the small processing buffer (P2PStore
/ PubSubStore: maxdelay, maxdelayedmessagesnumber, maxdelayedmessagessize),
which group-commits it to the store; only after its batch is committed does
it go on, and so its receipt to the client. Where nothing after this step can
refuse a stored message (the distributing module comes next, and only it),
the receipt of a commit that carries one is handed to the store with it, for
its log writer to send the moment the record is synced (``early_answers``),
without waiting for the event loop. Non-persistent messages, and
messages already stored (read back, or moved to a dead message queue), go on
at once. Messages of a committed transaction are handed to their ``Unit``,
which stores the whole transaction in one store transaction. This module
only talks to the store interface; destinations receive messages only from
the distributing module.
"""

from __future__ import annotations

import structlog

from wiremq.config.groups import StoreBufferSettings
from wiremq.modules.domains import P2P
from wiremq.modules.errors import Refused
from wiremq.modules.message import Message, passes_through
from wiremq.modules.persistence.groupcommit import GroupCommit
from wiremq.modules.pipeline.chain import Batch, ModuleContext, PipelineModule, Terminal
from wiremq.modules.pipeline.distributing import DistributingModule
from wiremq.modules.runtime import Answer
from wiremq.stores.api import Committed, StoreTransaction

log = structlog.get_logger("wiremq.storage")

NO_STORE = Refused("message not accepted", "this server has no persistent store")


def early_answers(batch: list[Message]) -> list[Answer]:
    """The receipt of a batch about to be synced, for the log writer to send (``Answer``),
    if the batch carries one receipt and its client's socket can take it so; the message
    is marked, and its receipt is not sent again once it is distributed.

    One: that is a producer waiting alone, whose every cycle is a sync and the wake-ups
    around it. Where producers share a commit, sending all their receipts from the sync
    thread cost 8 and 16 producers 0.87-0.91 of their rate while the event loop waited
    for the sends, and gained nothing (0.97-1.00 for 8) once it ran the commit's
    callbacks meanwhile (bench/README.md, "Receipts at the sync" and "Polling on a quiet
    machine")."""
    receipted = [message for message in batch if message.receipt is not None]
    if len(receipted) != 1:
        return []
    [message] = receipted
    receipt, waiter = message.receipt, message.waiter
    answer = waiter.early_answer(receipt) if receipt is not None and waiter is not None else None
    if answer is None:
        return []
    message.answered = True
    return [answer]


class StorageModule(PipelineModule):
    name = "storage"

    def __init__(self, context: ModuleContext) -> None:
        super().__init__(context)
        self.persistence = persistence = context.persistence
        self.spool = context.spool
        self.buffer: GroupCommit[Message, Committed] | None = None
        if persistence is None:
            return
        group = "P2PStore" if context.domain == P2P else "PubSubStore"
        settings = StoreBufferSettings.read(context.settings, group)
        runtime = context.runtime

        def commit(batch: list[Message], done, failed) -> None:  # type: ignore[no-untyped-def]
            now_ms = runtime.now_ms()
            appends = tuple([m.to_stored(now_ms) for m in batch])
            answers = (lambda: early_answers(batch)) if self._answers_early() else None
            persistence.commit(StoreTransaction(appends=appends), done, failed, answers)

        self.buffer = GroupCommit(
            runtime,
            commit,
            self._stored,
            self._not_stored,
            size=lambda m: m.size,
            max_items=settings.maxdelayedmessagesnumber,
            max_bytes=settings.maxdelayedmessagessize,
            max_delay=settings.maxdelay / 1000,
            source=lambda m: m.sender,
        )

    def handle(self, batch: Batch) -> None:
        if passes_through(batch):  # none persistent: the common batch, checked in C
            self.downstream.handle(batch)
            return
        passing: Batch = []
        for message in batch:
            keep = message.persistent and self._keeps(message)
            if keep:
                target = message.target
                assert target is not None
                if self.persistence is None:
                    self.context.refuse(message, NO_STORE)
                    continue
                reason = self.spool.check(message, target)
                if reason is not None:
                    self.context.refuse(message, Refused("message not accepted", reason))
                    continue
                self.spool.accepted(message)
                self.spool.accepted_into_store(target, message)
            unit = message.unit
            if unit is not None:
                if passing:  # the unit may go on at once: what came before goes first
                    self.downstream.handle(passing)
                    passing = []
                unit.arrive(message, self, keep)
            elif keep:
                assert self.buffer is not None
                self.buffer.add(message)
            else:
                passing.append(message)
        if passing:
            self.downstream.handle(passing)

    def _answers_early(self) -> bool:
        """Whether a stored message's receipt may go before it reaches its destination:
        only the distributing module, which refuses nothing, comes after this step."""
        after = self.downstream
        return type(after) is DistributingModule and type(after.downstream) is Terminal

    def _keeps(self, message: Message) -> bool:
        """Whether a persistent message is to be stored here."""
        if message.store_seq:
            return False
        target = message.target
        assert target is not None
        if target.domain == P2P:
            return True
        return self.persistence is not None and self.persistence.keeps(target.name)

    def _stored(self, batch: list[Message], result: Committed) -> None:
        self.spool.committed(batch)
        for message, seq in zip(batch, result.positions, strict=True):
            message.store_seq = seq or 0
        self.context.journal.stored(batch)
        self.downstream.handle(batch)

    def _not_stored(self, batch: list[Message], error: Exception) -> None:
        self.spool.committed(batch)
        refusal = Refused("message not accepted", f"the message could not be stored: {error}")
        for message in batch:
            self.context.refuse(message, refusal)

    # -- committed transactions (see ``transaction.Unit``) ------------------------------

    def unit_stored(self, batch: Batch, kept: Batch) -> None:
        """A transaction's messages that reached this step (``kept``: those it stored) are
        stored: they go on."""
        self.spool.committed(kept)
        self.downstream.handle(batch)

    def unit_dropped(self, kept: Batch) -> None:
        """A transaction failed: its messages that reached this step are dropped."""
        self.spool.committed(kept)
