"""The distributing module: hands a stored message to its destination's consumers."""

from __future__ import annotations

from wiremq.modules.message import Message
from wiremq.modules.pipeline import PipelineModule


class DistributingModule(PipelineModule):
    name = "distributing"

    def handle(self, message: Message) -> None:
        target = message.target
        assert target is not None
        target.distribute(message)
        self.downstream.handle(message)
