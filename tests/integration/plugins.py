"""Pipeline modules of our own, plugged in through config.xml by the tests."""

from __future__ import annotations

from wiremq.modules.errors import Refused
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


DELAY = 0.3  # seconds the delaying module holds every batch


class DelayingModule(PipelineModule):
    """Holds every batch for ``DELAY`` seconds before passing it on."""

    def handle(self, batch: Batch) -> None:
        self.context.runtime.call_later(DELAY, lambda: self.downstream.handle(batch))


class RefusingModule(PipelineModule):
    """Refuses the messages whose body starts with "refuse"; passes the others on."""

    def handle(self, batch: Batch) -> None:
        passing = []
        for message in batch:
            if message.body.startswith(b"refuse"):
                self.context.refuse(
                    message, Refused("message not accepted", "refused by the test module")
                )
            else:
                passing.append(message)
        if passing:
            self.downstream.handle(passing)
