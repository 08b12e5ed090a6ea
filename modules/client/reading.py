"""Why a client is not read: every reason that stops it, in one small object per client.

Many pieces stop reading a client, each for its own reason and each until its
own condition clears: a watermark its destination or domain tripped, MemWatch
at its top level, the transaction memory under ``NONE``, the bound on
unfinished frames, a request waiting for the client's earlier work, a control
queue the client does not read. The client is read again only when no reason
is left. Each piece calls ``stop_reading(reason)`` and ``start_reading(reason)``
on the client's ``ReadGate``, its ``Producer``; the gate tells the protocol side
(``ReadControl``) only when reading actually stops or restarts.
"""

from __future__ import annotations

from typing import Protocol

CONTROL_BACKLOG = "control queue full"  # why a client that does not read is not read


class ReadControl(Protocol):
    """Stops and restarts reading the client's input: its socket's transport, in
    ``server/``; the STOMP connection also tells its session the silence is not the
    client's (heart-beats)."""

    def pause(self) -> None: ...
    def resume(self) -> None: ...


class ReadGate:
    """The reasons one client is not read (see the module docstring). A ``Producer``
    (flow control's, MemWatch's, the transaction memory's, the unfinished frames') and
    its egress's ``ControlThrottle``."""

    __slots__ = ("control", "stops")

    def __init__(self, control: ReadControl) -> None:
        self.control = control
        self.stops: set[object] = set()  # why reading is stopped; empty: it is read

    def stop_reading(self, reason: object) -> None:
        if not self.stops:
            self.control.pause()
        self.stops.add(reason)

    def start_reading(self, reason: object) -> None:
        if reason not in self.stops:
            return
        self.stops.discard(reason)
        if not self.stops:
            self.control.resume()

    def control_full(self) -> None:
        """The client does not read its RECEIPTs: read nothing more until it does."""
        self.stop_reading(CONTROL_BACKLOG)

    def control_drained(self) -> None:
        self.start_reading(CONTROL_BACKLOG)

    @property
    def reading(self) -> bool:
        return not self.stops

    def stopped_by(self) -> list[str]:
        """The reasons, by name, for the admin view."""
        return sorted(str(reason) for reason in self.stops)
