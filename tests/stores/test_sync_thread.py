"""The C sync thread (``server/_syncthread.c``): the log's write and sync off the interpreter.

Real files and a real thread: what it reports is what the kernel said.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from wiremq.server._syncthread import SyncThread


@pytest.fixture
def notify() -> Iterator[tuple[int, int]]:
    """The pipe the thread reports through: (read end, write end)."""
    read, write = os.pipe()
    yield read, write
    os.close(read)
    os.close(write)


def wait_for(thread: SyncThread, notified: int) -> int:
    """The outcome of the write in hand, once the thread says it is done."""
    assert select.select([notified], [], [], 10)[0], "the thread never reported"
    os.read(notified, 4096)
    result = thread.result()
    assert result is not None
    return result


def test_a_write_lands_at_its_offset_and_is_reported_once_synced(
    tmp_path: Path, notify: tuple[int, int]
) -> None:
    path = tmp_path / "segment"
    path.write_bytes(bytes(64))
    fd = os.open(path, os.O_RDWR)
    thread = SyncThread(notify[1])
    try:
        thread.write(fd, 10, (b"record",))
        assert wait_for(thread, notify[0]) == 0
        thread.write(fd, 16, [memoryview(b"--next")])
        assert wait_for(thread, notify[0]) == 0
    finally:
        thread.close()
        os.close(fd)
    assert path.read_bytes() == bytes(10) + b"record--next" + bytes(42)


def test_a_write_in_parts_lands_as_one_run_of_bytes(
    tmp_path: Path, notify: tuple[int, int]
) -> None:
    """More parts than one gather write takes (IOV_MAX, 1024), empty ones among them, and
    a part larger than the rest together."""
    parts = [b"%d," % i for i in range(3000)]
    parts[7] = b""
    parts[2000] = os.urandom(3 << 20)
    path = tmp_path / "segment"
    path.write_bytes(bytes(8))
    fd = os.open(path, os.O_RDWR)
    thread = SyncThread(notify[1])
    try:
        thread.write(fd, 4, parts)
        assert wait_for(thread, notify[0]) == 0
    finally:
        thread.close()
        os.close(fd)
    assert path.read_bytes() == bytes(4) + b"".join(parts)


def test_parts_that_are_not_bytes_are_refused_before_anything_is_handed_over(
    tmp_path: Path, notify: tuple[int, int]
) -> None:
    fd = os.open(tmp_path / "segment", os.O_RDWR | os.O_CREAT)
    thread = SyncThread(notify[1])
    try:
        with pytest.raises(TypeError):
            thread.write(fd, 0, (b"first", "second"))
        with pytest.raises(RuntimeError, match="no write is in hand"):
            thread.result()
    finally:
        thread.close()
        os.close(fd)


def test_a_failed_write_reports_the_kernels_errno(tmp_path: Path, notify: tuple[int, int]) -> None:
    path = tmp_path / "segment"
    path.write_bytes(bytes(64))
    read_only = os.open(path, os.O_RDONLY)
    thread = SyncThread(notify[1])
    try:
        thread.write(read_only, 0, (b"record",))
        assert wait_for(thread, notify[0]) == errno_of(read_only)
    finally:
        thread.close()
        os.close(read_only)
    assert path.read_bytes() == bytes(64)


def errno_of(read_only: int) -> int:
    """What writing to a read-only descriptor fails with, asked of the kernel directly."""
    with pytest.raises(OSError) as caught:
        os.pwrite(read_only, b"x", 0)
    assert caught.value.errno is not None
    return caught.value.errno


def test_one_write_at_a_time_and_none_after_close(tmp_path: Path, notify: tuple[int, int]) -> None:
    fd = os.open(tmp_path / "segment", os.O_RDWR | os.O_CREAT)
    thread = SyncThread(notify[1])
    try:
        with pytest.raises(RuntimeError, match="no write is in hand"):
            thread.result()
        thread.write(fd, 0, (b"first",))
        with pytest.raises(RuntimeError, match="in hand already"):
            thread.write(fd, 5, (b"second",))
        thread.close()  # finishes the write in hand before the thread ends
        with pytest.raises(RuntimeError, match="closed"):
            thread.write(fd, 5, (b"third",))
        thread.close()
    finally:
        os.close(fd)
    assert (tmp_path / "segment").read_bytes() == b"first"


def _tasks() -> set[str]:
    return set(os.listdir("/proc/self/task"))


def _runnable_seconds(task: str) -> float:
    """Seconds one of this process's threads was running or waiting for a CPU to run on,
    from the kernel's scheduler statistics: a thread that polls is runnable all along,
    however busy the machine (its CPU time alone is what the other work leaves it)."""
    on_cpu, waiting, _ = Path(f"/proc/self/task/{task}/schedstat").read_text().split()
    return (int(on_cpu) + int(waiting)) / 1e9


def _polling(first: Callable[[SyncThread], object], then_write: float | None, fd: int) -> float:
    """Seconds a sync thread is runnable over 0.4 s after ``first(thread)`` (which may hand
    a write over) and a write handed over ``then_write`` seconds later, if any."""
    notified, notify = os.pipe()
    before = _tasks()
    thread = SyncThread(notify)
    try:
        (task,) = _tasks() - before
        time.sleep(0.05)  # the thread is asleep in its wait
        started = _runnable_seconds(task)
        first(thread)
        if then_write is not None:
            time.sleep(then_write)
            if select.select([notified], [], [], 0)[0]:  # `first` wrote: take its outcome
                assert wait_for(thread, notified) == 0
            thread.write(fd, 8, (b"then",))
            assert wait_for(thread, notified) == 0
        time.sleep(0.4 - (then_write or 0.0))
        return _runnable_seconds(task) - started
    finally:
        thread.close()
        os.close(notified)
        os.close(notify)


def test_prepare_wakes_the_thread_to_poll_for_the_write_until_it_comes(
    tmp_path: Path,
) -> None:
    """``prepare`` makes the thread poll (it spends CPU) for up to its time, and the
    write, when it comes, ends the polling and is written as any other."""
    path = tmp_path / "segment"
    path.write_bytes(bytes(16))
    fd = os.open(path, os.O_RDWR)
    try:
        polled = _polling(lambda thread: thread.prepare(0.2), None, fd)
        ended = _polling(lambda thread: thread.prepare(5.0), 0.02, fd)
    finally:
        os.close(fd)
    assert polled > 0.1, f"the thread did not poll: {polled:.3f} s runnable in 0.4 s"
    assert ended < 0.15, f"the write did not end the polling: {ended:.3f} s runnable"
    assert path.read_bytes() == bytes(8) + b"then" + bytes(4)


def test_after_a_write_the_thread_polls_for_the_next_for_the_time_it_was_given(
    tmp_path: Path,
) -> None:
    path = tmp_path / "segment"
    path.write_bytes(bytes(16))
    fd = os.open(path, os.O_RDWR)
    try:
        polled = _polling(lambda thread: thread.write(fd, 0, (b"one",), 0.2), None, fd)
        not_asked = _polling(lambda thread: thread.write(fd, 0, (b"one",)), None, fd)
        ended = _polling(lambda thread: thread.write(fd, 0, (b"two",), 5.0), 0.05, fd)
    finally:
        os.close(fd)
    assert polled > 0.1, f"the thread did not poll: {polled:.3f} s runnable in 0.4 s"
    assert not_asked < 0.05, f"the thread polled unasked: {not_asked:.3f} s runnable"
    assert ended < 0.15, f"the next write did not end the polling: {ended:.3f} s runnable"
    assert path.read_bytes() == b"two" + bytes(5) + b"then" + bytes(4)


def test_prepare_is_harmless_while_a_write_is_in_hand_or_once_closed(
    tmp_path: Path, notify: tuple[int, int]
) -> None:
    fd = os.open(tmp_path / "segment", os.O_RDWR | os.O_CREAT)
    thread = SyncThread(notify[1])
    try:
        thread.write(fd, 0, (b"first",))
        thread.prepare(1.0)  # busy: the next write waits for this one anyway
        assert wait_for(thread, notify[0]) == 0
        thread.prepare(0.001)  # no write comes: the thread goes back to sleep
        time.sleep(0.01)
        thread.write(fd, 5, (b"second",))
        assert wait_for(thread, notify[0]) == 0
        thread.close()
        thread.prepare(1.0)
    finally:
        os.close(fd)
    assert (tmp_path / "segment").read_bytes() == b"firstsecond"


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def test_answers_go_to_their_sockets_once_the_write_is_synced_and_their_descriptors_close(
    tmp_path: Path, notify: tuple[int, int]
) -> None:
    """A persistent SEND's RECEIPT sent by the thread itself: after the sync, in order, on
    a duplicate of the socket that the thread closes."""
    fd = os.open(tmp_path / "segment", os.O_RDWR | os.O_CREAT)
    ours, theirs = socket.socketpair()
    duplicates = [os.dup(ours.fileno()), os.dup(ours.fileno())]
    thread = SyncThread(notify[1])
    try:
        assert thread.sent == ()
        thread.write(fd, 0, (b"record",), 0.0, [(duplicates[0], b"one|"), (duplicates[1], b"two")])
        assert wait_for(thread, notify[0]) == 0
        assert thread.sent == (4, 3)
        assert theirs.recv(64) == b"one|two"
        assert all(_closed(duplicate) for duplicate in duplicates)
        thread.write(fd, 6, (b"!",))  # a write without answers has none to report
        assert wait_for(thread, notify[0]) == 0
        assert thread.sent == ()
    finally:
        thread.close()
        os.close(fd)
        ours.close()
        theirs.close()
    assert (tmp_path / "segment").read_bytes() == b"record!"


def test_synced_tells_the_outcome_before_the_write_is_ended_and_result_ends_it(
    tmp_path: Path, notify: tuple[int, int]
) -> None:
    """``synced``: the outcome once the thread says so, while the write stays in hand
    (asked again, the same); ``result`` then ends it, after which neither may be asked."""
    path = tmp_path / "segment"
    path.write_bytes(bytes(8))
    fd = os.open(path, os.O_RDWR)
    read_only = os.open(path, os.O_RDONLY)
    ours, theirs = socket.socketpair()
    thread = SyncThread(notify[1])
    try:
        with pytest.raises(RuntimeError, match="no write is in hand"):
            thread.synced()
        thread.write(fd, 0, (b"one",), 0.0, [(os.dup(ours.fileno()), b"answer")])
        assert select.select([notify[0]], [], [], 10)[0], "the thread never reported"
        os.read(notify[0], 4096)
        assert thread.synced() == 0
        assert thread.synced() == 0
        assert thread.result() == 0  # waits for the answer to be sent
        assert thread.sent == (6,)
        assert theirs.recv(64) == b"answer"
        with pytest.raises(RuntimeError, match="no write is in hand"):
            thread.synced()
        thread.write(read_only, 0, (b"two",))
        assert select.select([notify[0]], [], [], 10)[0], "the thread never reported"
        failed = thread.synced()
        assert failed == errno.EBADF
        assert thread.result() == failed
    finally:
        thread.close()
        os.close(fd)
        os.close(read_only)
        ours.close()
        theirs.close()
    assert path.read_bytes() == b"one" + bytes(5)


def test_a_failed_write_sends_no_answer_and_still_closes_their_descriptors(
    tmp_path: Path, notify: tuple[int, int]
) -> None:
    path = tmp_path / "segment"
    path.write_bytes(bytes(8))
    read_only = os.open(path, os.O_RDONLY)
    ours, theirs = socket.socketpair()
    duplicate = os.dup(ours.fileno())
    thread = SyncThread(notify[1])
    try:
        thread.write(read_only, 0, (b"record",), 0.0, [(duplicate, b"RECEIPT")])
        assert wait_for(thread, notify[0]) == errno_of(read_only)
        assert thread.sent == (0,)
        assert _closed(duplicate)
        theirs.setblocking(False)
        with pytest.raises(BlockingIOError):
            theirs.recv(64)
    finally:
        thread.close()
        os.close(read_only)
        ours.close()
        theirs.close()


def test_a_socket_that_takes_part_of_an_answer_says_how_much(
    tmp_path: Path, notify: tuple[int, int]
) -> None:
    """The thread never waits for a client: what a full socket did not take is left to the
    event loop, which writes it through the transport."""
    fd = os.open(tmp_path / "segment", os.O_RDWR | os.O_CREAT)
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    room = 0
    with contextlib.suppress(BlockingIOError):
        while True:
            room += ours.send(bytes(65536))
    thread = SyncThread(notify[1])
    try:
        answer = bytes(1 << 20)
        thread.write(fd, 0, (b"r",), 0.0, [(os.dup(ours.fileno()), answer)])
        assert wait_for(thread, notify[0]) == 0
        (sent,) = thread.sent
        assert 0 <= sent < len(answer)
    finally:
        thread.close()
        os.close(fd)
        ours.close()
        theirs.close()


def test_answers_that_are_not_socket_and_bytes_pairs_are_refused_before_anything_is_handed(
    tmp_path: Path, notify: tuple[int, int]
) -> None:
    fd = os.open(tmp_path / "segment", os.O_RDWR | os.O_CREAT)
    thread = SyncThread(notify[1])
    try:
        for answers in ([("three", b"x")], [(3, "text")], [3], 7):
            with pytest.raises(TypeError):
                thread.write(fd, 0, (b"never",), 0.0, answers)
        thread.write(fd, 0, (b"record",))  # nothing was left in hand
        assert wait_for(thread, notify[0]) == 0
    finally:
        thread.close()
        os.close(fd)
    assert (tmp_path / "segment").read_bytes() == b"record"
