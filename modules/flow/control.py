"""The producers of each domain and the global watermarks that stop them.

Global watermarks: the free disk space of the stores' filesystems (``disk``), the
VolQueueStore's, the topic live buffers' (over all
topics), the PersQueueStore's and the TopicStore's, and each thread/buffer
module's (``add_gate``). A destination's gates are these plus its own. A
persistent message counts in its store's watermarks from the moment it is
accepted, not only once committed, so that producers are stopped while
commits lag behind reading; after each commit the store watermarks are set
to what the store holds plus what still waits for its commit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from wiremq.config.groups import WatermarkLimits
from wiremq.config.settings import Settings
from wiremq.modules.domains import P2P, PUBSUB
from wiremq.modules.flow.disk import DiskSpace
from wiremq.modules.flow.watermarks import Producer, Watermark


class FlowControl:
    """Who produces to each domain, and the watermarks that stop them all."""

    def __init__(
        self,
        settings: Settings,
        blocking_producers: Callable[[str], Iterable[Producer]],
        disk: DiskSpace | None = None,
    ) -> None:
        """``blocking_producers(domain)``: the producers a full store of ``domain`` stops
        (those of destinations that block when full; ``whenfull=fail`` ones refuse);
        ``disk``: the free-disk watermark of the stores' filesystems (None: none)."""
        self.disk = disk if disk is not None else DiskSpace(settings)
        self.producers: dict[str, set[Producer]] = {P2P: set(), PUBSUB: set()}

        def of(domain: str) -> Callable[[], set[Producer]]:
            return lambda: self.producers[domain]

        self.settings = settings
        limits = self._limits
        self.volatile = Watermark("VolQueueStore", limits("VolQueueStoreImpl", "global"), of(P2P))
        self.live = Watermark(
            "TopicLiveBuffer", limits("DestinationManager", "topicglobal"), of(PUBSUB)
        )
        self.stores = {
            P2P: Watermark(
                "PersQueueStore",
                limits("PersQueueFileStore", "global"),
                lambda: blocking_producers(P2P),
            ),
            PUBSUB: Watermark(
                "TopicStore",
                limits("TopicFileStore", "global"),
                lambda: blocking_producers(PUBSUB),
            ),
        }
        self.gates: dict[str, list[Watermark]] = {
            P2P: [self.volatile, self.stores[P2P]],
            PUBSUB: [self.live, self.stores[PUBSUB]],
        }
        self.slow_disconnects = 0  # subscribers dropped for falling behind (disconnect policy)

    def _limits(self, group: str, prefix: str) -> WatermarkLimits:
        return WatermarkLimits.read(self.settings, group, prefix)

    def configure(self) -> None:
        """The global watermarks' parameters may have changed while the server runs."""
        limits = self._limits
        self.volatile.configure(limits("VolQueueStoreImpl", "global"))
        self.live.configure(limits("DestinationManager", "topicglobal"))
        self.stores[P2P].configure(limits("PersQueueFileStore", "global"))
        self.stores[PUBSUB].configure(limits("TopicFileStore", "global"))

    def add_gate(self, domain: str, watermark: Watermark) -> None:
        """A watermark that stops every producer of ``domain`` (a pipeline buffer's)."""
        self.gates[domain].append(watermark)  # every destination's gates include it now

    def journal_gate(self, limits: WatermarkLimits) -> Watermark:
        """A watermark that stops every producer of both domains: the audit journal's
        records waiting for its writer."""
        watermark = Watermark(
            "Journal", limits, lambda: self.producers[P2P] | self.producers[PUBSUB]
        )
        for domain in (P2P, PUBSUB):
            self.add_gate(domain, watermark)
        return watermark

    def produces(self, domain: str, producer: Producer) -> None:
        self.producers[domain].add(producer)

    def forget(self, producer: Producer) -> None:
        """A producer went away: it is no longer stopped or counted anywhere here."""
        self.disk.forget(producer)
        for domain, producers in self.producers.items():
            producers.discard(producer)
            for gate in self.gates[domain]:
                gate.forget(producer)

    def watermarks(self) -> list[Watermark]:
        """Every global watermark, for the admin view."""
        gates = [g for domain in (P2P, PUBSUB) for g in self.gates[domain][2:]]
        return [self.volatile, self.live, *self.stores.values(), *dict.fromkeys(gates)]
