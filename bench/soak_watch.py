"""The server's resident memory and open file descriptors over a soak.

A leak shows as memory that keeps growing under a steady load, or as
descriptors that outlive the clients that caused them; so both are sampled all
along, tagged with the server's pid (a restart starts a new series), and the
descriptors are told apart by kind: sockets are what clients control.
"""

from __future__ import annotations

import os
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import psutil
from server_proc import PeriodicSampler

MB = 2**20


def descriptors(pid: int) -> Counter[str]:
    """Open descriptors of ``pid`` by kind: socket, pipe, anon_inode, file."""
    kinds: Counter[str] = Counter()
    folder = f"/proc/{pid}/fd"
    try:
        names = os.listdir(folder)
    except OSError:
        return kinds
    for name in names:
        try:
            target = os.readlink(f"{folder}/{name}")
        except OSError:
            continue  # closed meanwhile
        kind = target.split(":", 1)[0] if not target.startswith("/") else "file"
        kinds[kind] += 1
    return kinds


@dataclass(frozen=True)
class Sample:
    at: float  # time.monotonic()
    pid: int
    rss_mb: float
    fds: Counter[str]


class Watch(PeriodicSampler):
    """Samples the server now running (``pid()``; None while it is down)."""

    def __init__(self, pid: Callable[[], int | None], interval: float = 0.5) -> None:
        super().__init__(interval, "watch")
        self.pid = pid
        self.samples: list[Sample] = []

    def sample(self) -> None:
        taken = take(self.pid())
        if taken is not None:
            self.samples.append(taken)

    def of(self, pid: int, start: float = 0.0, end: float = float("inf")) -> list[Sample]:
        return [s for s in self.samples if s.pid == pid and start <= s.at <= end]


def take(pid: int | None) -> Sample | None:
    if pid is None:
        return None
    try:
        rss = psutil.Process(pid).memory_info().rss / MB
    except psutil.Error:
        return None
    return Sample(time.monotonic(), pid, rss, descriptors(pid))


def growth_mb(samples: list[Sample]) -> float:
    """Median RSS of the last quarter minus that of the second: what a steady load
    kept adding once warmed up (0 when there are too few samples)."""
    quarter = len(samples) // 4
    if quarter < 2:
        return 0.0
    second = statistics.median(s.rss_mb for s in samples[quarter : 2 * quarter])
    last = statistics.median(s.rss_mb for s in samples[3 * quarter :])
    return last - second
