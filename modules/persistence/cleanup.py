"""Cleanup processes: periodic removal of expired messages, in small steps.

The persistent store has a cleanup process for its queues and one for its
topics (PersQueueFileStore / TopicFileStore parameters): every
``cleanupinterval`` seconds a run finds up to ``cleanuptransactionsize``
expired messages on the store's reader worker and moves them (removed, or to
their dead message queue) in one store transaction; while it finds full
steps it goes on after ``cleanupgaptime``, until nothing more is due or the
run has lasted ``cleanuptransactiontime``, so that live traffic is never held
up for long.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from wiremq.config.groups import StoreSettings, WalSettings
from wiremq.config.settings import Settings
from wiremq.modules.destinations.expiry import Expiry
from wiremq.modules.journal.recorder import CleanupRun, Journal
from wiremq.modules.persistence.store import Persistence
from wiremq.modules.runtime import Runtime, Timer
from wiremq.stores.api import Position
from wiremq.stores.records import StoredMessage

log = structlog.get_logger("wiremq.cleanup")


class Periodic:
    """Runs an action every ``interval()`` seconds until stopped; an action that raises
    is logged and runs again next time. An action that walks the destinations a slice at
    a time (``modules/destinations/rotation.py``) returns True while its pass has more:
    it runs again on the next turn of the event loop, after what clients asked meanwhile."""

    def __init__(
        self, runtime: Runtime, interval: Callable[[], float], action: Callable[[], bool | None]
    ):
        self.runtime = runtime
        self.interval = interval
        self.action = action
        self._timer: Timer | None = None
        self._due = 0.0

    def start(self) -> None:
        delay = self.interval()
        self._due = self.runtime.monotonic() + delay
        self._timer = self.runtime.call_later(delay, self._run)

    def interval_changed(self) -> None:
        """The interval may have changed: a shorter one applies to the wait under way."""
        if self._timer is not None and self._due - self.runtime.monotonic() > self.interval():
            self._timer.cancel()
            self.start()

    def _run(self) -> None:
        more = False
        try:
            more = bool(self.action())
        except Exception as error:  # a periodic task must outlive one bad run
            log.exception(
                "periodic.failed", action=getattr(self.action, "__name__", "?"), error=str(error)
            )
        if more:
            self._timer = self.runtime.call_later(0.0, self._run)
        else:
            self.start()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class StoreCleanup:
    """The cleanup process of the stored messages of one kind (queues or topics)."""

    def __init__(
        self,
        name: str,
        prefix: str,
        group: str,
        runtime: Runtime,
        settings: Settings,
        persistence: Persistence,
        expiry: Expiry,
        journal: Journal,
    ) -> None:
        """``name``: the store's name in the journal (``persqueue``, ``topics``)."""
        self.name = name
        self.prefix = prefix
        self.group = group
        self.runtime = runtime
        self.settings = settings
        self.persistence = persistence
        self.expiry = expiry
        self.journal = journal
        self._timer: Timer | None = None
        self._stopped = True
        self._run_started = 0.0
        self._journaled: CleanupRun | None = None  # the run in progress
        self._next_run_due: float | None = None  # while waiting for the next run

    def _current(self) -> StoreSettings:
        """The group's values now (they may change while the server runs)."""
        return StoreSettings.read(self.settings, self.group)

    def start(self) -> None:
        self._stopped = False
        self._schedule(self._current().cleanupinterval, new_run=True)

    def stop(self) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._end_run()

    def _schedule(self, delay: float, new_run: bool) -> None:
        """The next step; it replaces one already scheduled, so that a step that failed
        half-way and called back anyway never leaves two runs going."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._next_run_due = None
        if not self._stopped:
            self._timer = self.runtime.call_later(delay, self._run if not new_run else self._begin)
            if new_run:
                self._next_run_due = self.runtime.monotonic() + delay

    def interval_changed(self) -> None:
        """``cleanupinterval`` may have changed: a shorter one applies to the wait under way."""
        due, interval = self._next_run_due, self._current().cleanupinterval
        if due is not None and due - self.runtime.monotonic() > interval:
            self._schedule(interval, new_run=True)

    def _begin(self) -> None:
        self._next_run_due = None
        self._run_started = self.runtime.monotonic()
        self._journaled = self.journal.cleanup_started(self.name, self._current())
        self._run()

    def _run(self) -> None:
        self._timer = None
        now_ms = self.runtime.now_ms()
        size = self._current().cleanuptransactionsize
        store, prefix = self.persistence.store, self.prefix
        self.persistence.reader.submit(
            lambda: store.expired(prefix, now_ms, size),
            lambda found: self._found(found, size),
            self._failed,
        )

    def _found(self, found: list[tuple[Position, StoredMessage]], size: int) -> None:
        try:
            if found:
                run = self._journaled
                if run is not None:
                    run.scanned += len(found)
                self.expiry.expired_stored(found, lambda: self._next(len(found) >= size), run)
            else:
                self._next(False)
        except Exception as error:  # the cleanup must outlive one bad run
            self._failed(error)

    def _next(self, more: bool) -> None:
        """After a step: the next one after the gap, or the next run after the interval."""
        settings = self._current()
        elapsed = self.runtime.monotonic() - self._run_started
        if more and elapsed < settings.cleanuptransactiontime:
            self._schedule(settings.cleanupgaptime, new_run=False)
        else:
            self._end_run()
            self._schedule(settings.cleanupinterval, new_run=True)

    def _failed(self, error: Exception) -> None:
        """A step failed: logged, and the next run comes after the interval."""
        log.error("cleanup.failed", store=self.name, error=str(error))
        self._end_run()
        self._schedule(self._current().cleanupinterval, new_run=True)

    def _end_run(self) -> None:
        if self._journaled is not None:
            self.journal.cleanup_ended(self._journaled)
            self._journaled = None


class CatchUp:
    """The store's databases catch up with what was committed: on the store's reader
    worker every ``WriteAheadLog.catchupinterval`` seconds, each time for at most
    ``catchuptime`` seconds, one at a time. A catch-up that used its whole time left
    records behind: the next one is queued at once (behind the reads waiting for the
    worker) instead of after the interval, so that the log never grows for long faster
    than the databases take it in, and an open after a crash replays seconds of it."""

    def __init__(self, runtime: Runtime, settings: Settings, persistence: Persistence) -> None:
        self.runtime = runtime
        self.settings = settings
        self.persistence = persistence
        self._timer: Timer | None = None
        self._stopped = True
        self._due = 0.0

    def start(self) -> None:
        self._stopped = False
        self._schedule()

    def stop(self) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule(self) -> None:
        if not self._stopped:
            interval = WalSettings.read(self.settings, "WriteAheadLog").catchupinterval
            self._due = self.runtime.monotonic() + interval
            self._timer = self.runtime.call_later(interval, self._run)

    def interval_changed(self) -> None:
        """``catchupinterval`` may have changed: a shorter one applies to the wait under way."""
        interval = WalSettings.read(self.settings, "WriteAheadLog").catchupinterval
        if self._timer is not None and self._due - self.runtime.monotonic() > interval:
            self._timer.cancel()
            self._schedule()

    def _run(self) -> None:
        self._timer = None
        seconds = WalSettings.read(self.settings, "WriteAheadLog").catchuptime
        store = self.persistence.store
        clock = self.runtime.monotonic

        def catch_up() -> bool:
            """Catch up; whether its time ran out (so that records were left)."""
            started = clock()
            store.catch_up(seconds)
            return clock() - started >= seconds

        self.persistence.reader.submit(catch_up, self._caught_up, self._failed)

    def _caught_up(self, behind: bool) -> None:
        if behind and not self._stopped:
            self._run()
        else:
            self._schedule()

    def _failed(self, error: Exception) -> None:
        log.error("store.catch_up_failed", error=str(error))
        self._schedule()
