"""The free-disk watermark: persistent producers stop before a disk holding the stores is full.

Each filesystem that holds a store's database file or the write-ahead log is
looked at every ``DiskSpace.checkinterval`` (one ``statvfs`` each, never per
message). Its *used* space has two watermarks of the one threshold type, in
bytes (``minfreebytes``/``resumefreebytes`` free) and in per cent
(``maxusedpercent``/``resumeusedpercent``); while either is set, the persistent
producers of the domains whose stores are there are not read (flow control, as
the other watermarks: the client blocks in its send, nothing is refused). A
producer is stopped at its next persistent SEND, which is taken: a check per
message is one attribute, and one message more is what the margin is for.
Consumers, ACKs and non-persistent producers go on.

The removal path must not need space it cannot get: log segments are
zero-filled ahead (the write-ahead log), and each filesystem keeps a reserve
file of ``reservebytes``. When its free space falls below the reserve's size
(the disk is full: something else filled it, or the server starts on it) the
reserve is given back, so that the databases' catch-up with the log, the next
segment and an open's replay can still write, and consumers drain the stores.
It is taken again once the watermark has cleared and twice its size is free.
The space the reserve should hold counts as used while it is given back, so
giving it back does not clear the watermark.

Usage events, like the spool's: ``disk.usage_high`` when the used space reaches
``usagesetpercent`` of where producers are stopped, ``disk.usage_normal`` at
``usageclearpercent``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from wiremq.config.groups import DiskSpaceSettings
from wiremq.config.settings import Settings
from wiremq.modules.domains import P2P, PUBSUB
from wiremq.modules.flow.threshold import OFF, Threshold, Transition, percent_threshold
from wiremq.modules.flow.watermarks import Producer

log = structlog.get_logger("wiremq.disk")

RESERVE_FILE = "disk.reserve"

Measure = Callable[[Path], tuple[int, int]]  # a folder -> its filesystem's total, free bytes


def statvfs(folder: Path) -> tuple[int, int]:
    """The size of the filesystem holding ``folder`` and the space free to us, in bytes."""
    found = os.statvfs(folder)
    return found.f_blocks * found.f_frsize, found.f_bavail * found.f_frsize


class Reserve:
    """A file of space kept aside on one filesystem, given back when it is full."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def size(self) -> int:
        """The bytes it holds now (0: given back)."""
        try:
            return os.stat(self.path).st_blocks * 512
        except FileNotFoundError:
            return 0

    def take(self, size: int) -> bool:
        """Allocate ``size`` bytes; False (nothing kept) if the filesystem has not got them."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.posix_fallocate(fd, 0, size)
            finally:
                os.close(fd)
        except OSError as error:
            log.warning("disk.reserve_failed", path=str(self.path), error=str(error))
            self.give_back()
            return False
        return True

    def give_back(self) -> None:
        self.path.unlink(missing_ok=True)


class _Hold:
    """Why a domain's persistent producers are not read (a ``ReadGate`` reason)."""

    def __init__(self, domain: str) -> None:
        self.domain = domain

    def __str__(self) -> str:
        return f"free disk space ({self.domain})"


@dataclass(frozen=True, slots=True)
class Watched:
    """A store kept in local files, or the log: where it is, the domains it holds, and
    how many bytes it holds that will be written again on its disk (the log's records
    are copied into the databases before its segments go)."""

    name: str
    folder: Path
    domains: frozenset[str]
    to_copy: Callable[[], int] = lambda: 0


class Filesystem:
    """One filesystem holding stores or the log: its thresholds, reserve and last figures."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.stores: list[str] = []
        self.domains: set[str] = set()
        self.copies: list[Callable[[], int]] = []
        self.reserve = Reserve(folder / RESERVE_FILE)
        self.by_bytes = Threshold(OFF, OFF)
        self.by_percent = Threshold(OFF, OFF)
        self.usage = Threshold(OFF, OFF)
        self.total = self.free = self.used = 0
        self.trips = 0

    @property
    def full(self) -> bool:
        """Whether its persistent producers are to be stopped."""
        return self.by_bytes.is_set or self.by_percent.is_set

    def add(self, watched: Watched) -> None:
        self.stores.append(watched.name)
        self.domains |= watched.domains
        self.copies.append(watched.to_copy)

    def update(self, settings: DiskSpaceSettings, total: int, free: int) -> bool | None:
        """New figures; True or False when producers are to stop or go on, else None."""
        was_full = self.full
        reserve = self.reserve.size
        if reserve and (free < settings.reservebytes or not settings.reservebytes):
            self.reserve.give_back()  # a full disk (or no reserve wanted any more)
            reserve = 0
            log.warning("disk.reserve_released", folder=str(self.folder), free=free)
        self.total, self.free = total, free
        # Space the reserve should hold but does not counts as used (giving it back must
        # not clear the watermark), and so does what will be copied.
        missing = max(0, settings.reservebytes - reserve)
        self.used = used = total - free + missing + sum(copy() for copy in self.copies)
        high, low = _marks(total, settings.minfreebytes, settings.resumefreebytes)
        self.by_bytes.configure(high, low, used)
        percent = used * 100 / total if total else 100.0
        self.by_percent.configure(settings.maxusedpercent, settings.resumeusedpercent, percent)
        stop_at = _stop_at(settings, total, high)
        usage = percent_threshold(stop_at, settings.usagesetpercent, settings.usageclearpercent)
        self._usage_event(self.usage.configure(usage.high, usage.low, used), stop_at)
        if (
            not self.full
            and settings.reservebytes > reserve
            and free >= 2 * settings.reservebytes
            and self.reserve.take(settings.reservebytes)
        ):
            log.info("disk.reserve_taken", folder=str(self.folder), bytes=settings.reservebytes)
        if self.full == was_full:
            return None
        if self.full:
            self.trips += 1
        return self.full

    def _usage_event(self, transition: Transition | None, stop_at: float) -> None:
        figures = {"folder": str(self.folder), "stores": self.stores, "used": self.used}
        if transition is Transition.SET:
            log.warning("disk.usage_high", **figures, stop_at=round(stop_at))
        elif transition is Transition.CLEAR:
            log.info("disk.usage_normal", **figures, stop_at=round(stop_at))

    def state(self, held: int) -> dict[str, Any]:
        return {
            "folder": str(self.folder),
            "stores": self.stores,
            "total_bytes": self.total,
            "free_bytes": self.free,
            "used_bytes": self.used,
            "used_percent": round(self.used * 100 / self.total, 2) if self.total else None,
            "producers_held": self.full,
            "held_producers": held,
            "usage_high": self.usage.is_set,
            "reserve_held": self.reserve.size > 0,
            "reserve_bytes": self.reserve.size,
            "trips": self.trips,
        }


def _marks(total: int, stop_below: int, resume_above: int) -> tuple[float, float]:
    """The used-space bounds of free-space limits (OFF if either is)."""
    if stop_below == OFF or resume_above == OFF:
        return OFF, OFF
    return max(0, total - stop_below), max(0, total - resume_above)


def _stop_at(settings: DiskSpaceSettings, total: int, high: float) -> float:
    """The used space at which producers stop (the whole disk if no watermark is on)."""
    if high != OFF:
        return high
    if settings.maxusedpercent != OFF:
        return total * settings.maxusedpercent / 100
    return total


class DiskSpace:
    """The filesystems holding the stores and the log, and the producers their lack of
    space holds. ``full[domain]`` (and ``any_full``) say whether a domain's persistent
    producers are stopped now."""

    def __init__(
        self,
        settings: Settings,
        watched: Sequence[Watched] = (),
        measure: Measure = statvfs,
    ) -> None:
        """``watched``: each store kept in local files, and the log; one ``Filesystem``
        per device among their folders."""
        self._settings = settings
        self._measure = measure
        by_device: dict[int, Filesystem] = {}
        for one in watched:
            one.folder.mkdir(parents=True, exist_ok=True)
            device = os.stat(one.folder).st_dev
            if device not in by_device:
                by_device[device] = Filesystem(one.folder)
            by_device[device].add(one)
        self.filesystems = list(by_device.values())
        self.full = {P2P: False, PUBSUB: False}
        self.any_full = False
        self._reasons = {domain: _Hold(domain) for domain in self.full}
        self._held: dict[str, set[Producer]] = {domain: set() for domain in self.full}

    def check(self) -> None:
        """Look at every filesystem: stop or restart producers, give back or take the
        reserves, raise usage events."""
        settings = DiskSpaceSettings.read(self._settings, "DiskSpace")
        changed = False
        for filesystem in self.filesystems:
            try:
                total, free = self._measure(filesystem.folder)
            except OSError as error:
                log.warning("disk.unmeasured", folder=str(filesystem.folder), error=str(error))
                continue
            turn = filesystem.update(settings, total, free)
            if turn is None:
                continue
            changed = True
            figures = {"folder": str(filesystem.folder), "stores": filesystem.stores}
            if turn:
                log.warning("disk.producers_stopped", **figures, free=free, used=filesystem.used)
            else:
                log.info("disk.producers_started", **figures, free=free, used=filesystem.used)
        if changed:
            self._refresh()

    def _refresh(self) -> None:
        for domain in self.full:
            full = any(f.full for f in self.filesystems if domain in f.domains)
            self.full[domain] = full
            if not full:
                held, self._held[domain] = self._held[domain], set()
                for producer in held:
                    producer.start_reading(self._reasons[domain])
        self.any_full = any(self.full.values())

    def room_for(self, nbytes: int) -> bool:
        """Whether every filesystem had ``nbytes`` free at the last look, beyond the
        reserve and what the log will copy (a pack copies the live messages first)."""
        return all(f.total - f.used >= nbytes for f in self.filesystems)

    def hold(self, domain: str, producer: Producer) -> None:
        """A producer sent a persistent message of ``domain``: stop it if that domain's
        disk is short of space (called only while ``any_full``)."""
        held = self._held[domain]
        if self.full[domain] and producer not in held:
            held.add(producer)
            producer.stop_reading(self._reasons[domain])

    def forget(self, producer: Producer) -> None:
        """A producer went away."""
        for held in self._held.values():
            held.discard(producer)

    def state(self) -> list[dict[str, Any]]:
        """Each filesystem's figures, for the admin view and ``/metrics``."""
        return [
            f.state(len(set().union(*(self._held[d] for d in f.domains)))) for f in self.filesystems
        ]
