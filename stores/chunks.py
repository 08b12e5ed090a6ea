"""Bounded removal in small transactions, so that cleanup never stalls traffic.

A cleanup run (expiry sweep, durable garbage collection) is a series of
commits of at most ``transaction_size`` entries each (cleanuptransactionsize),
stopping after ``max_messages`` removals or ``max_seconds``
(cleanuptransactiontime). The sleep between runs (cleanupgaptime) and their
period (cleanupinterval) belong to the caller's scheduler, which lets other
store work in between.
"""

from __future__ import annotations

from collections.abc import Callable

from .records import StoredMessage
from .results import SweepResult

# One committed chunk: the messages it removed, and whether nothing more is due.
Chunk = tuple[list[StoredMessage], bool]


def run_in_chunks(
    step: Callable[[int], Chunk],
    *,
    max_messages: int,
    max_seconds: float,
    transaction_size: int,
    clock: Callable[[], float],
) -> SweepResult:
    """Call ``step(limit)`` (one commit each) until nothing is due or a bound is hit.

    At least one chunk runs, so a run always makes progress.
    """
    if transaction_size < 1 or max_messages < 1:
        raise ValueError("transaction_size and max_messages must be at least 1")
    deadline = clock() + max_seconds
    removed: list[StoredMessage] = []
    commits = 0
    while True:
        chunk, exhausted = step(min(transaction_size, max_messages - len(removed)))
        removed.extend(chunk)
        commits += 1
        if exhausted:
            return SweepResult(removed, more=False, commits=commits)
        if len(removed) >= max_messages or clock() >= deadline:
            return SweepResult(removed, more=True, commits=commits)
