"""The destination registry: every queue and topic by name, created on first use."""

from __future__ import annotations

from collections.abc import Iterator

import structlog

from wiremq.config.groups import (
    CleanupIntervalSettings,
    DestinationPolicy,
    IdleDestinationSettings,
    LiveBufferSettings,
    SweepSettings,
)
from wiremq.modules.destinations.destination import Destination, DestinationServices
from wiremq.modules.destinations.queue import Queue
from wiremq.modules.destinations.rotation import Rotation
from wiremq.modules.destinations.topic import Topic
from wiremq.modules.destinations.wildcard import Wildcard, matches
from wiremq.modules.domains import P2P, require_domain
from wiremq.modules.errors import Refused
from wiremq.modules.flow.watermarks import Producer
from wiremq.modules.journal.recorder import CleanupRun
from wiremq.modules.journal.schema import VOLQUEUE

log = structlog.get_logger("wiremq.destinations")


def check_name(name: str) -> str:
    """The domain of the destination ``name`` would name; ``Refused`` if it names none."""
    domain = require_domain(name)
    kind = "queue" if domain == P2P else "topic"
    suffix = name[len(kind) + 2 :]
    if not suffix or "*" in suffix or ">" in suffix or not suffix.isprintable():
        raise Refused(
            "invalid destination",
            f"{name[:200]!r}: a {kind} needs a name without wildcards (* or >) "
            "and without control characters",
        )
    return domain


class Destinations:
    """Queues and topics, and what is done to all of them at once."""

    def __init__(self, services: DestinationServices) -> None:
        self.services = services
        self.queues: dict[str, Queue] = {}
        self.topics: dict[str, Topic] = {}
        self.wildcards: list[Wildcard] = []  # wildcard subscriptions
        self._sorted: list[str] | None = []  # every name in order (None: to sort again)
        self._volatile_pass: Rotation[Queue] = Rotation(self.queues)
        self._volatile_run: CleanupRun | None = None  # the journal's, for the pass under way
        self._live_buffer_pass: Rotation[Queue] = Rotation(self.queues)
        self._topic_buffer_pass: Rotation[Topic] = Rotation(self.topics)
        self._idle_pass: Rotation[Destination] = Rotation(self.queues, self.topics)

    def get(self, name: str) -> Destination | None:
        return self.queues.get(name) or self.topics.get(name)

    def resolve(self, name: str) -> Destination:
        """The queue or topic ``name`` names, created on first use; a name that is
        neither is refused."""
        found = self.queues.get(name) or self.topics.get(name)
        if found is not None:
            return found
        domain = check_name(name)
        destination: Destination
        if domain == P2P:
            destination = self.queues[name] = Queue(name, self.services)
        else:
            destination = self.topics[name] = Topic(name, self.services)
        self._sorted = None
        log.info("destination.created", destination=name)
        for wildcard in self.wildcards:
            if matches(wildcard.name, name):
                wildcard.attach(destination)
        return destination

    def sorted_names(self) -> list[str]:
        """Every destination's name in order (kept between changes, so that the console's
        table of 100,000 is not sorted again at every page)."""
        if self._sorted is None:
            self._sorted = sorted([*self.queues, *self.topics])
        return self._sorted

    def add_wildcard(self, wildcard: Wildcard) -> None:
        """A wildcard subscription joins every matching destination, now and later."""
        pattern = wildcard.name
        levels = pattern.split("/", 2)[-1].split(".")
        if (
            "" in levels
            or ">" in levels[:-1]
            or any(("*" in level or ">" in level) and len(level) > 1 for level in levels)
        ):
            raise Refused(
                "invalid destination",
                f"{pattern[:200]!r}: in a wildcard subscription * stands for one whole level "
                "and > (last) for one or more",
            )
        self.wildcards.append(wildcard)
        wildcard.forget = self.wildcards.remove
        for destination in self.of_domain(wildcard.domain or ""):
            if matches(pattern, destination.name):
                wildcard.attach(destination)

    def __iter__(self) -> Iterator[Destination]:
        yield from list(self.queues.values())
        yield from list(self.topics.values())

    def of_domain(self, domain: str) -> list[Destination]:
        return list(self.queues.values() if domain == P2P else self.topics.values())

    def blocking_producers(self, domain: str) -> set[Producer]:
        """Producers a full store stops: those of destinations that block when full
        (a ``whenfull=fail`` destination refuses its persistent SENDs instead)."""
        return {p for d in self.of_domain(domain) if not d.fail_when_full for p in d.producers}

    def retire(self, destination: Destination) -> None:
        """Take a destination out of the registry; its counts stay in the totals."""
        registry: dict[str, Queue] | dict[str, Topic] = (
            self.queues if isinstance(destination, Queue) else self.topics
        )
        name = destination.name
        if id(registry.get(name)) != id(destination):
            return  # already gone (a new one of its name may be there)
        del registry[name]
        self._sorted = None
        for producer in destination.producers:
            destination.unlist(producer)
        self.services.fates.retire(name)
        destination.remove()

    def totals(self) -> dict[str, int]:
        """Messages received and delivered since the server started, and what became of
        them (``fates.py``), all destinations: kept as messages move (``traffic.py``)."""
        traffic = self.services.traffic
        return {
            "received": traffic.received,
            "delivered": traffic.delivered,
            **self.services.fates.totals(),
        }

    def configure(self) -> None:
        """Parameters changed while the server runs: every destination reads them again."""
        self.services.read_settings()
        for destination in self:
            destination.configure()

    def forget_producer(self, producer: Producer) -> None:
        """A client went away: it is no longer a producer anywhere."""
        for destination in list(self.services.sending.get(producer, ())):
            destination.remove_producer(producer)
        self.services.flow.forget(producer)

    def restore(self, queues: dict[str, int]) -> None:
        """Recreate the queues that have stored messages (they are read back on demand) and
        make the destinations config.xml declares."""
        for name, held in queues.items():
            queue = self.resolve(name)
            assert isinstance(queue, Queue)
            queue.backlog.restore()
            queue.fates.count("restored", held - queue.fates.restored)
        settings = self.services.settings
        for name in list(settings.destinations):
            if DestinationPolicy.for_destination(settings, name).declared:
                try:
                    self.resolve(name)
                except Refused as refusal:
                    log.error(
                        "destination.declared_invalid", destination=name, error=refusal.detail
                    )

    # -- cleanup processes: each walks the destinations a slice per turn (rotation.py) and
    # says whether its pass has more (``Periodic`` runs it again at once if so) ----------

    def _slice(self) -> int:
        return SweepSettings.read(self.services.settings, "DestinationManager").sweepslice

    def sweep_volatile(self) -> bool:
        """The VolQueueStore's cleanup process: one journaled cleanup run per pass."""
        now_ms = self.services.runtime.now_ms()
        journal = self.services.journal
        run = self._volatile_run
        if run is None:
            interval = CleanupIntervalSettings.read(self.services.settings, "VolQueueStoreImpl")
            run = self._volatile_run = journal.sweep_started(VOLQUEUE, interval.cleanupinterval)
        with journal.sweeping(run):
            for queue in self._volatile_pass.next_slice(self._slice()):
                run.scanned += queue.sweeps.sweep_volatile(now_ms)
        if not self._volatile_pass.done:
            return True
        journal.cleanup_ended(run)
        self._volatile_run = None
        return False

    def sweep_live_buffers(self) -> bool:
        """The queue live buffers' cleanup (qlbcleanupinterval / qlbcleanuptimetolive)."""
        now_ms = self.services.runtime.now_ms()
        now = self.services.runtime.monotonic()
        idle_for = LiveBufferSettings.read(
            self.services.settings, "DestinationManager"
        ).qlbcleanuptimetolive
        for queue in self._live_buffer_pass.next_slice(self._slice()):
            queue.sweeps.sweep_live_buffer(now_ms, now - queue.last_dispatch > idle_for)
        return not self._live_buffer_pass.done

    def sweep_idle(self) -> bool:
        """Remove the undeclared destinations nobody uses (``Destination.unused``) that have
        not dispatched for DestinationManager.idletimetolive, so that names that come and go
        do not grow memory; a name used again makes a new one."""
        now = self.services.runtime.monotonic()
        idle_for = IdleDestinationSettings.read(
            self.services.settings, "DestinationManager"
        ).idletimetolive
        removed = 0
        for destination in self._idle_pass.next_slice(self._slice()):
            if (
                now - destination.last_dispatch >= idle_for
                and not destination.policy.declared
                and destination.unused()
            ):
                self.retire(destination)
                removed += 1
        if removed:
            log.info("destinations.removed", count=removed)
        return not self._idle_pass.done

    def sweep_topic_buffers(self) -> bool:
        """The topic live buffers' cleanup (tlbcleanupinterval)."""
        now_ms = self.services.runtime.now_ms()
        for topic in self._topic_buffer_pass.next_slice(self._slice()):
            topic.sweep_live_buffer(now_ms)
        return not self._topic_buffer_pass.done
