"""Cleanup processes: periodic removal of expired messages, in small steps.

A store's cleanup runs every ``cleanupinterval`` seconds on the store's own
worker, one transaction of at most ``cleanuptransactionsize`` messages (and
``cleanuptransactiontime`` seconds) at a time, pausing ``cleanupgaptime``
between transactions, so that commits of live traffic queued on the same
worker are never held up for long.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from wiremq.config.settings import Settings
from wiremq.modules.runtime import Runtime, Timer, Worker
from wiremq.stores.records import StoredMessage
from wiremq.stores.results import SweepResult

log = structlog.get_logger("wiremq.cleanup")

SweepStep = Callable[[int, int, float], SweepResult]  # (now_ms, max messages, max seconds)


class Periodic:
    """Runs an action every ``interval()`` seconds until stopped."""

    def __init__(self, runtime: Runtime, interval: Callable[[], float], action: Callable[[], None]):
        self.runtime = runtime
        self.interval = interval
        self.action = action
        self._timer: Timer | None = None

    def start(self) -> None:
        self._timer = self.runtime.call_later(self.interval(), self._run)

    def _run(self) -> None:
        self.action()
        self.start()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class StoreCleanup:
    """The cleanup process of one persistent store: a list of bounded sweep steps."""

    def __init__(
        self,
        name: str,
        runtime: Runtime,
        worker: Worker,
        settings: Settings,
        group: str,
        steps: list[tuple[SweepStep, Callable[[list[StoredMessage]], None]]],
    ) -> None:
        self.name = name
        self.runtime = runtime
        self.worker = worker
        self.settings = settings
        self.group = group
        self.steps = steps
        self._timer: Timer | None = None
        self._stopped = True

    def start(self) -> None:
        self._stopped = False
        self._schedule(self.settings.get_float(self.group, "cleanupinterval"), 0)

    def stop(self) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule(self, delay: float, step: int) -> None:
        if not self._stopped:
            self._timer = self.runtime.call_later(delay, lambda: self._run(step))

    def _run(self, step: int) -> None:
        self._timer = None
        sweep, removed = self.steps[step]
        now_ms = self.runtime.now_ms()
        size = self.settings.get_int(self.group, "cleanuptransactionsize")
        seconds = self.settings.get_float(self.group, "cleanuptransactiontime")
        self.worker.submit(
            lambda: sweep(now_ms, size, seconds),
            lambda result: self._done(step, result, removed),
            self._failed,
        )

    def _done(
        self, step: int, result: SweepResult, removed: Callable[[list[StoredMessage]], None]
    ) -> None:
        if result.removed:
            removed(result.removed)
        if result.more:
            self._schedule(self.settings.get_float(self.group, "cleanupgaptime"), step)
        elif step + 1 < len(self.steps):
            self._schedule(0, step + 1)
        else:
            self._schedule(self.settings.get_float(self.group, "cleanupinterval"), 0)

    def _failed(self, error: Exception) -> None:
        log.error("cleanup.failed", store=self.name, error=str(error))
        self._schedule(self.settings.get_float(self.group, "cleanupinterval"), 0)
