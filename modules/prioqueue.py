"""The thread/buffer module (P2PPrioQueue / PubSubPrioQueue).

It decouples reading from distribution: messages read from sockets are queued
and handed on in one batch on the next turn of the event loop, so a socket
reader returns at once and distribution runs over many messages together.
Reaching maxnummessages or maxnumbytes hands the batch on at once, so the
buffer never grows past its bounds. It may be removed from the chain in
config.xml to cut latency.
"""

from __future__ import annotations

from collections import deque

from wiremq.modules.message import Message
from wiremq.modules.pipeline import P2P, ModuleContext, PipelineModule


class PrioQueueModule(PipelineModule):
    name = "prioqueue"

    def __init__(self, context: ModuleContext) -> None:
        super().__init__(context)
        group = "P2PPrioQueue" if context.domain == P2P else "PubSubPrioQueue"
        self.max_messages = context.settings.get_int(group, "maxnummessages")
        self.max_bytes = context.settings.get_int(group, "maxnumbytes")
        self._buffer: deque[Message] = deque()
        self._bytes = 0
        self._scheduled = False

    def handle(self, message: Message) -> None:
        self._buffer.append(message)
        self._bytes += message.size
        if len(self._buffer) >= self.max_messages or self._bytes >= self.max_bytes:
            self.drain()
        elif not self._scheduled:
            self._scheduled = True
            self.context.runtime.call_soon(self._scheduled_drain)

    def _scheduled_drain(self) -> None:
        self._scheduled = False
        self.drain()

    def drain(self) -> None:
        """Hand every buffered message on, oldest first."""
        buffer = self._buffer
        downstream = self.downstream.handle
        while buffer:
            message = buffer.popleft()
            self._bytes -= message.size
            downstream(message)

    @property
    def depth(self) -> tuple[int, int]:
        """Messages and bytes held now."""
        return len(self._buffer), self._bytes
