"""Group commit: many small store operations, one blocking commit.

A store costs far more per commit (a write and a sync) than per message, so
persistent messages (and acknowledgement removals) are collected into batches.
A batch closes when it holds ``max_items`` items or ``max_bytes`` bytes, when its oldest item has
waited ``max_delay`` seconds, or when it is as large as the next commit is
expected to be. An idle worker takes what the current turn of the event loop
collected once the batch is that large: producers that each wait for their
receipt answer one by one, and so share the next commit instead of the first
of them being committed alone. That wait lasts at most as long as the last
commit took (and never past ``max_delay``): holding the writer idle longer
would lose more than it gains. A lone producer (last commit: one item) never
waits.

The next commit is expected to carry what the last one did and what collected
while it ran from others: the producers a commit answers come back with their
next items to join those still waiting (and, where the commit's receipts went
out as it synced, before the event loop heard of its end, some of them are
back already: ``source`` tells whose an item is, and an item of a producer
the commit carried is not counted twice). So when a commit finishes, the batch that
collected meanwhile waits for them as an idle worker waits, unless it is
already that large. Committed at once instead, it would split such producers
into two halves whose commits alternate, each carrying half of them (8
producers: 3.6-3.8 items a commit, against 7-8 with the wait; bench/README.md,
"Group commit"). Batches that closed while a commit was running are committed
together, in one transaction, as soon as it finishes: waiting behind one
commit, they gain nothing from being committed apart. With ``max_delay`` 0
there is no batching: every item is committed on its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from wiremq.modules.runtime import Runtime, Timer

I = TypeVar("I")  # noqa: E741 - an item
R = TypeVar("R")  # a commit's result

# Starts committing a batch; calls the first callback with the result, or the second with
# the error, later, on the event loop.
Commit = Callable[[list[I], Callable[[R], None], Callable[[Exception], None]], None]


class GroupCommit(Generic[I, R]):
    """Collects items and commits them in batches, one commit at a time."""

    def __init__(
        self,
        runtime: Runtime,
        commit: Commit[I, R],
        committed: Callable[[list[I], R], None],
        failed: Callable[[list[I], Exception], None],
        *,
        size: Callable[[I], int],
        max_items: int,
        max_bytes: int,
        max_delay: float,
        source: Callable[[I], object] | None = None,
    ) -> None:
        """``source``: who sent an item (its producer), if items have one."""
        self.runtime = runtime
        self._source = source
        self._commit = commit
        self._committed = committed
        self._failed = failed
        self._size = size
        self.max_items = max_items
        self.max_bytes = max_bytes
        self.max_delay = max_delay
        self._open: list[I] = []  # the batch being collected
        self._bytes = 0
        self._closed: list[list[I]] = []  # closed batches waiting for the worker
        self._running = False
        self._timer: Timer | None = None
        self._opened = 0.0  # when the open batch's oldest item came (runtime.monotonic)
        self._close_scheduled = False
        self._expected = 1  # how many items the last commit carried (capped at max_items)
        self._last_duration = 0.0  # how long the last commit took, in seconds
        self._started = 0.0
        self._added = 0  # items added so far
        self._finished = 0  # items whose commit has finished (or failed)
        self._waiters: list[tuple[int, Callable[[], None]]] = []
        self.batches = 0  # commits made, for statistics
        self.items = 0  # items committed

    def add(self, item: I) -> None:
        if not self._open:
            self._opened = self.runtime.monotonic()
        self._open.append(item)
        self._added += 1
        self._bytes += self._size(item)
        if not self.max_delay or len(self._open) >= self.max_items or self._bytes >= self.max_bytes:
            self._close()
        elif not self._running and len(self._open) >= self._expected:
            if not self._close_scheduled:
                self._close_scheduled = True
                self.runtime.call_soon(self._scheduled_close)
        elif self._timer is None:
            wait = self.max_delay if self._running else min(self.max_delay, self._last_duration)
            self._timer = self.runtime.call_later(wait, self._close)

    def when_committed(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once everything added so far is committed (or failed)."""
        if self._finished >= self._added:
            callback()
        else:
            self._waiters.append((self._added, callback))

    def _scheduled_close(self) -> None:
        self._close_scheduled = False
        if not self._running:
            self._close()

    def _close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._open:
            self._closed.append(self._open)
            self._open, self._bytes = [], 0
        self._start()

    def _start(self) -> None:
        if self._running or not self._closed:
            return
        if self.max_delay:
            batch = [item for closed in self._closed for item in closed]
            self._closed = []
        else:
            batch = self._closed.pop(0)
        self._running = True
        self._started = self.runtime.monotonic()
        self._commit(
            batch,
            lambda result: self._finish(batch, result, None),
            lambda error: self._finish(batch, None, error),
        )

    def _finish(self, batch: list[I], result: R | None, error: Exception | None) -> None:
        self._running = False
        self._expected = min(len(batch) + self._from_others(batch), self.max_items)
        now = self.runtime.monotonic()
        self._last_duration = now - self._started
        self._finished += len(batch)
        if error is None:
            self.batches += 1
            self.items += len(batch)
            self._committed(batch, result)  # type: ignore[arg-type]
        else:
            self._failed(batch, error)
        if self._waiters:
            due = [call for mark, call in self._waiters if mark <= self._finished]
            self._waiters = [(m, c) for m, c in self._waiters if m > self._finished]
            for call in due:
                call()
        if self._closed or len(self._open) >= self._expected:
            self._close()
        elif self._open:
            self._wait_for_the_answered(now)

    def _from_others(self, batch: list[I]) -> int:
        """How many items of the open batch come from producers ``batch`` did not carry."""
        source = self._source
        if source is None:
            return len(self._open)
        carried = {source(item) for item in batch}
        return sum(1 for item in self._open if source(item) not in carried)

    def _wait_for_the_answered(self, now: float) -> None:
        """The open batch waits for the producers the finished commit answered: at most as
        long as that commit took, and never past its oldest item's ``max_delay``."""
        wait = min(self._last_duration, self._opened + self.max_delay - now)
        if wait <= 0:
            self._close()
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.runtime.call_later(wait, self._close)
