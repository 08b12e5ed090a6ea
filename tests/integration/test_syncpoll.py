"""The event loop's polling around the log's syncs (``server/syncpoll.py``): a real epoll
and pipe for the poller's rules, the real reactor and C sync thread for the log writer's
windows, a real server for the parameter."""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer

from tests.conftest import call_in_reactor
from tests.defaults import SETTINGS
from wiremq.config.groups import WalSettings
from wiremq.modules.egress import Outbox
from wiremq.server.runtime import TwistedRuntime
from wiremq.server.syncpoll import SyncPoller


class RecordingEpoll:
    """A real epoll that notes the timeout of every poll it is asked for."""

    def __init__(self) -> None:
        self.epoll = select.epoll()
        self.timeouts: list[float] = []

    def poll(self, timeout: float = -1, maxevents: int = -1) -> list[tuple[int, int]]:
        self.timeouts.append(timeout)
        return self.epoll.poll(timeout, maxevents)


class Window:
    """A log writer as the poller sees it: polling wanted until ``until``."""

    def __init__(self, until: float | None) -> None:
        self.until = until

    def poll_until(self) -> float | None:
        return self.until


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
    poller.writers.add(Window(time.perf_counter() + 5.0))
    threading.Timer(0.05, os.write, (writable, b"x")).start()
    events = poller.poll(-1, 10)
    assert events == [(readable, select.EPOLLIN)]
    assert len(epoll.timeouts) > 1 and set(epoll.timeouts) == {0}, "it slept"


def test_with_no_window_the_loop_sleeps_at_once(pipe_poller) -> None:
    poller, epoll, _, writable = pipe_poller
    poller.writers.add(Window(None))
    poller.writers.add(Window(time.perf_counter() - 1.0))  # a window that has passed
    threading.Timer(0.05, os.write, (writable, b"x")).start()
    assert poller.poll(2.0, 10)
    assert len(epoll.timeouts) == 1 and 1.9 < epoll.timeouts[0] <= 2.0


def test_a_window_ends_in_a_sleep_for_the_rest_of_the_timeout(pipe_poller) -> None:
    poller, epoll, _, _ = pipe_poller
    poller.writers.add(Window(time.perf_counter() + 0.05))
    started = time.perf_counter()
    assert poller.poll(0.3, 10) == []
    took = time.perf_counter() - started
    assert 0.29 <= took < 1.0
    assert 0.15 < epoll.timeouts[-1] < 0.26, epoll.timeouts[-1]  # what was left of it


def test_a_timeout_shorter_than_the_window_is_kept(pipe_poller) -> None:
    poller, epoll, _, _ = pipe_poller
    poller.writers.add(Window(time.perf_counter() + 5.0))
    started = time.perf_counter()
    assert poller.poll(0.05, 10) == []
    assert time.perf_counter() - started < 1.0
    assert max(epoll.timeouts) <= 0.05


def test_a_poll_asked_not_to_wait_is_passed_on_once(pipe_poller) -> None:
    poller, epoll, _, _ = pipe_poller
    poller.writers.add(Window(time.perf_counter() + 5.0))
    assert poller.poll(0, 10) == []
    assert epoll.timeouts == [0]


def test_the_poller_stands_in_for_the_reactors_epoll_once(reactor: Any) -> None:
    """Twisted's epoll reactor keeps its epoll in ``_poller``: if that changes, the
    loop would always sleep, and this fails."""
    first = call_in_reactor(reactor, SyncPoller.install, reactor)
    assert isinstance(first, SyncPoller)
    assert reactor._poller is first  # noqa: SLF001
    assert call_in_reactor(reactor, SyncPoller.install, reactor) is first


def _segment(tmp_path: Path) -> int:
    path = tmp_path / "segment"
    path.write_bytes(bytes(64))
    return os.open(path, os.O_RDWR)


def test_the_log_writers_window_follows_its_writes(reactor: Any, tmp_path: Path) -> None:
    fd = _segment(tmp_path)
    runtime = TwistedRuntime(reactor, Outbox(), sync_poll=0.25)
    seen: dict[str, Any] = {}

    def write_one() -> defer.Deferred[None]:
        writer = runtime.log_writer()
        seen["poller"] = reactor._poller  # noqa: SLF001
        seen["joined"] = writer in reactor._poller.writers  # noqa: SLF001
        before = time.perf_counter()
        writer.write(fd, 0, (b"one",), lambda: seen.setdefault("after", time.perf_counter()), print)
        seen["in hand"] = (before, writer.poll_until(), time.perf_counter())
        return writer.drained()

    def window() -> float | None:
        return runtime.log_writer().poll_until()

    try:
        call_in_reactor(reactor, write_one)
        seen["window after"] = call_in_reactor(reactor, window)
        runtime.sync_poll = 0.0
        seen["switched off"] = call_in_reactor(reactor, window)
        call_in_reactor(reactor, runtime.stop_threads)
    finally:
        os.close(fd)
    assert seen["joined"]
    before, until, handed = seen["in hand"]
    assert before + 0.25 <= until <= handed + 0.25  # from the hand-over
    assert seen["after"] + 0.2 < seen["window after"] < seen["after"] + 0.25 + 0.01
    assert seen["switched off"] is None
    assert not seen["poller"].writers, "a stopped writer is still polled for"


def test_a_sync_slower_than_the_window_stops_the_polling_for_the_next(
    reactor: Any, tmp_path: Path
) -> None:
    fd = _segment(tmp_path)
    runtime = TwistedRuntime(reactor, Outbox(), sync_poll=1e-6)  # no sync is that fast
    windows: list[float | None] = []

    def write(then: list[float | None]) -> defer.Deferred[None]:
        writer = runtime.log_writer()
        writer.write(fd, 0, (b"x",), lambda: None, print)
        then.append(writer.poll_until())
        return writer.drained()

    try:
        call_in_reactor(reactor, write, windows)  # the first: no sync measured yet
        call_in_reactor(reactor, write, windows)
        call_in_reactor(reactor, runtime.stop_threads)
    finally:
        os.close(fd)
    assert windows[0] is not None
    assert windows[1] is None


def test_the_servers_window_is_the_parameter_and_changes_at_run_time(console) -> None:
    server, api = console
    default = WalSettings.read(SETTINGS, "WriteAheadLog").syncpoll
    assert default > 0 and server.runtime.sync_poll == default
    api.set_parameter("WriteAheadLog.syncpoll", 0.0)
    assert server.runtime.sync_poll == 0.0
    api.set_parameter("WriteAheadLog.syncpoll", 0.002)
    assert server.runtime.sync_poll == 0.002
