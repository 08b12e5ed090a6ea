"""MemWatch: the server's memory in levels, with actions per level, and the reader's check.

The server's memory is measured (the process's resident set, RSS) and
estimated from the bytes it holds in its buffers, transactions and stores
(``MemoryEstimate``); both are shown in the query API. MemWatch compares the
measured figure with ``MemWatch.maxmemory`` every ``checkinterval``: levels
start at fractions of it (config.xml's ``<MemoryLevels>``; by default level 1
from 50 %, level 2 from 80 %, below that level 0), each level is one
``Threshold`` (left only ``hysteresis`` below where it starts, so that a figure
hovering at a bound does not flap), and each level has actions, told whenever
the level changes:

- ``collect``: an extra garbage collection every ``interval`` seconds while
  its level is in force (2 s at level 1, 750 ms at level 2 by default): the
  cycle collector runs seldom (``server/cli.py``), and garbage in cycles waits
  for it (the stores' database connections break the one ZODB's serializers
  make, ``stores/leandb.py``); then freed memory is handed back to the system
  (``malloc_trim``). A collection walks every live object: with millions of
  them (100,000 queues) it holds the event loop for seconds and frees little,
  so the next one waits long enough that collections take at most
  ``MemWatch.collectshare`` of the time.
- ``warn``: a warning when its level is entered (the top level by default),
  and a note once the level is back at 0.
- your own: a ``MemoryAction`` subclass named by ``class=`` in config.xml,
  given the options written there.

The socket reader asks ``admit`` before it reads a frame whose body is larger
than ``MemWatch.messagethreshold``: at the top level the frame is not read
until memory is free (the client's socket is not read; it is read again when
the level drops), or, with ``whenfull="disconnect"``, the client gets an ERROR
and is disconnected.
"""

from __future__ import annotations

import ctypes
import gc
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import structlog

from wiremq.config.groups import MemWatchSettings
from wiremq.modules.flow.threshold import Threshold
from wiremq.modules.flow.watermarks import Producer
from wiremq.modules.runtime import Runtime, Timer

log = structlog.get_logger("wiremq.memwatch")


class MemoryReading(NamedTuple):
    """One look at the server's memory."""

    measured: int  # bytes resident (RSS); the estimate where nothing is measured
    estimated: int  # bytes the server knows it holds
    level: int


@dataclass(frozen=True)
class ActionContext:
    """What an action is given: its level, the settings and the runtime (its timers)."""

    level: int
    settings: MemWatchSettings
    runtime: Runtime


class MemoryAction(ABC):
    """What MemWatch does at one level; told of every level change."""

    #: the config.xml name of a built-in action
    name: ClassVar[str] = ""

    def __init__(self, context: ActionContext, options: Mapping[str, str]) -> None:
        """``options``: the other attributes of its config.xml element; a ``ValueError``
        here is reported as a configuration error naming the element's line."""
        self.context = context
        self.level = context.level

    @abstractmethod
    def level_changed(self, old: int, new: int, reading: MemoryReading) -> None:
        """MemWatch went from level ``old`` to ``new``."""


def _positive_seconds(options: Mapping[str, str], name: str) -> float:
    text = options.get(name)
    if text is None:
        raise ValueError(f"needs {name}= (seconds)")
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a number of seconds") from None
    if not value > 0:
        raise ValueError(f"{name} must be more than 0 seconds")
    return value


def release_memory() -> None:
    """A full garbage collection, then freed memory handed back to the system."""
    gc.collect()
    if _malloc_trim is not None:
        _malloc_trim(0)


def _find_malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, where there is one."""
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


_malloc_trim = _find_malloc_trim()


class CollectAction(MemoryAction):
    """An extra garbage collection every ``interval`` seconds while its level is in force."""

    name = "collect"

    def __init__(self, context: ActionContext, options: Mapping[str, str]) -> None:
        super().__init__(context, options)
        self.interval = _positive_seconds(options, "interval")
        self._timer: Timer | None = None
        self.collections = 0

    def level_changed(self, old: int, new: int, reading: MemoryReading) -> None:
        if new == self.level and self._timer is None:
            self._collect()
        elif new != self.level and self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _collect(self) -> None:
        runtime = self.context.runtime
        started = runtime.monotonic()
        release_memory()
        took = runtime.monotonic() - started
        self.collections += 1
        delay = max(self.interval, took / self.context.settings.collectshare)
        self._timer = runtime.call_later(delay, self._collect)


class WarnAction(MemoryAction):
    """A warning when its level is entered, and a note once memory is back at level 0."""

    name = "warn"

    def __init__(self, context: ActionContext, options: Mapping[str, str]) -> None:
        super().__init__(context, options)
        self.warned = False

    def level_changed(self, old: int, new: int, reading: MemoryReading) -> None:
        limit = self.context.settings.maxmemory
        if new == self.level and old < new:
            self.warned = True
            log.warning(
                "memory.high",
                level=new,
                measured=reading.measured,
                estimated=reading.estimated,
                maxmemory=limit,
            )
        elif new == 0 and self.warned:
            self.warned = False
            log.info(
                "memory.normal",
                measured=reading.measured,
                estimated=reading.estimated,
                maxmemory=limit,
            )


BUILTIN_ACTIONS: dict[str, type[MemoryAction]] = {
    cls.name: cls for cls in (CollectAction, WarnAction)
}


@dataclass
class MemoryLevel:
    """One level: from ``start`` (a fraction of maxmemory), left below ``clear``."""

    start: float
    clear: float
    actions: list[MemoryAction]


class MemWatch:
    """The memory levels, their actions, and the readers waiting for memory."""

    def __init__(
        self,
        settings: MemWatchSettings,
        levels: list[MemoryLevel],
        runtime: Runtime,
        measure: Callable[[], int] | None,
        estimate: Callable[[], dict[str, int]],
    ) -> None:
        """``levels``: from level 1 up, their starts rising; ``measure``: the process's
        resident bytes (None: the estimate stands in for it)."""
        self.settings = settings
        self.levels = levels
        self.runtime = runtime
        self.measure = measure
        self.estimate = estimate
        limit = settings.maxmemory
        self._thresholds = [Threshold(lv.start * limit, lv.clear * limit) for lv in levels]
        self.level = 0
        self.top = len(levels)
        self.reading = MemoryReading(0, 0, 0)
        self.peak = 0
        self.waiting: set[Producer] = set()  # readers stopped until memory is free
        self.refused = 0  # large frames refused (whenfull=disconnect)
        self._timer: Timer | None = None

    # -- measuring -------------------------------------------------------------------------

    def start(self) -> None:
        self.check()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for level in self.levels:
            for action in level.actions:
                action.level_changed(self.level, 0, self.reading)

    def check(self) -> MemoryReading:
        """Measure, move to the level the figure is at, and look again after checkinterval."""
        if self._timer is not None:
            self._timer.cancel()
        reading = self.sample()
        self._timer = self.runtime.call_later(self.settings.checkinterval, self.check)
        return reading

    def sample(self) -> MemoryReading:
        """Measure now and change level if the figure says so."""
        estimated = sum(self.estimate().values())
        measured = self.measure() if self.measure is not None else estimated
        self.peak = max(self.peak, measured)
        level = 0
        for index, threshold in enumerate(self._thresholds, 1):
            threshold.update(measured)
            if threshold.is_set:
                level = index
        old = self.level
        self.level = level
        self.reading = reading = MemoryReading(measured, estimated, level)
        if level != old:
            log.info("memory.level", old=old, new=level, measured=measured, estimated=estimated)
            for memory_level in self.levels:
                for action in memory_level.actions:
                    action.level_changed(old, level, reading)
            if level < self.top and self.waiting:
                waiting, self.waiting = self.waiting, set()
                for reader in waiting:
                    reader.start_reading(self)
        return reading

    # -- the socket reader's check ---------------------------------------------------------

    def check_frame(self, reader: Producer, size: int) -> bool:
        """The socket reader's check before it reads a frame of ``size`` bytes: below the
        top level it goes on; at the top level ``reader`` is stopped until memory is
        free (whenfull wait), or False is returned: it is to be disconnected (whenfull
        disconnect)."""
        if size <= self.settings.messagethreshold or not self.top:
            return True
        if self.sample().level < self.top:
            return True
        if self.settings.whenfull == "disconnect":
            self.refused += 1
            return False
        self.waiting.add(reader)
        reader.stop_reading(self)
        return True

    def forget(self, reader: Producer) -> None:
        self.waiting.discard(reader)

    def state(self) -> dict[str, object]:
        """The memory figures for the query API (and the console)."""
        reading = self.reading
        return {
            "measured": reading.measured,
            "measured_peak": self.peak,
            "estimated": self.estimate(),
            "maxmemory": self.settings.maxmemory,
            "level": self.level,
            "levels": [
                {
                    "from": level.start,
                    "clear": level.clear,
                    "actions": [action.name or type(action).__name__ for action in level.actions],
                }
                for level in self.levels
            ],
            "readers_waiting": len(self.waiting),
            "frames_refused": self.refused,
            "collections": sum(
                getattr(action, "collections", 0)
                for level in self.levels
                for action in level.actions
            ),
        }

    def __str__(self) -> str:
        return "memory full"
