"""What plain-Python modules need from the event loop, as small interfaces.

The server implements them on Twisted (``server/runtime.py``); tests can
implement them on a fake clock. Modules never import the event loop itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

T = TypeVar("T")


class Timer(Protocol):
    def cancel(self) -> None: ...


class Worker(Protocol):
    """Runs blocking calls (store reads and commits) one at a time, off the event loop.

    ``done`` or ``failed`` is then called on the event-loop thread, in the order
    the calls were submitted. One worker per store: ZODB writers of one store
    must not run concurrently.
    """

    def submit(
        self,
        call: Callable[[], T],
        done: Callable[[T], None],
        failed: Callable[[Exception], None],
    ) -> None: ...


class Answer(Protocol):
    """A reply that a write makes true (a persistent SEND's RECEIPT), held for the log
    writer to send itself the moment the write is synced: the client's socket (``fd``, a
    duplicate that the sender closes) and the reply's bytes. Nothing else is written to
    that client until the answer is settled."""

    fd: int
    data: bytes

    def settle(self, sent: int | None) -> None:
        """The write is over: the socket took ``sent`` bytes of ``data`` (the rest is
        written now, ahead of anything else), or None: the write failed and nothing was
        sent."""


Answers = Callable[[], list[Answer]]  # made at hand-over: the replies a write may send


class LogWriter(Protocol):
    """Writes bytes into an open file and syncs them (``pwritev`` + ``fdatasync``) off the
    event loop, on a thread that never takes the interpreter lock: the store's commits,
    one sync each, are its only work, and a hand-over through a Python thread costs more
    than the sync (see bench/README.md, "Speed").

    ``done`` or ``failed`` (with the ``OSError``) is then called on the event-loop
    thread, in the order the writes were handed over.
    """

    def write(
        self,
        fd: int,
        offset: int,
        parts: Sequence[bytes],
        done: Callable[[], None],
        failed: Callable[[OSError], None],
        answers: Answers | None = None,
    ) -> None:
        """Write ``parts`` one after the other at ``offset`` of ``fd`` and sync it.
        ``answers``, if the writer sends replies itself, is asked for them as the write is
        handed to its thread (a writer that does not never asks): they go out as soon as
        the sync ends, before ``done`` runs."""

    def prepare(self) -> None:
        """A write is about to come (its record is being made): the thread may get ready
        for it meanwhile."""

    @property
    def answered(self) -> int:
        """How many answers the writer has sent itself, for statistics."""


class Runtime(Protocol):
    """Timers and the wall clock."""

    def call_soon(self, function: Callable[[], None]) -> None:
        """Run on a later turn of the event loop (and write what it queued)."""

    def call_later(self, delay: float, function: Callable[[], None]) -> Timer:
        """Run after ``delay`` seconds."""

    def after_writes(self, function: Callable[[], None]) -> None:
        """Run once the frames queued so far are written, before the event loop goes on:
        for work that must be done before the next request is read but need not hold up
        the replies (a receipt waits for nothing it does)."""

    def now_ms(self) -> int:
        """Wall-clock milliseconds since the epoch (message expiry uses it)."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (durations)."""

    def worker(self, name: str) -> Worker:
        """The worker thread named ``name``, created on first use."""

    def log_writer(self) -> LogWriter:
        """The thread that writes and syncs the store's log, created on first use."""
