"""The pipeline module interface, the chain that links modules, and the two pipelines.

Each domain (point-to-point, publish-subscribe) has one chain of modules, as
listed in config.xml: socket reader -> [admission, transaction,
thread/buffer, storage, distributing] -> socket writer. Messages travel in
batches (the SENDs of one read from a socket, say): a module receives a
batch in ``handle`` and, for each message, now or later, either passes it on
(``self.downstream.handle(batch)`` with any sub-list, in order) or refuses it
(``self.context.refuse(message, Refused(...))``). Every chain ends in a
terminal stage that tells each message's waiter (the session that sent it, or
the committed transaction it belongs to) that the server is done with it,
which releases its receipt; a refusal, wherever it happens, reaches the
waiter, and so the sender as an ERROR naming the message's receipt. A module
never deals with receipts itself.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import structlog

from wiremq.config.settings import Settings
from wiremq.modules.errors import Refused
from wiremq.modules.message import Batch, Message, Stage, waiting_runs
from wiremq.modules.runtime import Runtime

if TYPE_CHECKING:
    from wiremq.modules.destinations.registry import Destinations
    from wiremq.modules.flow.control import FlowControl
    from wiremq.modules.flow.spool import Spool
    from wiremq.modules.journal.recorder import Journal
    from wiremq.modules.persistence.store import Persistence
    from wiremq.modules.pipeline.transaction_manager import TransactionManager


class GivenBack(list[Message]):
    """A batch of messages the server already took in and takes in again (a rolled-back
    XA branch's acknowledged messages, back in their queues at new store positions):
    admitted again, not journaled as received again."""


log = structlog.get_logger("wiremq.pipeline")


def complete(message: Message) -> None:
    """Tell the message's waiter that the pipeline is done with it."""
    waiter = message.waiter
    if waiter is not None:
        message.waiter = None
        waiter.messages_completed([message])


def refuse(message: Message, refusal: Refused) -> None:
    """Tell the message's waiter that the server does not take the message."""
    waiter = message.waiter
    if waiter is not None:
        message.waiter = None
        waiter.message_refused(message, refusal)


class Terminal:
    """The end of every chain: tells each message's waiter that the server is done with
    it, once per run of messages of one waiter (a client's SENDs of one read)."""

    def handle(self, batch: Batch) -> None:
        for waiter, run in waiting_runs(batch):  # in C: the waiters taken, then told
            waiter.messages_completed(run)


@dataclass
class ModuleContext:
    """What a module may use: its domain, the settings, the runtime (timers, workers,
    the wall clock) and the server's shared pieces. Modules never import the event loop."""

    domain: str
    settings: Settings
    runtime: Runtime
    destinations: Destinations
    flow: FlowControl
    transactions: TransactionManager
    spool: Spool
    persistence: Persistence | None
    journal: Journal

    def refuse(self, message: Message, refusal: Refused) -> None:
        """Refuse a message: its sender gets an ERROR; a stored message leaves the store."""
        log.info(
            "message.refused",
            message_id=message.message_id,
            destination=message.destination,
            reason=refusal.detail or refusal.message,
        )
        self.journal.refused(message, refusal.detail or refusal.message)
        self._forget(message)
        refuse(message, refusal)

    def discard(self, message: Message, reason: str) -> None:
        """Drop a message on purpose: logged, its waiter released as if it was delivered;
        a stored message leaves the store."""
        log.info("message.discarded", message_id=message.message_id, reason=reason)
        self.journal.discarded((message,), reason)
        self._forget(message)
        complete(message)

    def _forget(self, message: Message) -> None:
        if message.store_seq and self.persistence is not None:
            self.persistence.forget([message])


class PipelineModule(ABC):
    """One processing step of a pipeline; see the module docstring for the contract."""

    #: the name config.xml uses for a built-in module
    name: ClassVar[str] = ""

    def __init__(self, context: ModuleContext) -> None:
        self.context = context
        self.downstream: Stage = Terminal()

    def bind(self, downstream: Stage) -> None:
        """Link this module to the next stage of its chain."""
        self.downstream = downstream

    @abstractmethod
    def handle(self, batch: Batch) -> None:
        """Process a batch of messages travelling down the chain."""


class Chain:
    """The modules of one domain, linked in order."""

    def __init__(self, domain: str, modules: list[PipelineModule]) -> None:
        self.domain = domain
        self.modules = modules
        stage: Stage = Terminal()
        for module in reversed(modules):
            module.bind(stage)
            stage = module
        self.head: Stage = stage


class Pipelines:
    """The chain of each domain: where messages enter the server."""

    def __init__(self) -> None:
        self.chains: dict[str, Chain] = {}

    def submit(self, domain: str, batch: Batch) -> None:
        """Start messages of one domain down its chain."""
        self.chains[domain].head.handle(batch)
