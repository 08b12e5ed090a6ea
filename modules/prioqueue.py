"""The thread/buffer module (P2PPrioQueue / PubSubPrioQueue).

It decouples reading from distribution: messages read from sockets are queued
and handed on in one batch on the next turn of the event loop, so a socket
reader returns at once and distribution runs over many messages together.
When it holds maxnummessages messages or maxnumbytes bytes it stops every
producer of its domain, until it has drained to half of both. It may be
removed from the chain in config.xml to cut latency.
"""

from __future__ import annotations

from collections import deque

from wiremq.modules.flow.watermarks import Watermark
from wiremq.modules.message import Message
from wiremq.modules.pipeline import P2P, ModuleContext, PipelineModule


class PrioQueueModule(PipelineModule):
    name = "prioqueue"

    def __init__(self, context: ModuleContext) -> None:
        super().__init__(context)
        group = "P2PPrioQueue" if context.domain == P2P else "PubSubPrioQueue"
        max_messages = context.settings.get_int(group, "maxnummessages")
        max_bytes = context.settings.get_int(group, "maxnumbytes")
        broker = context.broker
        self.watermark = Watermark(
            group,
            (max_messages, max_messages // 2, max_bytes, max_bytes // 2),
            lambda: broker.producers[context.domain],
        )
        broker.add_gate(context.domain, self.watermark)
        self._buffer: deque[Message] = deque()
        self._scheduled = False

    def handle(self, message: Message) -> None:
        self._buffer.append(message)
        self.watermark.add(1, message.size)
        if not self._scheduled:
            self._scheduled = True
            self.context.runtime.call_soon(self.drain)

    def drain(self) -> None:
        """Hand every buffered message on, oldest first."""
        self._scheduled = False
        buffer = self._buffer
        downstream = self.downstream.handle
        count = len(buffer)
        size = 0
        while buffer:
            message = buffer.popleft()
            size += message.size
            downstream(message)
        self.watermark.remove(count, size)
