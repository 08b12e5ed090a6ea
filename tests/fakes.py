"""A runtime on a fake clock, for testing plain-Python modules without an event loop.

Timers run when the test advances the clock; worker calls queue up and run when
the test says so (``run_workers``), so the order of events is the test's to choose.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from wiremq.modules.runtime import Answers


@dataclass
class FakeTimer:
    due: float
    function: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class FakeWorker:
    """Queues blocking calls; ``run`` executes them in order and delivers their results."""

    calls: list[tuple[Callable[[], Any], Callable[[Any], None], Callable[[Exception], None]]] = (
        field(default_factory=list)
    )

    def submit(
        self,
        call: Callable[[], Any],
        done: Callable[[Any], None],
        failed: Callable[[Exception], None],
    ) -> None:
        self.calls.append((call, done, failed))

    def run(self) -> int:
        """Run every queued call (and calls they queue); returns how many ran."""
        ran = 0
        while self.calls:
            call, done, failed = self.calls.pop(0)
            try:
                result = call()
            except Exception as error:  # a worker reports failures, it does not raise them
                failed(error)
            else:
                done(result)
            ran += 1
        return ran


class FakeLogWriter(FakeWorker):
    """Queues log writes as worker calls: ``run`` writes and syncs them (for real) and
    reports them, in order, as the server's sync thread does."""

    def write(
        self,
        fd: int,
        offset: int,
        parts: Sequence[bytes],
        done: Callable[[], None],
        failed: Callable[[OSError], None],
        answers: Answers | None = None,
    ) -> None:
        """``answers`` are never asked for: the replies go the usual way."""
        self.submit(lambda: _write_and_sync(fd, offset, parts), lambda _: done(), failed)  # type: ignore[arg-type]

    prepared = 0  # times a write was announced
    answered = 0  # it sends no answers itself

    def prepare(self) -> None:
        """Counted only: ``run`` does the writes."""
        self.prepared += 1


def _write_and_sync(fd: int, offset: int, parts: Sequence[bytes]) -> None:
    os.pwritev(fd, parts, offset)
    os.fdatasync(fd)


@dataclass
class FakeRuntime:
    now: float = 1000.0  # seconds; now_ms derives from it
    soon: list[Callable[[], None]] = field(default_factory=list)
    timers: list[FakeTimer] = field(default_factory=list)
    workers: dict[str, FakeWorker] = field(default_factory=dict)

    def call_soon(self, function: Callable[[], None]) -> None:
        self.soon.append(function)

    def after_writes(self, function: Callable[[], None]) -> None:
        """With the calls soon: a test's loop writes first (``tests/unit/net.py``)."""
        self.soon.append(function)

    def call_later(self, delay: float, function: Callable[[], None]) -> FakeTimer:
        timer = FakeTimer(self.now + delay, function)
        self.timers.append(timer)
        return timer

    def now_ms(self) -> int:
        return int(self.now * 1000)

    def monotonic(self) -> float:
        return self.now

    def worker(self, name: str) -> FakeWorker:
        return self.workers.setdefault(name, FakeWorker())

    def log_writer(self) -> FakeLogWriter:
        """The log's writes, as the worker "log"."""
        return self.workers.setdefault("log", FakeLogWriter())  # type: ignore[return-value]

    def run_soon(self) -> None:
        while self.soon:
            self.soon.pop(0)()

    def advance(self, seconds: float) -> None:
        """Move the clock on, running the timers that fall due, in order."""
        end = self.now + seconds
        while True:
            due = [t for t in self.timers if not t.cancelled and t.due <= end]
            if not due:
                break
            timer = min(due, key=lambda t: t.due)
            self.timers.remove(timer)
            self.now = max(self.now, timer.due)
            timer.function()
        self.now = end
