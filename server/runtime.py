"""The event loop as the plain-Python modules see it: timers, the wall clock, worker threads.

Implements ``wiremq.modules.runtime.Runtime`` on a Twisted reactor. After every
callback it runs on the reactor's behalf it flushes the outbox, so frames
queued by timers and store callbacks are written in one burst.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import structlog
from twisted.internet import defer
from twisted.internet.interfaces import IDelayedCall, IReadDescriptor
from twisted.python.failure import Failure
from zope.interface import implementer

from wiremq.modules.client.egress import Outbox
from wiremq.modules.runtime import Answer, Answers
from wiremq.server._syncthread import SyncThread
from wiremq.server.syncpoll import CpuPressure, SyncPoller, busy

log = structlog.get_logger("wiremq.server")

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


@implementer(IReadDescriptor)
class SyncThreadLogWriter:
    """``modules.runtime.LogWriter`` on a ``SyncThread`` (``_syncthread.c``).

    The write and the sync run on a C thread that never takes the interpreter
    lock and reports through a pipe the reactor watches: a commit costs the
    event loop no hand-over of the lock and no turn through Twisted's thread
    queue (measured: see bench/README.md, "Speed"). Writes wait here and go
    to the thread one at a time, in order. Around each one an idle event loop
    polls for a while instead of sleeping (``syncpoll``).
    """

    def __init__(self, runtime: TwistedRuntime) -> None:
        self.runtime = runtime
        self._notified, notify = os.pipe()
        os.set_blocking(self._notified, False)
        self._thread = SyncThread(notify)
        self._notify = notify
        self._waiting: deque[
            tuple[
                int,
                int,
                Sequence[bytes],
                Callable[[], None],
                Callable[[OSError], None],
                Answers | None,
            ]
        ]
        self._waiting = deque()
        self._in_hand: tuple[Callable[[], None], Callable[[OSError], None]] | None = None
        self._answers: list[Answer] = []  # those the write in hand sends
        self.answered = 0  # replies the thread sent, for statistics
        self._drains: list[defer.Deferred[None]] = []
        self._handed_at = 0.0  # time.perf_counter() when the write in hand was handed over
        self._last_sync = 0.0  # how long the last write took, in seconds
        self._thread_preempted = 0  # the thread's preempted polls, as last seen
        self._thread_held_until = 0.0  # the thread polls after a write from this time on
        self._prepare_held_until = 0.0  # and for a write being made (``prepare``)
        runtime.reactor.addReader(self)

    def write(
        self,
        fd: int,
        offset: int,
        parts: Sequence[bytes],
        done: Callable[[], None],
        failed: Callable[[OSError], None],
        answers: Answers | None = None,
    ) -> None:
        self._waiting.append((fd, offset, parts, done, failed, answers))
        if self._in_hand is None:
            self._hand_over()

    def _hand_over(self) -> None:
        fd, offset, parts, done, failed, source = self._waiting.popleft()
        answers = source() if source is not None else []
        self._handed_at = time.perf_counter()
        # A write the thread answers is a lone producer's: its next record cannot come
        # before the producer has the answer and sends again, and a thread polling
        # meanwhile takes the CPU that producer needs (``prepare`` wakes it in time).
        poll = 0.0 if answers else self._thread_poll(self._handed_at, made=False)
        try:
            self._thread.write(
                fd, offset, parts, poll, [(answer.fd, answer.data) for answer in answers]
            )
        except BaseException:
            for answer in answers:  # never handed: the descriptors are still ours
                os.close(answer.fd)
                answer.settle(None)
            raise
        self._answers = answers
        self._in_hand = (done, failed)
        if self._last_sync <= self.runtime.sync_poll:  # a slower disk: polling is no use
            self._poll_from(self._handed_at)  # for the sync's end

    def _poll_from(self, start: float) -> None:
        """Have the event loop poll rather than sleep for ``sync_poll`` past ``start``."""
        if self.runtime.sync_poll:
            self.runtime.poll_from(start, self.runtime.sync_poll)

    def _thread_poll(self, now: float, made: bool) -> float:
        """How long the sync thread may poll for its next write: ``sync_poll``, or 0 while
        a poll of its that was preempted holds its polling off (``syncpoll``).

        After a write (``made`` False), the next may not come while the thread polls,
        and the producers it answered want the CPU: any preempted poll holds those polls
        off. A write being made (``prepare``, ``made``) comes within microseconds: only
        a preempted poll on a busy machine (``Runtime.cpu_busy``) holds those off
        (measured: bench/README.md, "Polling on a quiet machine")."""
        preempted = self._thread.preempted
        if preempted != self._thread_preempted:
            self._thread_preempted = preempted
            held_until = now + self.runtime.sync_poll_holdoff
            self._thread_held_until = held_until
            if self.runtime.cpu_busy():
                self._prepare_held_until = held_until
        held = self._prepare_held_until if made else self._thread_held_until
        return self.runtime.sync_poll if now >= held else 0.0

    def prepare(self) -> None:
        """Wake the idle thread now (unless it still polls after its last write), so that
        it waits for the write by polling (for up to ``sync_poll``) while the record is
        made: the write then finds it awake."""
        if self._in_hand is None and self.runtime.sync_poll:
            poll = self._thread_poll(time.perf_counter(), made=True)
            if poll:
                self._thread.prepare(poll)

    def doRead(self) -> None:
        """The thread synced a write: report it (and hand it the next one first).

        While the thread sends the write's answers, its callbacks run here; the answers
        are settled, and the next write handed over, once they are sent (``result``
        waits for the sends: the loop, notified first, would otherwise wait for them
        before any callback)."""
        os.read(self._notified, 4096)
        if self._in_hand is None:
            return
        error = self._thread.synced()
        if error is None:
            return
        done, failed = self._in_hand
        finished = time.perf_counter()
        self._last_sync = finished - self._handed_at
        self._poll_from(finished)  # for its producers' next requests
        answered = bool(self._answers)
        if not answered:
            self._end(error)
        try:
            if error:
                failed(OSError(error, os.strerror(error)))
            else:
                done()
        except Exception:  # the reader must stay registered whatever a callback does
            log.exception("log_writer.callback_failed")
        if answered:
            self._end(error)
        if self._in_hand is None and not self._waiting:
            drains, self._drains = self._drains, []
            for drained in drains:
                drained.callback(None)
        self.runtime.outbox.flush()

    def _end(self, error: int) -> None:
        """The write in hand is over (its answers sent): settle them, hand the next over."""
        self._thread.result()
        self._in_hand = None
        if self._answers:
            self._settle(error)
        if self._waiting:
            self._hand_over()

    def _settle(self, error: int) -> None:
        """The write's answers are over: what each socket took (nothing if it failed)."""
        answers, self._answers = self._answers, []
        if error:
            for answer in answers:
                answer.settle(None)
            return
        self.answered += len(answers)
        for answer, sent in zip(answers, self._thread.sent, strict=True):
            answer.settle(sent)

    def fileno(self) -> int:
        return self._notified

    def logPrefix(self) -> str:
        return "wiremq-log-writer"

    def connectionLost(self, reason: Failure) -> None:
        """Nothing to do: ``stop`` removes the reader."""

    def drained(self) -> defer.Deferred[None]:
        """Fires once every write handed over so far has been reported."""
        drained: defer.Deferred[None] = defer.Deferred()
        if self._in_hand is None and not self._waiting:
            drained.callback(None)
        else:
            self._drains.append(drained)
        return drained

    def stop(self) -> None:
        """Finish the write in hand (unreported) and end the thread."""
        self.runtime.reactor.removeReader(self)
        self._thread.close()
        os.close(self._notified)
        os.close(self._notify)


class TwistedRuntime:
    """``call_soon`` runs its functions once the event being handled is done: right after
    a socket read has been handled (``after_read``, before its writes), or, for calls
    from anywhere else (timers, store results), on the reactor's next turn. A function
    that asks for another while they run gets it in the same run, not a turn later (the
    group commit closes its batch that way once a read is handled)."""

    def __init__(
        self,
        reactor: Any,
        outbox: Outbox,
        sync_poll: float = 0.0,
        sync_poll_holdoff: float = 0.0,
        sync_poll_pressure: float = 0.0,
        reply_poll: float = 0.0,
    ) -> None:
        """``sync_poll``: how long the event loop may poll instead of sleeping around the
        log's syncs (``WriteAheadLog.syncpoll``; ``syncpoll.SyncPoller``);
        ``sync_poll_holdoff``: how long a thread whose poll was preempted stops polling
        (``syncpollholdoff``), if the CPU pressure is ``sync_poll_pressure`` or more
        (``syncpollpressure``; 0: whatever it is); ``reply_poll``: how long it may poll
        after a socket read whose handling wrote to a client (``Server.replypoll``); all
        changeable."""
        self.reactor = reactor
        self.outbox = outbox
        self.poller = SyncPoller.install(reactor)  # None: a reactor whose loop always sleeps
        self.reply_poll = reply_poll
        self.sync_poll = sync_poll
        self.sync_poll_holdoff = sync_poll_holdoff
        self.sync_poll_pressure = sync_poll_pressure
        self.cpu_pressure = CpuPressure()  # read at a preempted poll (``cpu_busy``)
        self.workers: dict[str, ThreadWorker] = {}
        self.shared: dict[str, str] = {}  # a worker's name -> the worker that runs its calls
        self._soon: deque[Callable[[], None]] = deque()
        self._log_writer: SyncThreadLogWriter | None = None
        self._scheduled = False  # a reactor call will run _soon
        self._draining = False  # _soon is being run: what is added joins the run
        self.reading = False  # a socket read is being handled: after_read will run _soon

    def call_soon(self, function: Callable[[], None]) -> None:
        self._soon.append(function)
        if not self.reading and not self._draining and not self._scheduled:
            self._scheduled = True
            self.reactor.callLater(0, self._run_soon)

    def after_read(self) -> None:
        """A socket read was handled: run what it asked to run soon, then write; if that
        wrote to a client, poll for a while rather than sleep (``reply_poll``): the client
        answered is likely to send again at once."""
        self.reading = False
        self._drain_soon()
        if self.outbox.flush() and self.reply_poll:
            self.poll_from(time.perf_counter(), self.reply_poll)

    def poll_from(self, start: float, window: float) -> None:
        """Have the event loop poll rather than sleep for ``window`` seconds past ``start``
        (``time.perf_counter``; ``SyncPoller.poll_from``), the CPU pressure keeping a
        recent reading for a poll the scheduler cuts short (``CpuPressure.keep``)."""
        if self.poller is not None:
            self.cpu_pressure.keep(start)
            self.poller.poll_from(start, window, self.sync_poll_holdoff, self.cpu_busy)

    def _run_soon(self) -> None:
        self._scheduled = False
        self._drain_soon()
        self.outbox.flush()

    def _drain_soon(self) -> None:
        soon = self._soon
        self._draining = True
        try:
            while soon:
                soon.popleft()()
        finally:
            self._draining = False

    def call_later(self, delay: float, function: Callable[[], None]) -> _Timer:
        return _Timer(self.reactor.callLater(delay, self._run, function))

    def after_writes(self, function: Callable[[], None]) -> None:
        """Every callback the runtime runs ends by flushing the outbox, which writes, then
        runs its wake-ups."""
        self.outbox.wake(function)

    def _run(self, function: Callable[[], None]) -> None:
        function()
        self.outbox.flush()

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()

    def worker(self, name: str) -> ThreadWorker:
        name = self.shared.get(name, name)
        worker = self.workers.get(name)
        if worker is None:
            worker = self.workers[name] = ThreadWorker(name, self)
        return worker

    def cpu_busy(self) -> bool:
        """Whether a poll the scheduler cut short holds polling off (``syncpoll.busy``)."""
        return busy(self.sync_poll_pressure, self.cpu_pressure)

    def log_writer(self) -> SyncThreadLogWriter:
        if self._log_writer is None:
            self._log_writer = SyncThreadLogWriter(self)
        return self._log_writer

    @defer.inlineCallbacks
    def stop_workers(self) -> Any:
        """Let queued store work finish, then stop the worker threads."""
        if self._log_writer is not None:
            yield self._log_writer.drained()
        for worker in self.workers.values():
            yield worker.drained()
        self.stop_threads()

    def stop_threads(self) -> None:
        """Stop the worker threads (waiting for the call each one is running)."""
        if self._log_writer is not None:
            self._log_writer.stop()
            self._log_writer = None
        for worker in self.workers.values():
            worker.stop()
        self.workers.clear()
