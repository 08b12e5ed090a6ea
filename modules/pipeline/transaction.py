"""The transaction module: where a transacted SEND leaves its pipeline until COMMIT.

It hands each transacted SEND to the transaction manager (``transaction_manager.py``),
which holds it; at COMMIT the manager hands the transaction's messages back here, and
they go on down the pipeline as one committed unit.
"""

from __future__ import annotations

from wiremq.modules.errors import Refused
from wiremq.modules.message import passes_through
from wiremq.modules.pipeline.chain import Batch, ModuleContext, PipelineModule, complete


class TransactionModule(PipelineModule):
    """Passes non-transacted messages straight on; holds transacted ones until COMMIT;
    and passes the messages of a committed unit on (the manager hands them here)."""

    name = "transaction"

    def __init__(self, context: ModuleContext) -> None:
        super().__init__(context)
        self.manager = context.transactions
        self.manager.modules[context.domain] = self

    def handle(self, batch: Batch) -> None:
        if passes_through(batch):  # none transacted: the common batch, checked in C
            self.downstream.handle(batch)
            return
        passing = []
        for message in batch:
            name = message.transaction
            if name is None or message.unit is not None:
                passing.append(message)
                continue
            sender = message.sender
            try:
                self.manager.hold(sender.transactions if sender else None, name, message)
            except Refused as refusal:
                self.context.refuse(message, refusal)
                continue
            complete(message)  # the SEND is accepted now: its receipt need not wait
        if passing:
            self.downstream.handle(passing)
