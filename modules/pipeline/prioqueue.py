"""The thread/buffer module (P2PPrioQueue / PubSubPrioQueue).

It decouples reading from distribution: messages read from sockets are queued
and handed on in one batch on the next turn of the event loop, so a socket
reader returns at once and distribution runs over many messages together.
When it holds maxnummessages messages or maxnumbytes bytes it stops every
producer of its domain, until it has drained to half of both. It may be
removed from the chain in config.xml to cut latency.
"""

from __future__ import annotations

from wiremq.config.groups import BufferSettings, WatermarkLimits
from wiremq.modules.domains import P2P
from wiremq.modules.flow.watermarks import Watermark
from wiremq.modules.pipeline.chain import Batch, ModuleContext, PipelineModule


class PrioQueueModule(PipelineModule):
    name = "prioqueue"

    def __init__(self, context: ModuleContext) -> None:
        super().__init__(context)
        group = "P2PPrioQueue" if context.domain == P2P else "PubSubPrioQueue"
        limits = BufferSettings.read(context.settings, group)
        flow = context.flow
        self.watermark = Watermark(
            group,
            WatermarkLimits(
                limits.maxnummessages,
                limits.maxnummessages // 2,
                limits.maxnumbytes,
                limits.maxnumbytes // 2,
            ),
            lambda: flow.producers[context.domain],
        )
        flow.add_gate(context.domain, self.watermark)
        self._buffer: Batch = []
        self._bytes = 0

    def handle(self, batch: Batch) -> None:
        if not batch:
            return
        if not self._buffer:
            self.context.runtime.call_soon(self.drain)
        self._buffer += batch
        size = sum(m.size for m in batch)
        self._bytes += size
        self.watermark.add(len(batch), size)

    def drain(self) -> None:
        """Hand every buffered message on, oldest first, in one batch."""
        batch, self._buffer = self._buffer, []
        size, self._bytes = self._bytes, 0
        if batch:
            self.downstream.handle(batch)
            self.watermark.remove(len(batch), size)
