"""The Twisted runtime's own rules: soon-calls that ask for more, and the log writer
(real reactor, real files, the real C sync thread)."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from typing import Any

from twisted.internet import defer

from tests.conftest import call_in_reactor
from wiremq.modules.client.egress import Outbox
from wiremq.server.runtime import TwistedRuntime


def test_a_soon_call_asked_for_while_soon_calls_run_joins_their_run(reactor: Any) -> None:
    """The group commit closes its batch with call_soon once a read is handled: that
    must not cost a turn of the reactor."""
    runtime = TwistedRuntime(reactor, Outbox())
    ran: list[str] = []

    def first() -> None:
        ran.append("first")
        runtime.call_soon(lambda: ran.append("second"))

    def handled_read() -> list[str]:
        runtime.reading = True
        runtime.call_soon(first)
        runtime.after_read()
        return list(ran)

    assert call_in_reactor(reactor, handled_read) == ["first", "second"]
    assert not runtime._scheduled  # no reactor turn was asked for


def test_the_log_writer_writes_in_order_and_reports_each_write_on_the_reactor(
    reactor: Any, tmp_path: Path
) -> None:
    path = tmp_path / "segment"
    path.write_bytes(bytes(32))
    fd = os.open(path, os.O_RDWR)
    read_only = os.open(path, os.O_RDONLY)
    runtime = TwistedRuntime(reactor, Outbox())
    reported: list[object] = []
    threads: set[int] = set()

    def report(what: object) -> None:
        reported.append(what)
        threads.add(threading.get_ident())

    def write_three() -> defer.Deferred[None]:
        writer = runtime.log_writer()
        writer.write(fd, 0, (b"one",), lambda: report("one"), report)
        writer.write(read_only, 3, (b"two",), lambda: report("two"), report)
        writer.write(fd, 3, (b"th", b"ree"), lambda: report("three"), report)
        return writer.drained()

    try:
        call_in_reactor(reactor, write_three)
        call_in_reactor(reactor, runtime.stop_threads)
    finally:
        os.close(fd)
        os.close(read_only)
    assert threads == {call_in_reactor(reactor, threading.get_ident)}
    assert reported[0] == "one" and reported[2] == "three"
    failure = reported[1]
    assert isinstance(failure, OSError) and failure.errno is not None
    assert path.read_bytes() == b"onethree" + bytes(24)


def test_stopping_the_workers_waits_for_the_log_writes_handed_over(
    reactor: Any, tmp_path: Path
) -> None:
    fd = os.open(tmp_path / "segment", os.O_RDWR | os.O_CREAT)
    runtime = TwistedRuntime(reactor, Outbox())
    reported: list[str] = []

    def write_and_stop() -> defer.Deferred[None]:
        runtime.log_writer().write(fd, 0, (b"last",), lambda: reported.append("done"), print)
        stopped: defer.Deferred[None] = runtime.stop_workers()
        return stopped

    try:
        call_in_reactor(reactor, write_and_stop)
    finally:
        os.close(fd)
    assert reported == ["done"]
    assert (tmp_path / "segment").read_bytes() == b"last"


class Reply:
    """A reply for the sync thread to send (``modules/runtime.Answer``), noting when it is
    settled among the write's other events."""

    def __init__(self, sock: socket.socket, data: bytes, events: list[str]) -> None:
        self.fd = os.dup(sock.fileno())
        self.data = data
        self.events = events

    def settle(self, sent: int | None) -> None:
        self.events.append(f"settled {sent}")


def test_a_writes_callbacks_run_while_its_answers_go_out_and_they_are_settled_after(
    reactor: Any, tmp_path: Path
) -> None:
    """The loop, notified before the thread sends a write's answers, runs the write's
    callbacks without waiting for the sends; the answers are settled (what each socket
    took) and the next write handed over after the callbacks."""
    path = tmp_path / "segment"
    path.write_bytes(bytes(16))
    fd = os.open(path, os.O_RDWR)
    ours, theirs = socket.socketpair()
    runtime = TwistedRuntime(reactor, Outbox())
    events: list[str] = []
    reply = Reply(ours, b"RECEIPT", events)

    def write_two() -> defer.Deferred[None]:
        writer = runtime.log_writer()

        def first_done() -> None:
            events.append("first done")
            # asked from the callback: waits for the first write to end
            writer.write(fd, 5, (b"two",), lambda: events.append("second done"), print)

        writer.write(fd, 0, (b"first",), first_done, print, lambda: [reply])
        return writer.drained()

    try:
        call_in_reactor(reactor, write_two)
        call_in_reactor(reactor, runtime.stop_threads)
        theirs.settimeout(10)
        assert theirs.recv(64) == b"RECEIPT"
    finally:
        os.close(fd)
        ours.close()
        theirs.close()
    assert events == ["first done", "settled 7", "second done"]
    assert path.read_bytes() == b"firsttwo" + bytes(8)
