"""The event loop's polling around the log's syncs (``server/syncpoll.py``): a real epoll
and pipe for the poller's rules, the real reactor and C sync thread for the log writer's
windows, a real server for the parameter."""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs
from twisted.internet import defer, error

from tests.conftest import call_in_reactor
from tests.defaults import SETTINGS
from tests.integration.clients import RawClient, until
from wiremq.config.groups import WalSettings
from wiremq.modules.client.egress import Outbox
from wiremq.server.runtime import TwistedRuntime
from wiremq.server.syncpoll import PRESSURE, CpuPressure, SyncPoller, busy, pressure_reading


def BUSY() -> bool:  # noqa: N802 - a constant rule: every preempted poll holds off
    return True


class RecordingEpoll:
    """A real epoll that notes the timeout of every poll it is asked for."""

    def __init__(self) -> None:
        self.epoll = select.epoll()
        self.timeouts: list[float] = []

    def poll(self, timeout: float = -1, maxevents: int = -1) -> list[tuple[int, int]]:
        self.timeouts.append(timeout)
        return self.epoll.poll(timeout, maxevents)


@pytest.fixture
def pipe_poller() -> Iterator[tuple[SyncPoller, RecordingEpoll, int, int]]:
    epoll = RecordingEpoll()
    readable, writable = os.pipe()
    epoll.epoll.register(readable, select.EPOLLIN)
    yield SyncPoller(epoll), epoll, readable, writable
    epoll.epoll.close()
    os.close(readable)
    os.close(writable)


def test_within_a_window_an_event_is_found_by_polling_without_sleeping(pipe_poller) -> None:
    poller, epoll, readable, writable = pipe_poller
    poller.poll_from(time.perf_counter(), 5.0, 0.0, BUSY)
    poller.poll_from(time.perf_counter(), 0.0, 0.0, BUSY)  # an earlier time does not shorten it
    threading.Timer(0.05, os.write, (writable, b"x")).start()
    events = poller.poll(-1, 10)
    assert events == [(readable, select.EPOLLIN)]
    assert len(epoll.timeouts) > 1 and set(epoll.timeouts) == {0}, "it slept"


def test_with_no_window_the_loop_sleeps_at_once(pipe_poller) -> None:
    poller, epoll, _, writable = pipe_poller
    threading.Timer(0.05, os.write, (writable, b"x")).start()
    assert poller.poll(2.0, 10)  # never told to poll
    os.read(poller.epoll.epoll.poll(0)[0][0], 1)
    poller.poll_from(time.perf_counter() - 1.0, 0.0, 0.0, BUSY)  # a time that has passed
    threading.Timer(0.05, os.write, (writable, b"x")).start()
    assert poller.poll(2.0, 10)
    assert len(epoll.timeouts) == 2 and all(1.9 < t <= 2.0 for t in epoll.timeouts)


def test_a_window_ends_in_a_sleep_for_the_rest_of_the_timeout(pipe_poller) -> None:
    poller, epoll, _, _ = pipe_poller
    poller.poll_from(time.perf_counter(), 0.05, 0.0, BUSY)
    started = time.perf_counter()
    assert poller.poll(0.3, 10) == []
    took = time.perf_counter() - started
    assert 0.29 <= took < 1.0
    assert 0.15 < epoll.timeouts[-1] < 0.26, epoll.timeouts[-1]  # what was left of it


def test_a_timeout_shorter_than_the_window_is_kept(pipe_poller) -> None:
    poller, epoll, _, _ = pipe_poller
    poller.poll_from(time.perf_counter(), 5.0, 0.0, BUSY)
    started = time.perf_counter()
    assert poller.poll(0.05, 10) == []
    assert time.perf_counter() - started < 1.0
    assert max(epoll.timeouts) <= 0.05


def test_an_ha_deadline_is_never_slept_past_and_once_past_no_event_is_handed_out(
    pipe_poller,
) -> None:
    poller, epoll, readable, writable = pipe_poller
    expired: list[float] = []
    poller.on_deadline = lambda: expired.append(time.monotonic())
    poller.deadline = time.monotonic() + 0.2
    assert not poller.expired()
    os.write(writable, b"x")
    assert poller.poll(-1, 10) == [(readable, select.EPOLLIN)]  # before it: as ever
    os.read(readable, 1)
    started = time.monotonic()
    assert poller.poll(30.0, 10) == []  # nothing comes: it wakes at the deadline
    assert expired and expired[0] - started < 5.0
    assert epoll.timeouts[-1] <= 0.2
    os.write(writable, b"x")  # past it, a ready socket is not handed to the reactor
    assert poller.poll(-1, 10) == [] and len(expired) == 2
    assert poller.expired()


def test_a_poll_asked_not_to_wait_is_passed_on_once(pipe_poller) -> None:
    poller, epoll, _, _ = pipe_poller
    poller.poll_from(time.perf_counter(), 5.0, 0.0, BUSY)
    assert poller.poll(0, 10) == []
    assert epoll.timeouts == [0]


def test_the_poller_stands_in_for_the_reactors_epoll_once(reactor: Any) -> None:
    """Twisted's epoll reactor keeps its epoll in ``_poller``: if that changes, the
    loop would always sleep, and this fails."""
    first = call_in_reactor(reactor, SyncPoller.install, reactor)
    assert isinstance(first, SyncPoller)
    assert reactor._poller is first  # noqa: SLF001
    assert call_in_reactor(reactor, SyncPoller.install, reactor) is first


class _PipeReader:
    """A reader of a real pipe for the reactor: notes what it read; ``fail`` makes its
    read end the connection and the reactor's report of that (``connectionLost``)
    raise, which Twisted's ``_doReadOrWrite`` does not catch."""

    def __init__(self, fd: int, fail: bool = False) -> None:
        self.fd = fd
        self.fail = fail
        self.read: list[bytes] = []

    def fileno(self) -> int:
        return self.fd

    def logPrefix(self) -> str:  # noqa: N802 - Twisted's name
        return "pipe"

    def doRead(self) -> Exception | None:  # noqa: N802
        self.read.append(os.read(self.fd, 100))
        return error.ConnectionDone() if self.fail else None

    def connectionLost(self, reason: object) -> None:  # noqa: N802
        raise RuntimeError("connectionLost failed")


def test_the_reactors_turns_hand_each_event_on_and_a_failing_one_stops_no_other(
    reactor: Any,
) -> None:
    """The poller takes the reactor's turns (``iterate``, without Twisted's logging
    context): events reach their readers, and a failure that escapes the reactor's
    handling of one is logged, the others handled as before."""
    poller = call_in_reactor(reactor, SyncPoller.install, reactor)
    assert reactor.doIteration == poller.iterate  # type: ignore[attr-defined]
    failing_pipe, good_pipe = os.pipe(), os.pipe()
    failing, good = _PipeReader(failing_pipe[0], fail=True), _PipeReader(good_pipe[0])
    try:
        with capture_logs() as logs:
            call_in_reactor(reactor, reactor.addReader, failing)
            call_in_reactor(reactor, reactor.addReader, good)
            os.write(failing_pipe[1], b"one")
            os.write(good_pipe[1], b"two")
            deadline = time.monotonic() + 10
            while not (good.read and failing.read) and time.monotonic() < deadline:
                time.sleep(0.01)
            call_in_reactor(reactor, reactor.removeReader, good)
        assert failing.read == [b"one"] and good.read == [b"two"]
        assert failing not in reactor.getReaders()  # the reactor removed it
        failed = [entry for entry in logs if entry["event"] == "reactor.event_failed"]
        assert [entry["descriptor"] for entry in failed] == [failing_pipe[0]]
    finally:
        for fd in (*failing_pipe, *good_pipe):
            os.close(fd)


def _segment(tmp_path: Path) -> int:
    path = tmp_path / "segment"
    path.write_bytes(bytes(64))
    return os.open(path, os.O_RDWR)


def test_the_log_writer_has_the_loop_poll_from_each_hand_over_and_sync_end(
    reactor: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The windows alone: a poll the scheduler cuts short (likely on a loaded machine, in a
    # window of 0.25 s) holds polling off, which the preemption tests below check.
    monkeypatch.setattr("wiremq.server.syncpoll.involuntary_switches", lambda: 0)
    fd = _segment(tmp_path)
    runtime = TwistedRuntime(reactor, Outbox(), sync_poll=0.25)
    seen: dict[str, Any] = {}

    def write_one() -> defer.Deferred[None]:
        writer = runtime.log_writer()
        poller = seen["poller"] = reactor._poller  # noqa: SLF001
        poller.held_until = 0.0  # the shared reactor's earlier polls hold nothing off here
        before = time.perf_counter()
        writer.write(fd, 0, (b"one",), lambda: seen.setdefault("ended", time.perf_counter()), print)
        seen["handed"] = (before, poller.until, time.perf_counter())
        return writer.drained()

    def write_switched_off() -> defer.Deferred[None]:
        runtime.sync_poll = 0.0
        writer = runtime.log_writer()
        seen["before"] = seen["poller"].until
        writer.write(fd, 0, (b"two",), lambda: None, print)
        return writer.drained()

    try:
        call_in_reactor(reactor, write_one)
        seen["after the end"] = seen["poller"].until
        call_in_reactor(reactor, write_switched_off)
        seen["switched off"] = seen["poller"].until
        call_in_reactor(reactor, runtime.stop_threads)
    finally:
        os.close(fd)
    before, until, handed = seen["handed"]
    assert before + 0.25 <= until <= handed + 0.25  # from the hand-over
    ended = seen["ended"]  # the callback runs after the end was noted
    assert until < seen["after the end"] <= ended + 0.25  # later: from the sync's end
    assert seen["switched off"] == seen["before"]


def test_a_sync_slower_than_the_polling_time_is_not_polled_for_the_next(
    reactor: Any, tmp_path: Path
) -> None:
    fd = _segment(tmp_path)
    runtime = TwistedRuntime(reactor, Outbox(), sync_poll=1e-6)  # no sync is that fast
    seen: list[tuple[float, float]] = []

    def write() -> defer.Deferred[None]:
        writer = runtime.log_writer()
        poller = reactor._poller  # noqa: SLF001
        poller.until = 0.0
        handed = time.perf_counter()
        writer.write(fd, 0, (b"x",), lambda: None, print)
        seen.append((handed, poller.until))
        return writer.drained()

    try:
        call_in_reactor(reactor, write)  # the first: no sync measured yet
        call_in_reactor(reactor, write)
        call_in_reactor(reactor, runtime.stop_threads)
    finally:
        os.close(fd)
    (first_handed, first), (_, second) = seen
    assert first >= first_handed
    assert second == 0.0


@pytest.mark.parametrize(
    ("parameter", "window"),
    [("WriteAheadLog.syncpoll", "sync_poll"), ("Server.replypoll", "reply_poll")],
)
def test_the_servers_window_is_the_parameter_and_changes_at_run_time(
    console, parameter: str, window: str
) -> None:
    server, api = console
    default = SETTINGS.get(*parameter.split("."))
    assert default > 0 and getattr(server.runtime, window) == default
    api.set_parameter(parameter, 0.0)
    assert getattr(server.runtime, window) == 0.0
    api.set_parameter(parameter, 0.002)
    assert getattr(server.runtime, window) == 0.002


def test_a_read_that_wrote_to_a_client_has_the_loop_poll_for_the_next_request(
    start_server, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = start_server(**{"Server.replypoll": "0.005"})
    poller = server.runtime.poller
    windows: list[float] = []
    poll_from = poller.poll_from

    def noting(start: float, window: float, holdoff: float, busy: Any) -> None:
        windows.append(window)
        poll_from(start, window, holdoff, busy)

    monkeypatch.setattr(poller, "poll_from", noting)
    client = RawClient(server.port)
    client.connect()  # CONNECTED was written (the window follows the write)
    assert until(lambda: windows == [0.005])
    client.send(b"SEND\ndestination:/queue/unread\n\nno reply\0")  # nothing written
    held = server.core.volatile.counter("/queue/unread")
    # a call from another thread runs after the event being handled: the read is done
    assert until(lambda: call_in_reactor(server.reactor, lambda: held.messages) == 1)
    assert windows == [0.005]
    client.send(b"SEND\ndestination:/queue/unread\nreceipt:r\n\nreplied\0")
    assert client.next_frame().command == "RECEIPT"
    assert until(lambda: windows == [0.005, 0.005])


@pytest.fixture
def contended_cpu() -> Iterator[None]:
    """The calling thread (and the threads it starts) shares one CPU with a process that
    never sleeps, so a thread that polls there is preempted within a time slice."""
    cpu = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(hog.pid, {cpu})
        os.sched_setaffinity(0, {cpu})
        yield
    finally:
        os.sched_setaffinity(0, before)
        hog.kill()
        hog.wait()


def test_a_preempted_poll_holds_the_loops_polling_off(pipe_poller, contended_cpu) -> None:
    poller, epoll, _, _ = pipe_poller
    poller.poll_from(time.perf_counter(), 2.0, 60.0, BUSY)
    started = time.perf_counter()
    assert poller.poll(2.0, 10) == []  # polled until the scheduler cut it short, then slept
    assert poller.preempted == 1
    assert started < poller.held_until - 59.0
    assert poller.until == 0.0
    epoll.timeouts.clear()
    poller.poll_from(time.perf_counter(), 2.0, 60.0, BUSY)  # held off: the loop sleeps
    assert poller.until == 0.0
    assert poller.poll(0.05, 10) == [] and len(epoll.timeouts) == 1


def test_a_preempted_poll_on_a_quiet_machine_goes_on_polling(pipe_poller, contended_cpu) -> None:
    """Cut short while the CPU pressure is low (``busy`` says no): no hold-off, and the
    window is kept."""
    poller, epoll, _, _ = pipe_poller
    asked: list[bool] = []

    def quiet() -> bool:
        asked.append(False)
        return False

    poller.poll_from(time.perf_counter(), 2.0, 60.0, quiet)
    assert poller.poll(2.0, 10) == []  # polled the whole window, cut short on the way
    assert poller.preempted >= 1 and asked
    assert poller.held_until == 0.0
    epoll.timeouts.clear()
    now = time.perf_counter()
    poller.poll_from(now, 0.05, 60.0, quiet)  # not held off: it polls again
    assert poller.until == now + 0.05
    assert poller.poll(1.0, 10) == [] and len(epoll.timeouts) > 1


def test_the_hold_off_ends(pipe_poller) -> None:
    poller, _, _, _ = pipe_poller
    poller.held_until = time.perf_counter() + 0.05
    now = time.perf_counter()
    poller.poll_from(now, 1.0, 0.05, BUSY)
    assert poller.until == 0.0
    later = poller.held_until
    poller.poll_from(later, 1.0, 0.05, BUSY)
    assert poller.until == later + 1.0


class FixedPressure(CpuPressure):
    """A CPU pressure that is what the test says; ``read`` notes each reading."""

    def __init__(self, level: float | None, read: list[float | None] | None = None) -> None:
        super().__init__()
        self.level = level
        self.read = read

    def __call__(self) -> float | None:
        assert self.read is not None, "the pressure is not read"
        self.read.append(self.level)
        return self.level


@pytest.mark.parametrize(
    ("pressure", "after_preemption"),
    [
        (None, (0.0, 0.0)),  # a busy machine (any pressure at a threshold of 0): none
        (5.0, (0.0, 0.01)),  # a quiet one: the polls for a write being made go on
    ],
)
def test_a_preempted_poll_of_the_sync_thread_holds_its_polling_off(
    reactor: Any,
    tmp_path: Path,
    contended_cpu,
    pressure: float | None,
    after_preemption: tuple[float, float],
) -> None:
    """The log writer's C thread, created on the contended CPU, polls for 10 ms after
    its write; once preempted, it polls after no write, and for a write being made
    (``prepare``) only if the CPU pressure is under ``syncpollpressure``."""
    fd = _segment(tmp_path)
    runtime = TwistedRuntime(
        reactor,
        Outbox(),
        sync_poll=0.01,
        sync_poll_holdoff=60.0,
        sync_poll_pressure=0.0 if pressure is None else 30.0,
    )
    read: list[float | None] = []
    # at a threshold of 0 the pressure is not read
    runtime.cpu_pressure = FixedPressure(pressure, None if pressure is None else read)
    polls: list[tuple[float, float]] = []

    def write() -> defer.Deferred[None]:
        writer = runtime.log_writer()
        now = time.perf_counter()
        polls.append(
            (writer._thread_poll(now, made=False), writer._thread_poll(now, made=True))  # noqa: SLF001
        )
        writer.write(fd, 0, (b"x",), lambda: None, print)
        return writer.drained()

    try:
        call_in_reactor(reactor, write)
        thread = runtime.log_writer()._thread  # noqa: SLF001
        deadline = time.monotonic() + 30
        while not thread.preempted and time.monotonic() < deadline:
            call_in_reactor(reactor, write)  # each write is followed by 10 ms of polling
        assert thread.preempted
        call_in_reactor(reactor, write)
        call_in_reactor(reactor, runtime.stop_threads)
    finally:
        os.close(fd)
    assert polls[0] == (0.01, 0.01)
    assert polls[-1] == after_preemption
    assert bool(read) == (pressure is not None)


class RecordingThread:
    """The log writer's real C sync thread, noting how long each write asks it to poll."""

    def __init__(self, thread: Any) -> None:
        self.thread = thread
        self.polls: list[float] = []

    def write(self, fd: int, offset: int, parts: Any, poll: float = 0.0, answers: Any = ()) -> None:
        self.polls.append(poll)
        self.thread.write(fd, offset, parts, poll, answers)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.thread, name)


class Reply:
    """A reply for the thread to send (``modules/runtime.Answer``) on a socket's duplicate."""

    def __init__(self, sock: socket.socket, data: bytes) -> None:
        self.fd = os.dup(sock.fileno())
        self.data = data
        self.settled: list[int | None] = []

    def settle(self, sent: int | None) -> None:
        self.settled.append(sent)


def test_the_sync_thread_does_not_poll_after_a_write_it_answers(
    reactor: Any, tmp_path: Path
) -> None:
    """A write the thread answers is a lone producer's: the producer needs the CPU to send
    its next record, so the thread sleeps instead of polling for it; a write without
    answers is polled after as before."""
    fd = _segment(tmp_path)
    ours, theirs = socket.socketpair()
    runtime = TwistedRuntime(reactor, Outbox(), sync_poll=0.25)
    reply = Reply(ours, b"RECEIPT\nreceipt-id:1\n\n\0")
    recording: list[RecordingThread] = []

    def write(answers: list[Reply]) -> defer.Deferred[None]:
        writer = runtime.log_writer()
        if not recording:
            recording.append(RecordingThread(writer._thread))  # noqa: SLF001
            writer._thread = recording[0]  # type: ignore[assignment]  # noqa: SLF001
        writer.write(fd, 0, (b"x",), lambda: None, print, (lambda: answers) if answers else None)
        return writer.drained()

    try:
        call_in_reactor(reactor, lambda: write([]))
        call_in_reactor(reactor, lambda: write([reply]))
        call_in_reactor(reactor, runtime.stop_threads)
        theirs.settimeout(10)
        assert theirs.recv(100) == reply.data  # the thread sent it
    finally:
        os.close(fd)
        ours.close()
        theirs.close()
    assert reply.settled == [len(reply.data)]
    assert recording[0].polls == [0.25, 0.0]


PSI = (
    "some avg10=42.50 avg60=11.18 avg300=13.60 total={total}\n"
    "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
)


def test_the_cpu_pressure_is_read_from_the_kernels_pressure_file(tmp_path: Path) -> None:
    psi = tmp_path / "cpu"
    psi.write_text(PSI.format(total=20676568125))
    assert pressure_reading(str(psi)) == (42.5, 20676568125)
    psi.write_text("nonsense\n")
    assert pressure_reading(str(psi)) is None
    assert pressure_reading(str(tmp_path / "absent")) is None
    here = CpuPressure()()  # this machine's, where the kernel reports it
    if os.path.exists(PRESSURE):
        assert here is not None and 0.0 <= here <= 100.0
    else:
        assert here is None


def test_the_cpu_pressure_is_the_share_stalled_since_a_kept_reading(tmp_path: Path) -> None:
    """Against the latest reading kept ``shortest`` to ``longest`` ago, the stalled share of
    the time between (the running total is in µs); with none, the ten-second average.
    Each answer's reading is kept; ``keep`` keeps one at most every ``period``."""
    psi = tmp_path / "cpu"
    now = [100.0]
    pressure = CpuPressure(str(psi), clock=lambda: now[0])
    assert (pressure.shortest, pressure.longest, pressure.period) == (0.25, 2.0, 0.5)
    psi.write_text(PSI.format(total=1_000_000))
    assert pressure() == 42.5  # nothing kept to compare with
    now[0] += 1.0
    psi.write_text(PSI.format(total=1_100_000))  # 0.1 s stalled in 1 s
    assert pressure() == pytest.approx(10.0)
    now[0] += 0.1
    psi.write_text(PSI.format(total=1_165_000))
    assert pressure() == pytest.approx(15.0), "the reading before, 1.1 s ago"
    now[0] += 0.3
    psi.write_text(PSI.format(total=1_225_000))
    assert pressure() == pytest.approx(20.0), "the one 0.3 s ago (0.06 s stalled)"
    now[0] += 3.0
    psi.write_text(PSI.format(total=9_000_000))
    assert pressure() == 42.5, "what is kept is too old: the ten-second average"
    pressure.keep(now[0] + 0.5)
    pressure.keep(now[0] + 0.9)  # within the period of the last: not kept
    now[0] += 1.0
    psi.write_text(PSI.format(total=9_250_000))
    assert pressure() == pytest.approx(50.0), "0.25 s stalled in the 0.5 s since keep"
    psi.write_text("nonsense\n")
    assert pressure() is None
    now[0] += 1.0
    psi.write_text(PSI.format(total=9_500_000))
    assert pressure() == 42.5, "after a failed reading, nothing kept"


def test_a_preemption_holds_polling_off_at_or_over_the_pressure_or_when_it_is_unknown() -> None:
    assert busy(30.0, lambda: 30.0)
    assert busy(30.0, lambda: 75.0)
    assert not busy(30.0, lambda: 12.0)
    assert busy(30.0, lambda: None)  # no pressure reported: as before, every cut holds off

    def unread() -> float:
        raise AssertionError("at 0 the pressure is not read")

    assert busy(0.0, unread)


def test_the_servers_pressure_is_the_parameter_and_changes_at_run_time(console) -> None:
    server, api = console
    default = WalSettings.read(SETTINGS, "WriteAheadLog").syncpollpressure
    assert 0 < default < 100 and server.runtime.sync_poll_pressure == default
    server.runtime.cpu_pressure = FixedPressure(default - 1.0, [])
    assert not server.runtime.cpu_busy()
    api.set_parameter("WriteAheadLog.syncpollpressure", default - 1.0)
    assert server.runtime.sync_poll_pressure == default - 1.0
    assert server.runtime.cpu_busy()


def test_the_servers_hold_off_is_the_parameter_and_changes_at_run_time(console) -> None:
    server, api = console
    default = WalSettings.read(SETTINGS, "WriteAheadLog").syncpollholdoff
    assert default > 0 and server.runtime.sync_poll_holdoff == default
    api.set_parameter("WriteAheadLog.syncpollholdoff", 2.0)
    assert server.runtime.sync_poll_holdoff == 2.0
