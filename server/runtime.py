"""The event loop as the plain-Python modules see it: timers, the wall clock, worker threads.

Implements ``wiremq.modules.runtime.Runtime`` on a Twisted reactor. After every
callback it runs on the reactor's behalf it flushes the outbox, so frames
queued by timers and store callbacks are written in one burst.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from twisted.internet import defer
from twisted.internet.interfaces import IDelayedCall

from wiremq.modules.egress import Outbox

T = TypeVar("T")
Job = tuple[Callable[[], Any], Callable[[Any], None], Callable[[Exception], None]]


class _Timer:
    """A delayed call whose ``cancel`` is harmless after it ran."""

    __slots__ = ("call",)

    def __init__(self, call: IDelayedCall) -> None:
        self.call = call

    def cancel(self) -> None:
        if self.call.active():
            self.call.cancel()


class ThreadWorker:
    """One dedicated thread running blocking calls in order; results return on the reactor.

    A plain thread and a queue rather than a thread pool: a store commit is handed
    over and answered with as little machinery (and GIL traffic) as possible.
    """

    def __init__(self, name: str, runtime: TwistedRuntime) -> None:
        self.name = name
        self.runtime = runtime
        self.pending = 0
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"wiremq-{name}", daemon=True)
        self._thread.start()

    def submit(
        self,
        call: Callable[[], T],
        done: Callable[[T], None],
        failed: Callable[[Exception], None],
    ) -> None:
        self.pending += 1
        self._jobs.put((call, done, failed))

    def _run(self) -> None:
        jobs = self._jobs
        while (job := jobs.get()) is not None:
            self._run_one(*job)
            del job  # held while waiting for the next one, it would keep its messages

    def _run_one(
        self,
        call: Callable[[], Any],
        done: Callable[[Any], None],
        failed: Callable[[Exception], None],
    ) -> None:
        try:
            result = call()
        except Exception as error:  # handed to ``failed`` on the reactor
            self.runtime.reactor.callFromThread(self._deliver, False, error, done, failed)
        else:
            self.runtime.reactor.callFromThread(self._deliver, True, result, done, failed)

    def _deliver(
        self,
        success: bool,
        result: Any,
        done: Callable[[Any], None],
        failed: Callable[[Exception], None],
    ) -> None:
        self.pending -= 1
        if success:
            done(result)
        else:
            failed(result)
        self.runtime.outbox.flush()

    def stop(self) -> None:
        """End the thread after the calls already queued (waits for them)."""
        self._jobs.put(None)
        self._thread.join()

    def drained(self) -> defer.Deferred[None]:
        """Fires once every call submitted so far has finished."""
        finished: defer.Deferred[None] = defer.Deferred()
        self.submit(lambda: None, lambda _: finished.callback(None), finished.errback)
        return finished


class TwistedRuntime:
    """``call_soon`` runs its functions once the event being handled is done: right after
    a socket read has been handled (``after_read``, before its writes), or, for calls
    from anywhere else (timers, store results), on the reactor's next turn."""

    def __init__(self, reactor: Any, outbox: Outbox) -> None:
        self.reactor = reactor
        self.outbox = outbox
        self.workers: dict[str, ThreadWorker] = {}
        self._soon: deque[Callable[[], None]] = deque()
        self._scheduled = False  # a reactor call will run _soon
        self.reading = False  # a socket read is being handled: after_read will run _soon

    def call_soon(self, function: Callable[[], None]) -> None:
        self._soon.append(function)
        if not self.reading and not self._scheduled:
            self._scheduled = True
            self.reactor.callLater(0, self._run_soon)

    def after_read(self) -> None:
        """A socket read was handled: run what it asked to run soon, then write."""
        self.reading = False
        self._drain_soon()
        self.outbox.flush()

    def _run_soon(self) -> None:
        self._scheduled = False
        self._drain_soon()
        self.outbox.flush()

    def _drain_soon(self) -> None:
        soon = self._soon
        while soon:
            soon.popleft()()

    def call_later(self, delay: float, function: Callable[[], None]) -> _Timer:
        return _Timer(self.reactor.callLater(delay, self._run, function))

    def _run(self, function: Callable[[], None]) -> None:
        function()
        self.outbox.flush()

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()

    def worker(self, name: str) -> ThreadWorker:
        worker = self.workers.get(name)
        if worker is None:
            worker = self.workers[name] = ThreadWorker(name, self)
        return worker

    @defer.inlineCallbacks
    def stop_workers(self) -> Any:
        """Let queued store work finish, then stop the worker threads."""
        for worker in self.workers.values():
            yield worker.drained()
        self.stop_threads()

    def stop_threads(self) -> None:
        """Stop the worker threads (waiting for the call each one is running)."""
        for worker in self.workers.values():
            worker.stop()
        self.workers.clear()
