"""Per-client egress: the frames waiting to be written to one client's socket.

Each client has the five egress priority queues of ``flow.egress_queues``:
control frames (CONNECTED, RECEIPT, ERROR, heart-beats) on C-1, persistent
messages on G-1, non-persistent ones on D-1..D-3 by class of service.
Deliveries append here from anywhere in the pipeline; the socket writer (in
``server/``) drains every egress that became non-empty, by strict priority,
into the client's TCP transmit queue, once per burst of work. While the
client's TCP window is closed the writer stops draining, frames wait here,
and consumers of a full queue are not ready.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from wiremq.modules.flow.egress_queues import (
    EgressQueue,
    EgressQueues,
    Entry,
    EntryOwner,
    Policy,
    QueueLimits,
)
from wiremq.modules.runtime import Answer
from wiremq.modules.stomp._fast import frame_parts
from wiremq.modules.stomp.encoder import with_discard_indication

CONTROL = EgressQueue.C1
EVERYTHING = 1 << 62  # a budget no drain reaches


class EgressWriter(Protocol):
    """The socket side that drains an egress (a Twisted push producer in ``server/``)."""

    def drain(self, egress: Egress) -> None: ...

    def can_answer(self, egress: Egress) -> bool:
        """Whether a reply could be sent to the socket from the log writer's thread now:
        a plain TCP socket that holds nothing unwritten (``modules/runtime.Answer``)."""

    def answer(self, data: bytes) -> Answer | None:
        """Hold the socket for the log writer to send ``data`` (after ``can_answer``);
        None if it cannot after all."""


Runs = list[tuple[EntryOwner | None, list[Any]]]  # owners, each with a run of its frames


def tell_written(runs: Runs) -> None:
    """Tell each frame's owner what of its was written (once per run of its frames)."""
    for owner, run in runs:
        if owner is not None:
            owner.written(run)


class ControlThrottle(Protocol):
    """Who stops reading a client whose control frames pile up (its ``ReadGate``): every
    request may ask for a RECEIPT, so a client that does not read them is not read either,
    as Twisted's HTTPChannel stops reading requests whose responses are not read."""

    def control_full(self) -> None:
        """The control queue passed its depth."""

    def control_drained(self) -> None:
        """The control queue is empty again."""


class Outbox:
    """Egresses with frames to write, and work to run once they are written.

    ``flush`` hands every ready egress to its writer, then runs the wake-ups
    queued meanwhile (destinations whose consumers may have become ready as
    frames were written), and repeats until nothing is left.
    """

    __slots__ = ("ready", "wakeups")

    def __init__(self) -> None:
        self.ready: list[Egress] = []
        self.wakeups: dict[Callable[[], None], None] = {}

    def wake(self, action: Callable[[], None]) -> None:
        """Run ``action`` (once) after the current writes."""
        self.wakeups[action] = None

    def flush(self) -> bool:
        """Hand every ready egress to its writer, then run the wake-ups, until nothing is
        left; returns whether any egress was handed over (a client was written to)."""
        wrote = False
        while True:
            while self.ready:
                wrote = True
                ready, self.ready = self.ready, []
                for egress in ready:
                    egress.queued = False
                    if egress.writer is not None:
                        egress.writer.drain(egress)
            if not self.wakeups:
                return wrote
            wakeups, self.wakeups = self.wakeups, {}
            for action in wakeups:
                action()


def _tell_owner(entry: Entry) -> None:
    """A delivery was discarded (discard-oldest): its subscription gives back its window slot."""
    owner = entry.owner
    if owner is not None:
        owner.discarded(entry)


class Egress:
    """One client's egress priority queues."""

    __slots__ = (
        "queues",
        "outbox",
        "queued",
        "writer",
        "active",
        "close_requested",
        "last_frame",
        "abort",
        "throttle",
        "_throttled",
    )

    def __init__(self, outbox: Outbox, limits: tuple[QueueLimits, ...]) -> None:
        self.queues = EgressQueues(limits, Policy.BLOCK, _tell_owner)
        self.outbox = outbox
        self.queued = False
        self.writer: EgressWriter | None = None
        self.active = False  # something was queued since the last heart-beat check
        self.close_requested = False  # close the connection once everything is written
        self.last_frame = b""  # written after everything else, just before closing (an ERROR)
        self.abort = False  # close without waiting for a client that does not read
        self.throttle: ControlThrottle | None = None
        self._throttled = False  # the throttle was told the control queue is full

    def push(self, data: bytes) -> None:
        """Queue one encoded control frame."""
        queues = self.queues
        queues.enqueue(CONTROL, data, b"")
        self.active = True
        if not self.queued:
            self.queued = True
            self.outbox.ready.append(self)
        if not self._throttled and not queues.ready(CONTROL) and self.throttle is not None:
            self._throttled = True
            self.throttle.control_full()

    def push_message(
        self, queue: int, head: bytes, tail: bytes, owner: EntryOwner, message: object
    ) -> None:
        """Queue a MESSAGE frame (a delivery head and the message's shared tail)."""
        self.queues.enqueue(queue, head, tail, owner, message)
        self.active = True
        if not self.queued:
            self.queued = True
            self.outbox.ready.append(self)

    def push_messages(self, queue: int, entries: list[Entry], work: int) -> None:
        """Queue a run of MESSAGE frames (``EgressQueues.enqueue_run``)."""
        self.queues.enqueue_run(queue, entries, work)
        self.active = True
        if not self.queued:
            self.queued = True
            self.outbox.ready.append(self)

    def write_out(self, budget: int) -> list[bytes]:
        """``take_out`` and ``tell_written`` at once: for a writer that has written the
        bytes by the time it asks for more."""
        parts, runs = self.take_out(budget)
        tell_written(runs)
        return parts

    def take_out(self, budget: int) -> tuple[list[bytes], Runs]:
        """Take whole frames by priority while fewer than ``budget`` bytes were taken: their
        bytes to write (a MESSAGE after discards says so), and the frames' owners with what
        of theirs was taken, for ``tell_written`` once the bytes are written (a socket
        writer tells them after the send, off the path of a client waiting for them)."""
        entries, indicated, discarded = self.queues.drain(budget)
        parts: list[bytes] = []
        runs = frame_parts(entries, parts)  # in C: this runs per frame
        if indicated >= 0:
            parts[2 * indicated] = with_discard_indication(parts[2 * indicated], discarded)
        if self._throttled and not self.queues.holds(CONTROL):
            self._throttled = False
            assert self.throttle is not None
            self.throttle.control_drained()
        return parts, runs

    def take(self) -> list[bytes]:
        """Every queued frame's bytes, then the last frame if the connection is closing:
        what a socket writer writes, for sans-io use."""
        parts = self.write_out(EVERYTHING)
        if self.close_requested and self.last_frame:
            parts.append(self.last_frame)
            self.last_frame = b""
        return parts

    def close_after_flush(self, last_frame: bytes = b"") -> None:
        """Ask the writer to close the connection once the queued frames, and then
        ``last_frame``, are written: nothing may follow an ERROR."""
        self.close_requested = True
        self.last_frame = last_frame
        self.active = True
        if not self.queued:
            self.queued = True
            self.outbox.ready.append(self)
