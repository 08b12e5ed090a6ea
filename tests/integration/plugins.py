"""A pipeline module of our own, plugged in through config.xml by the tests."""

from __future__ import annotations

from wiremq.modules.pipeline import Batch, ModuleContext, PipelineModule

SEEN: dict[str, list[str]] = {}


class RecordingModule(PipelineModule):
    """Records the body of every message that passes, per domain, then passes it on."""

    def __init__(self, context: ModuleContext) -> None:
        super().__init__(context)
        self.seen = SEEN.setdefault(context.domain, [])

    def handle(self, batch: Batch) -> None:
        self.seen.extend(message.body.decode() for message in batch)
        self.downstream.handle(batch)
