"""The socket writer: drains a client's egress into its transport, as a push producer.

Registered with the transport as a streaming producer, it is paused by Twisted
when the transport's write buffer is over its bound (the client's TCP window
is closed and the kernel buffer full) and resumed when it drains; while paused
frames wait in the egress instead of piling up in the transport.
"""

from __future__ import annotations

from twisted.internet.abstract import FileDescriptor
from twisted.internet.interfaces import IPushProducer
from zope.interface import implementer

from wiremq.modules.egress import Egress


@implementer(IPushProducer)
class SocketWriter:
    def __init__(self, transport: FileDescriptor, egress: Egress) -> None:
        self.transport = transport
        self.egress = egress
        self.paused = False
        self.stopped = False
        egress.writer = self
        transport.registerProducer(self, True)

    def drain(self, egress: Egress) -> None:
        """Write everything queued in one call, unless the socket is backed up."""
        if self.paused or self.stopped:
            return
        if egress.parts:
            self.transport.writeSequence(egress.take())
        if egress.close_requested:
            self.stopped = True
            self.transport.pauseProducing()  # read nothing more from a closing client
            self.transport.unregisterProducer()
            self.transport.loseConnection()

    def pauseProducing(self) -> None:
        self.paused = True

    def resumeProducing(self) -> None:
        self.paused = False
        self.drain(self.egress)

    def stopProducing(self) -> None:
        self.stopped = True
