"""The socket writer: drains a client's egress queues into its transport, as a push producer.

Registered with the transport as a streaming producer, it is paused by Twisted
when the transport's write buffer is over its bound (``tcptransmitbytes``: the
client's TCP window is closed and the kernel buffer full) and resumed when it
drains. Each drain moves whole messages, by strict priority, while less than
the bound has been moved (the whole-message rule of a byte-bounded transmit
queue); while paused, frames wait in the egress queues, where flow control
sees them. A MESSAGE written after discards carries ``discarded:<count>``.

A frame larger than the bound (only the last frame of a drain can be: whole
frames are taken while less than the bound was) is streamed: written a bound's
worth at a time as the transport drains, from a view of its bytes, instead of
being handed to the transport whole, which would copy it once or twice more
(joined with what precedes it, and its unsent rest). Nothing else is written
to the client until it is done.

A persistent SEND's RECEIPT may be sent by the log's sync thread the moment its
record is synced (``SocketAnswer``; ``modules/runtime.Answer``): only to a plain
TCP socket that holds nothing unwritten, and while it is held so, the writer
writes nothing to that socket (what comes meanwhile waits in the egress), so
that the thread's bytes never interleave with the event loop's. Once the
write is over the answer is settled: whatever the socket did not take is
written first, and the egress drains again.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from twisted.internet.interfaces import IPushProducer
from twisted.internet.tcp import Connection
from zope.interface import implementer

from wiremq.modules.client.egress import Egress, tell_written
from wiremq.modules.flow.slowness import SlownessMeter


def socket_of(transport: Any) -> Connection:
    """The socket's own transport under ``transport`` (itself, or under TLS or WebSocket)."""
    while not isinstance(transport, Connection):
        transport = transport.transport
    return transport


def abort_if_open(transport: Any) -> None:
    """Cut a connection (given by its transport or one over it) that is still open."""
    sock = socket_of(transport)
    if sock.connected:
        sock.abortConnection()


@implementer(IPushProducer)
class SocketWriter:
    def __init__(
        self,
        transport: Any,
        egress: Egress,
        bound: int,
        clock: Callable[[], float],
        close_grace: float,
        slowness_window: float,
        fenced: Callable[[], bool] | None = None,
    ) -> None:
        """``close_grace``: how long a closing connection may take to write what is
        queued for it before it is aborted; ``slowness_window``: the span of time its
        slowness is measured over; ``fenced``: in HA mode, whether this node's lease may
        be gone (then nothing more is written: it is stepping down, ``server/ha.py``)."""
        self.transport = transport  # frames are written to it: the socket's, or TLS, WebSocket
        self.socket = socket_of(transport)  # whose buffer pauses the writer past ``bound``
        self.egress = egress
        self.bound = bound
        self.close_grace = close_grace
        self.paused = False
        self.stopped = False
        self.streaming: memoryview | None = None  # the rest of a large frame being written
        # A plain TCP socket is written to directly while the transport holds nothing
        # (``_send``); any other transport (TLS, say) only through the transport.
        self.direct = isinstance(transport, Connection)
        self.slowness = SlownessMeter(clock, slowness_window)
        self.fenced = fenced
        self.answering = 0  # answers held for the sync thread (nothing is written meanwhile)
        egress.writer = self
        self.socket.bufferSize = bound
        transport.registerProducer(self, True)

    def drain(self, egress: Egress) -> None:
        """Write whole frames by priority, up to the transmit bound, in one call."""
        if self.fenced is not None and self.fenced():
            return  # a node that lost its lease delivers nothing, not even what it had
        if self.answering:
            return  # the sync thread may be writing to the socket: on once it is settled
        queues = egress.queues
        if self.paused and egress.abort and egress.close_requested and not self.stopped:
            self._close(egress)  # a slow subscriber is dropped without waiting for it
            return
        if self.paused or self.stopped:
            if self.paused and (queues.pending or self.streaming is not None):
                self.slowness.blocked()  # data to send, and the client's window is closed
            return
        if self.streaming is not None and not self._stream():
            return  # the rest of a large frame goes first; on once the transport drains
        if queues.nonempty:  # (``pending``, read as its field: this runs for every burst)
            empty = self._empty()
            parts, runs = egress.take_out(self.bound)
            self._write(parts, empty)
            tell_written(runs)
            pending = queues.nonempty
            if pending and empty and self.streaming is None:
                # Sent at once: the next bound's worth waits in the transport.
                parts, runs = egress.take_out(self.bound)
                self._write(parts, self._empty())
                tell_written(runs)
                pending = queues.nonempty
            if self.streaming is not None:
                return
            if pending:  # more than one bound's worth: go on once written
                if not egress.queued:
                    egress.queued = True
                    egress.outbox.ready.append(egress)
                return
        if egress.close_requested:
            self._close(egress)

    def can_answer(self, egress: Egress) -> bool:
        """Whether the sync thread may send a reply now: a plain TCP socket, open and
        written to, holding nothing unwritten (in the transport or the egress), in a
        server that needs no lease to write (HA mode never hands answers anyway)."""
        return (
            self.direct
            and self.fenced is None
            and not self.paused
            and not self.stopped
            and self.streaming is None
            and not egress.queues.nonempty
            and bool(self.socket.connected)
            and self._empty()
        )

    def answer(self, data: bytes) -> SocketAnswer | None:
        """Hold the socket for the sync thread to send ``data`` (see the module docstring);
        None if no descriptor is left to hand it (the reply then goes as usual)."""
        try:
            fd = os.dup(self.socket.fileno())
        except OSError:
            return None
        self.answering += 1
        return SocketAnswer(self, fd, data)

    def _empty(self) -> bool:
        """Whether a plain TCP transport holds nothing (then the socket is written at once)."""
        transport = self.transport
        return self.direct and not transport.dataBuffer and not transport._tempDataBuffer

    def _write(self, parts: list[bytes], empty: bool) -> None:
        """Write the frames' bytes (to the socket at once if the transport is ``empty``); a
        last part larger than the bound is streamed."""
        large = len(parts[-1]) > self.bound if parts else False
        if large:
            self.streaming = memoryview(parts.pop())
        if parts:
            if empty:
                self._send(parts)
            else:
                self.transport.writeSequence(parts)
        if large:
            self._stream()

    def _stream(self) -> bool:
        """Write the large frame's next pieces until the transport is over its bound
        (Twisted pauses this producer then); True once the frame is all written."""
        view = self.streaming
        assert view is not None
        bound = self.bound
        while view and not self.paused and not self.stopped:
            piece, view = view[:bound], view[bound:]
            if self._empty():
                self._send([piece])  # type: ignore[list-item]
            else:
                self.transport.write(piece.tobytes())
        self.streaming = view or None
        return self.streaming is None

    def _send(self, parts: list[bytes]) -> None:
        """Hand the bytes to the socket now; what it does not take waits in the transport.

        Only while the transport holds nothing (``drain`` checks), so that nothing is
        written ahead of what waits there. A write through the transport would wait for
        the reactor's next turn, registered and unregistered with epoll: a turn and two
        system calls per burst, which a client waiting for its RECEIPT or MESSAGE feels.
        An error is left to the transport, which meets it again and closes.
        """
        data = b"".join(parts)
        try:
            sent = self.transport.socket.send(data)
        except OSError:  # would block, or the connection is gone
            sent = 0
        if sent < len(data):
            self.transport.write(data[sent:])

    def _close(self, egress: Egress) -> None:
        if egress.last_frame:
            self.transport.write(egress.last_frame)
            egress.last_frame = b""
        self.stopped = True
        self.socket.pauseProducing()  # read nothing more from a closing client
        self.transport.unregisterProducer()
        if egress.abort and self.paused:
            self.transport.abortConnection()  # it does not read: its frames would never go
        else:
            self.transport.loseConnection()
            # A client that stops reading now would keep us waiting for ever.
            self.socket.reactor.callLater(  # type: ignore[attr-defined]
                self.close_grace, abort_if_open, self.socket
            )

    def settled(self, rest: bytes) -> None:
        """An answer is settled: ``rest`` (what the socket did not take of it) goes first;
        once no answer is held, the egress drains again."""
        self.answering -= 1
        if rest and not self.stopped and self.socket.connected:
            self._write([rest], self._empty())
        if not self.answering:
            self.drain(self.egress)

    def pauseProducing(self) -> None:
        self.paused = True
        if self.egress.queues.pending or self.streaming is not None:
            self.slowness.blocked()

    def resumeProducing(self) -> None:
        self.paused = False
        self.slowness.unblocked()
        self.drain(self.egress)
        self.egress.outbox.flush()

    def stopProducing(self) -> None:
        self.stopped = True


class SocketAnswer:
    """A reply held for the sync thread (``modules/runtime.Answer``): the socket as a
    duplicate descriptor (the thread closes it: a connection closed meanwhile cannot let
    the number reach another file) and the reply's bytes."""

    __slots__ = ("writer", "fd", "data")

    def __init__(self, writer: SocketWriter, fd: int, data: bytes) -> None:
        self.writer = writer
        self.fd = fd
        self.data = data

    def settle(self, sent: int | None) -> None:
        self.writer.settled(self.data[sent:] if sent is not None else b"")
