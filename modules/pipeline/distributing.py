"""The distributing module: hands each message to its destination, the only way in.

Each run of messages to one destination is enqueued there at once (a queue
keeps them for one consumer each, a topic hands them to every subscriber),
then every destination the batch touched dispatches once. A destination
removed for being unused while a message was on its way to it (waiting for its
commit, or held in a transaction) is made again from the message's
destination name.
"""

from __future__ import annotations

from collections.abc import Iterable

from wiremq.modules.message import Target, shared_target
from wiremq.modules.pipeline.chain import Batch, PipelineModule


class DistributingModule(PipelineModule):
    name = "distributing"

    def handle(self, batch: Batch) -> None:
        target = shared_target(batch)  # in C: most batches go to one destination
        if target is not None and not target.removed:
            target.enqueue(batch)
            touched: Iterable[Target] = (target,)
        else:
            touched = self._enqueue_runs(batch)
        self.context.destinations.services.traffic.received += len(batch)
        for destination in touched:
            destination.dispatch()
        self.downstream.handle(batch)

    def _enqueue_runs(self, batch: Batch) -> dict[Target, None]:
        """Enqueue each run of messages to one destination; the destinations, in order."""
        touched: dict[Target, None] = {}
        run: Target | None = None
        start = 0
        for index, message in enumerate(batch):
            target = message.target
            assert target is not None
            if target.removed:
                target = message.target = self.context.destinations.resolve(target.name)
            if target is not run:
                if run is not None:
                    run.enqueue(batch[start:index])
                run, start = target, index
                touched[target] = None
        if run is not None:
            run.enqueue(batch[start:])
        return touched
