"""Bounded work: QueueThreadPool and TopicThreadPool, for large messages on their way out.

In the iBus//MessageServer each queue and topic is processed by a thread of a
pool, and a thread delivering a message copies it in the socket writer: the
pool's size bounds how many large messages are being copied at once. wiremq
runs every destination on one event loop, and a delivery's copy is its encoded
MESSAGE frame (``Message.wire_tail``), made when the delivery is handed to the
client's egress and kept until the socket writer takes it. So a pool here
bounds large deliveries in progress: a delivery of a message above
``MemWatch.messagethreshold`` holds one of its slots from the moment it is
handed to a consumer until it is written out (or discarded, or taken back),
and its frame is encoded for that delivery alone rather than kept with the
message. At most ``maxthreads`` destinations of the pool's kind have large
deliveries in progress at once, each at most ``maxprocessoriterations`` of
them; a consumer the pool has no slot for is not ready (its destination
waits, and is woken when a slot frees). Small messages never ask.

So a burst of large messages takes, for encoded frames, at most
``maxthreads`` x ``maxprocessoriterations`` times the largest message per
pool, plus the frame each client's socket writer is streaming; the messages
themselves are held where they wait (the stores, bounded by their
watermarks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from wiremq.config.groups import WorkPoolSettings
from wiremq.modules.domains import P2P
from wiremq.modules.runtime import Runtime

if TYPE_CHECKING:
    from wiremq.modules.message import Message


class Delivering(Protocol):
    """A destination with large deliveries, as its pool sees it: woken when a slot frees
    (a consumer it skipped for want of one may be ready now)."""

    def consumer_ready(self) -> None: ...


class WorkPool:
    """Large deliveries in progress for one kind of destination (see the module doc)."""

    def __init__(self, name: str, settings: WorkPoolSettings, large: int, runtime: Runtime) -> None:
        self.name = name
        self.threads = settings.maxthreads
        self.iterations = settings.maxprocessoriterations
        self.large = large  # a message above this many bytes is large
        self.runtime = runtime
        self.active: dict[Delivering, int] = {}  # large deliveries in progress, by destination
        self.in_progress = 0
        self.peak = 0
        self.waits = 0  # times a consumer was not ready for want of a slot
        self._waiting: set[Delivering] = set()

    def admits(self, destination: Delivering) -> bool:
        """Whether a large delivery of ``destination`` may start now; if not, it is woken
        when one of the pool's deliveries ends."""
        held = self.active.get(destination, 0)
        if held < self.iterations and (held or len(self.active) < self.threads):
            return True
        self.waits += 1
        self._waiting.add(destination)
        return False

    def take(self, destination: Delivering) -> None:
        self.active[destination] = self.active.get(destination, 0) + 1
        self.in_progress += 1
        if self.in_progress > self.peak:
            self.peak = self.in_progress

    def release(self, destination: Delivering, messages: list[Message]) -> None:
        """Deliveries of ``destination`` left the egress (written, discarded, taken back):
        the large ones free their slots."""
        count = sum(1 for message in messages if message.size > self.large)
        if not count:
            return
        left = self.active[destination] - count
        if left:
            self.active[destination] = left
        else:
            del self.active[destination]
        self.in_progress -= count
        if self._waiting:
            waiting, self._waiting = self._waiting, set()
            for waiter in waiting:
                self.runtime.call_soon(waiter.consumer_ready)

    def state(self) -> dict[str, object]:
        return {
            "maxthreads": self.threads,
            "maxprocessoriterations": self.iterations,
            "large_deliveries": self.in_progress,
            "large_deliveries_peak": self.peak,
            "destinations_delivering": len(self.active),
            "destinations_waiting": len(self._waiting),
            "waits": self.waits,
        }


class WorkPools:
    """The queue and topic pools."""

    def __init__(self, queues: WorkPool, topics: WorkPool) -> None:
        self.queues = queues
        self.topics = topics

    def of(self, domain: str) -> WorkPool:
        return self.queues if domain == P2P else self.topics

    def state(self) -> dict[str, object]:
        return {"QueueThreadPool": self.queues.state(), "TopicThreadPool": self.topics.state()}
