"""The thread/buffer module (P2PPrioQueue / PubSubPrioQueue).

It decouples arrival from distribution where that matters: messages that
come while it holds others, or that would take it to maxnummessages messages
or maxnumbytes bytes, are queued and handed on in one batch once the socket
read that brought them is handled (or on the event loop's next turn), and at
those watermarks it stops every producer of its domain, until it has drained
to half of both. A batch that finds it empty and cannot reach a watermark is
handed on at once: a deferral to the end of the read would only add its own
cost to the message's latency (a tenth of a lone message's instructions). It
may be removed from the chain in config.xml.
"""

from __future__ import annotations

from operator import attrgetter

from wiremq.config.groups import BufferSettings, WatermarkLimits
from wiremq.modules.domains import P2P
from wiremq.modules.flow.watermarks import Watermark
from wiremq.modules.pipeline.chain import Batch, ModuleContext, PipelineModule

_size = attrgetter("size")


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
        self._passing = False  # a batch is on its way downstream from here

    def handle(self, batch: Batch) -> None:
        if not batch:
            return
        size = sum(map(_size, batch))
        if not self._buffer and not self._passing and self.watermark.gauge.fits(len(batch), size):
            self._pass(batch)
            return
        if not self._buffer:
            self.context.runtime.call_soon(self.drain)
        self._buffer += batch
        self._bytes += size
        self.watermark.add(len(batch), size)

    def drain(self) -> None:
        """Hand every buffered message on, oldest first, in one batch."""
        batch, self._buffer = self._buffer, []
        size, self._bytes = self._bytes, 0
        if batch:
            self._pass(batch)
            self.watermark.remove(len(batch), size)

    def _pass(self, batch: Batch) -> None:
        """Hand a batch on; what arrives meanwhile (a stage below sending more down the
        chain) waits in the buffer, behind it."""
        self._passing = True
        try:
            self.downstream.handle(batch)
        finally:
            self._passing = False
