"""The storage module: puts each message into the store its delivery mode calls for.

Queue messages wait in the VolQueueStore until a consumer takes them; topic
messages are not kept. (Persistent messages and the small processing buffer
that group-commits them arrive with the persistent stores.)
"""

from __future__ import annotations

from wiremq.modules.destinations import Queue
from wiremq.modules.message import Message
from wiremq.modules.pipeline import ModuleContext, PipelineModule


class StorageModule(PipelineModule):
    name = "storage"

    def __init__(self, context: ModuleContext) -> None:
        super().__init__(context)
        self.vol_store = context.broker.vol_store

    def handle(self, message: Message) -> None:
        target = message.target
        if isinstance(target, Queue):
            self.vol_store.append(target.name, message)
        self.downstream.handle(message)
