"""Per-client egress: frames waiting to be written to one client's socket.

Deliveries append here from anywhere in the pipeline; the socket writer (in
``server/``) drains every egress that became non-empty in one write per burst.
While the client's TCP window is closed the writer stops draining and frames
wait here, which is what flow control and the priority egress queues build on.
"""

from __future__ import annotations

from typing import Protocol


class EgressWriter(Protocol):
    """The socket side that drains an egress (a Twisted push producer in ``server/``)."""

    def drain(self, egress: Egress) -> None: ...


class Outbox:
    """The set of egresses with frames to write, flushed once per burst of work."""

    __slots__ = ("ready", "on_first_ready")

    def __init__(self) -> None:
        self.ready: list[Egress] = []
        self.on_first_ready: object = None  # set by the server: schedules a flush

    def flush(self) -> None:
        """Hand every ready egress to its writer."""
        while self.ready:
            ready, self.ready = self.ready, []
            for egress in ready:
                egress.queued = False
                if egress.writer is not None:
                    egress.writer.drain(egress)


class Egress:
    """Frames for one client, in the order they were produced."""

    __slots__ = ("parts", "nbytes", "outbox", "queued", "writer", "active", "close_requested")

    def __init__(self, outbox: Outbox) -> None:
        self.parts: list[bytes] = []
        self.nbytes = 0
        self.outbox = outbox
        self.queued = False
        self.writer: EgressWriter | None = None
        self.active = False  # something was queued since the last heart-beat check
        self.close_requested = False  # close the connection once everything is written

    def push(self, data: bytes) -> None:
        """Queue one encoded frame."""
        self.parts.append(data)
        self.nbytes += len(data)
        self.active = True
        if not self.queued:
            self.queued = True
            self.outbox.ready.append(self)

    def push_pair(self, head: bytes, tail: bytes) -> None:
        """Queue a frame given as two pieces (a delivery head and a shared message tail)."""
        self.parts.append(head)
        self.parts.append(tail)
        self.nbytes += len(head) + len(tail)
        self.active = True
        if not self.queued:
            self.queued = True
            self.outbox.ready.append(self)

    def take(self) -> list[bytes]:
        """Remove and return everything queued."""
        parts = self.parts
        self.parts = []
        self.nbytes = 0
        return parts

    def close_after_flush(self) -> None:
        """Ask the writer to close the connection once the queued frames are written."""
        self.close_requested = True
        if not self.queued:
            self.queued = True
            self.outbox.ready.append(self)
