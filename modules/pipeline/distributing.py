"""The distributing module: hands each message to its destination, the only way in.

Each message is enqueued at its destination (a queue keeps it for one
consumer, a topic hands it to every subscriber), then every destination the
batch touched dispatches once. A destination removed for being unused while
a message was on its way to it (waiting for its commit, or held in a
transaction) is made again from the message's destination name.
"""

from __future__ import annotations

from wiremq.modules.message import Target
from wiremq.modules.pipeline.chain import Batch, PipelineModule


class DistributingModule(PipelineModule):
    name = "distributing"

    def handle(self, batch: Batch) -> None:
        touched: dict[Target, None] = {}
        for message in batch:
            target = message.target
            assert target is not None
            if target.removed:
                target = message.target = self.context.destinations.resolve(target.name)
            target.enqueue(message)
            touched[target] = None
        self.context.destinations.services.traffic.received += len(batch)
        for destination in touched:
            destination.dispatch()
        self.downstream.handle(batch)
