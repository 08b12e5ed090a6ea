"""Watermarks that stop producers: a store's (or buffer's) counts with high/low thresholds.

When a watermark trips (messages or bytes reach a high watermark), the server
stops reading from the producers concerned: the senders of one destination
for a per-destination watermark, every sender of the domain for a global one.
Only when every tripped threshold has fallen to its low watermark are they
started again. A producer that starts sending while a watermark is tripped is
stopped too. Stopping is real back-pressure: the socket is not read, so the
client blocks in its send and nothing is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

import structlog

from wiremq.config.groups import WatermarkLimits
from wiremq.modules.flow.threshold import Gauge

log = structlog.get_logger("wiremq.flow")


class Producer(Protocol):
    """A client connection whose reading can be stopped for a reason and started again."""

    def stop_reading(self, reason: object) -> None: ...
    def start_reading(self, reason: object) -> None: ...


class Watermark:
    """One gauge and the producers its trips stop."""

    def __init__(
        self,
        name: str,
        limits: WatermarkLimits,
        producers: Callable[[], Iterable[Producer]],
    ) -> None:
        self.name = name
        self.gauge = Gauge(
            limits.msghighwatermark,
            limits.msglowwatermark,
            limits.bytehighwatermark,
            limits.bytelowwatermark,
            on_change=self._changed,
        )
        self._producers = producers
        self.stopped: set[Producer] = set()
        self.trips = 0

    @property
    def tripped(self) -> bool:
        return self.gauge.tripped

    def add(self, messages: int, nbytes: int) -> None:
        self.gauge.add(messages, nbytes)

    def remove(self, messages: int, nbytes: int) -> None:
        self.gauge.remove(messages, nbytes)

    def sync(self, messages: int, nbytes: int) -> None:
        """Set the counts to what a store reports (after its commits)."""
        gauge = self.gauge
        if messages >= gauge.messages and nbytes >= gauge.bytes:
            gauge.add(messages - gauge.messages, nbytes - gauge.bytes)
        else:
            gauge.remove(gauge.messages - messages, gauge.bytes - nbytes)

    def configure(self, limits: WatermarkLimits) -> None:
        """New watermarks while the server runs: the gauge is judged again at once, so a
        lower high stops the producers now and a higher low (or off) starts them."""
        self.gauge.configure(
            limits.msghighwatermark,
            limits.msglowwatermark,
            limits.bytehighwatermark,
            limits.bytelowwatermark,
        )

    def producer_joined(self, producer: Producer) -> None:
        """A producer started sending to what this watermark guards."""
        if self.gauge.tripped and producer not in self.stopped:
            self.stopped.add(producer)
            producer.stop_reading(self)

    def forget(self, producer: Producer) -> None:
        """A producer went away."""
        self.stopped.discard(producer)

    def _changed(self, tripped: bool) -> None:
        if tripped:
            self.trips += 1
            for producer in list(self._producers()):
                self.producer_joined(producer)
            log.info(
                "flow.stopped",
                watermark=self.name,
                producers=len(self.stopped),
                messages=self.gauge.messages,
                bytes=self.gauge.bytes,
            )
        else:
            stopped, self.stopped = self.stopped, set()
            for producer in stopped:
                producer.start_reading(self)
            log.info(
                "flow.started",
                watermark=self.name,
                producers=len(stopped),
                messages=self.gauge.messages,
                bytes=self.gauge.bytes,
            )

    def state(self) -> dict[str, Any]:
        gauge = self.gauge
        return {
            "name": self.name,
            "tripped": gauge.tripped,
            "messages": gauge.messages,
            "bytes": gauge.bytes,
            "msg_high": gauge.msg_threshold.high,
            "msg_low": gauge.msg_threshold.low,
            "byte_high": gauge.byte_threshold.high,
            "byte_low": gauge.byte_threshold.low,
            "stopped_producers": len(self.stopped),
            "trips": self.trips,
        }

    def __repr__(self) -> str:
        return f"<Watermark {self.name}>"
