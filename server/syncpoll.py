"""The event loop polls, instead of sleeping, around the write-ahead log's syncs.

A producer that waits for the RECEIPT of every persistent SEND leaves the event
loop nothing to do while its record syncs, and again while the producer turns
the RECEIPT into its next SEND: the loop sleeps in epoll twice a message, and
is woken twice (by the sync thread's notification, by the next SEND). Waking a
sleeping thread is the dearest step of that cycle on a virtual machine (45 µs
of a 400 µs cycle, each time, on the 2-vCPU machine of docs/architecture.md,
"Persistent messages"): the waker's write, an interrupt to an idle virtual CPU,
the host scheduling it again. So when the loop would sleep within
``Runtime.sync_poll`` seconds of handing a record to the sync thread (if the
last sync took no longer) or of a sync's end, it polls epoll without waiting
until an event comes or that time is up, and only then sleeps; each poll lets
go of the interpreter lock, so the other threads go on. It is the guest-side
halt polling a kernel may do (Linux's haltpoll), done by the one thread that
knows when it is worth it. (The sync thread polls for its next write the same
way, see ``_syncthread.c``.) A busy loop finds events at once and never polls
for long; an idle one polls at most ``sync_poll`` after its last sync. 0
switches it off.

The loop polls in the same way after a socket read whose handling wrote to a
client, for ``Runtime.reply_poll`` (``Server.replypoll``): a client sent a
SEND and got its MESSAGE or RECEIPT, and is likely to send the next at once
(``TwistedRuntime.after_read``). A lone client's non-persistent round trip was
84-89 µs sleeping and 46-57 µs polling, against the bare Twisted relay's 74-90
(bench/README.md, "What was tried"). A read that wrote nothing leaves the loop
to sleep: heart-beats, producers nobody answers.

Polling only pays on a CPU nothing else wants. On a machine busy with other
work a polling thread uses up its share of the CPU, loses the precedence the
scheduler gives a thread that sleeps, and is preempted for other tasks: the
event it polls for then waits behind them, milliseconds instead of the
microseconds polling saves (measured: a lone producer waiting on every
receipt, under a load of 2.4 on 2 cores, made 290-2,000 msgs/s with polling
and a steady 2,700 with none). So a poll the scheduler cut short for another
task (an involuntary context switch of the polling thread during the poll)
holds that thread's polling off for ``Runtime.sync_poll_holdoff`` seconds;
then it polls again, and holds off again if it is preempted again. The loop's
polls are watched here, the sync thread's in ``_syncthread.c`` (its
``preempted`` count, read by the log writer).

But a poll is cut short on a quiet machine too, now and then: a woken task
(the producer itself, a kernel worker finishing the sync's I/O) may take the
polling thread's CPU for a moment. A lone producer's loop saw one cut in 35
to 80 polls, busy machine or not, so that half a second of holding off after
each left it polling in 2-3 % of the turns it could (bench/README.md,
"Polling on a quiet machine"). What tells the two machines apart is how
long tasks wait for a CPU: Linux's CPU pressure (``/proc/pressure/cpu``,
the share of time in which some task waited) was 10-19 % on the quiet
machine running the benchmark and 50-76 % with two busy loops beside it. So a
cut holds the loop's polling off only while the pressure is
``Runtime.sync_poll_pressure`` or more (``busy``); where the kernel does not
report it, every cut does, as before. The pressure is that of the last second
or so (``CpuPressure``), not the kernel's ten-second average, which stays
high for seconds after a busy spell has ended. The same holds for the sync
thread's polls for a record being made (``prepare``: it comes within microseconds);
its polls after a write, for a record that may not come while the producers
it answered want the CPU, stop at any cut (``SyncThreadLogWriter._thread_poll``;
with those polls kept up on a quiet machine, 8 producers made a tenth less).

Installed in place of the epoll object of Twisted's epoll reactor (its
``_poller``; a test fails if that changes), once per reactor, whichever
servers share it: each server's log writer tells it how long to poll as it
hands a record over and as a sync ends, and a turn of the loop outside that
time costs one comparison. It also takes over the reactor's turn
(``doIteration``: ``iterate``), which hands each event to the reactor as
Twisted's does but without wrapping it in Twisted's logging context (a
``logPrefix`` for Twisted's own log, which this server does not route
anywhere): about twenty Python calls per socket event, two events per lone
persistent message, whose loop took a tenth fewer instructions without them
(bench/README.md, "What was tried").

It is also where an HA node's lease is enforced (``server/ha.py``): the lease
thread sets ``deadline`` (monotonic seconds: its last successful renewal's
sending time plus the lease, less a margin), and the first turn of the loop
past it, before it hands the reactor a single socket event, calls
``on_deadline`` (the node steps down and never comes back). The loop does not
sleep past the deadline, so a node that can no longer renew stops at it even
when idle; a process frozen (SIGSTOP, a long pause) past it stops as it wakes.
Without a deadline (0, a single server) that is one comparison a turn.
"""

from __future__ import annotations

import resource
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import structlog

log = structlog.get_logger("wiremq.server")


PRESSURE = "/proc/pressure/cpu"


def pressure_reading(path: str = PRESSURE) -> tuple[float, int] | None:
    """The ``some`` line of Linux's pressure stall information for the CPU: its ten-second
    average (percent) and its running total of stalled microseconds; None where the
    kernel does not report it."""
    try:
        with open(path, "rb") as file:
            fields = file.readline().split()
        return float(fields[1].partition(b"=")[2]), int(fields[4].partition(b"=")[2])
    except (OSError, IndexError, ValueError):
        return None


class CpuPressure:
    """The CPU pressure (percent) now: the share of the last second or so in which some
    task waited for a CPU, from the kernel's running total of stalled time and a reading
    of it kept from ``shortest`` to ``longest`` seconds ago; the kernel's ten-second
    average where no reading that old is kept; None where the kernel does not report it.

    The ten-second average lags: after a busy spell it stays over the threshold for ten
    seconds and more, and every preempted poll of a machine gone quiet then holds
    polling off (bench/README.md, "The CPU pressure of the last second"). So readings
    are kept: each one taken here, and one every ``period`` at most while the loop is
    told to poll (``keep``: a comparison a message, a read of the file twice a second).
    The spans are the method's, not tunables: a cut while the loop polls finds a
    reading at most ``period`` old to compare with; under ``shortest`` too little time
    has passed to tell; past ``longest`` a reading tells of another spell."""

    shortest = 0.25  # seconds
    longest = 2.0
    period = 0.5

    def __init__(
        self, path: str = PRESSURE, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.path = path
        self.clock = clock
        self.readings: deque[tuple[float, int]] = deque(maxlen=2)  # (time, stalled µs)
        self._next_keep = 0.0

    def keep(self, now: float) -> None:
        """Keep a reading taken ``now`` (``clock`` time), unless one was kept within
        ``period``."""
        if now >= self._next_keep:
            self._next_keep = now + self.period
            self._take(now)

    def __call__(self) -> float | None:
        now = self.clock()
        since = next(
            (kept for kept in reversed(self.readings) if now - kept[0] >= self.shortest), None
        )
        reading = self._take(now)
        if reading is None:
            return None
        average, total = reading
        if since is None or now - since[0] > self.longest:
            return average
        return min(100.0, max(0.0, (total - since[1]) / ((now - since[0]) * 1e4)))

    def _take(self, now: float) -> tuple[float, int] | None:
        """Read the kernel's figures and keep the total as of ``now``; None (and nothing
        kept any more) where it does not report them."""
        reading = pressure_reading(self.path)
        if reading is None:
            self.readings.clear()
        else:
            self.readings.append((now, reading[1]))
        return reading


def busy(threshold: float, pressure: Callable[[], float | None]) -> bool:
    """Whether a poll the scheduler cut short tells of a CPU busy with other work, so that
    polling is held off: the CPU pressure is ``threshold`` or more, or is not known; at a
    threshold of 0, always (the pressure is not read)."""
    if threshold <= 0:
        return True
    level = pressure()
    return level is None or level >= threshold


def involuntary_switches() -> int:
    """How many times the scheduler has taken the CPU from the calling thread for another
    task."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw


class SyncPoller:
    """Stands in for the reactor's epoll object; see the module docstring."""

    def __init__(self, epoll: Any, reactor: Any = None) -> None:
        self.epoll = epoll
        self.reactor = reactor  # whose turns ``iterate`` takes (None: only ``poll``)
        self.until = 0.0  # time.perf_counter() up to which the loop polls rather than sleeps
        self.held_until = 0.0  # no polling before this: a poll was preempted
        self.holdoff = 0.0  # how long a preempted poll holds polling off, in seconds
        self.busy: Callable[[], bool] = lambda: True  # whether a preempted poll holds it off
        self.preempted = 0  # polls cut short by the scheduler, for statistics
        self.deadline = 0.0  # time.monotonic() past which this process may not serve (0: none)
        self.on_deadline: Callable[[], None] = lambda: None

    @classmethod
    def install(cls, reactor: Any) -> SyncPoller | None:
        """The poller of ``reactor``, put in place on first use; None for a reactor that
        is not Twisted's epoll reactor (the loop then always sleeps)."""
        from twisted.internet.epollreactor import EPollReactor

        if not isinstance(reactor, EPollReactor):
            return None
        poller = reactor._poller
        if not isinstance(poller, cls):
            poller = reactor._poller = cls(poller, reactor)
            reactor.doIteration = poller.iterate  # type: ignore[method-assign]
        return poller

    def iterate(self, timeout: float | None) -> None:
        """One turn of the reactor (its ``doIteration``): wait for events as ``poll`` does,
        then hand each one to the reactor (``_doReadOrWrite``, which reads or writes and
        disconnects what failed). What still escapes is logged here, and the turn goes on
        with the next event."""
        reactor = self.reactor
        selectables = reactor._selectables
        events = self.poll(-1 if timeout is None else timeout, len(selectables))
        dispatch = reactor._doReadOrWrite
        for fd, event in events:
            selectable = selectables.get(fd)
            if selectable is not None:
                try:
                    dispatch(selectable, fd, event)
                except Exception:
                    log.exception("reactor.event_failed", descriptor=fd)

    def poll_from(
        self, start: float, window: float, holdoff: float, busy: Callable[[], bool]
    ) -> None:
        """Poll rather than sleep up to ``window`` seconds past ``start``
        (``time.perf_counter``) at least, unless polling is held off then; a poll that is
        preempted holds it off for ``holdoff`` seconds if ``busy()`` says so. Told by a
        log writer as it hands a record over and as a sync ends."""
        self.holdoff = holdoff
        self.busy = busy
        until = start + window
        if until > self.until and start >= self.held_until:
            self.until = until

    def poll(self, timeout: float = -1, maxevents: int = -1) -> list[tuple[int, int]]:
        """epoll's ``poll``: within the polling time, polls without waiting first; never
        past the deadline, and nothing at all once it passed (``on_deadline``)."""
        if not self.deadline:
            return self._poll(timeout, maxevents)
        left = self.deadline - time.monotonic()
        if left > 0:
            events = self._poll(left if timeout < 0 or timeout > left else timeout, maxevents)
            if time.monotonic() < self.deadline:
                return events
        self.on_deadline()
        return []

    def expired(self) -> bool:
        """Whether the deadline passed (a socket writer asks before it writes)."""
        return bool(self.deadline) and time.monotonic() >= self.deadline

    def _poll(self, timeout: float, maxevents: int) -> list[tuple[int, int]]:
        poll = self.epoll.poll
        until = self.until
        if timeout == 0 or not until:
            return poll(timeout, maxevents)
        clock = time.perf_counter
        now = clock()
        if now >= until:
            self.until = 0.0  # the next turns need not look at the clock
            return poll(timeout, maxevents)
        deadline = now + timeout if timeout > 0 else None
        if deadline is not None and deadline < until:
            until = deadline
        switches = involuntary_switches()
        events = None
        while now < until:
            events = poll(0, maxevents)
            if events:
                break
            now = clock()
        if involuntary_switches() != switches:
            self.preempted += 1
            if self.busy():
                self.held_until = now + self.holdoff
                self.until = 0.0
        if events:
            return events
        return poll(-1 if deadline is None else max(0.0, deadline - now), maxevents)

    def register(self, fd: int, eventmask: int) -> None:
        self.epoll.register(fd, eventmask)

    def modify(self, fd: int, eventmask: int) -> None:
        self.epoll.modify(fd, eventmask)

    def unregister(self, fd: int) -> None:
        self.epoll.unregister(fd)

    def fileno(self) -> int:
        return int(self.epoll.fileno())

    def close(self) -> None:
        self.epoll.close()
