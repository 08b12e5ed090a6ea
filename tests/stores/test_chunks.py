"""The bounded cleanup loop, on a fake clock."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from wiremq.stores.chunks import Chunk, run_in_chunks
from wiremq.stores.records import StoredMessage


def source(total: int) -> tuple[list[int], Callable[[int], Chunk]]:
    """A step removing from ``total`` due messages; records each limit it was given."""
    limits: list[int] = []
    left = [total]

    def step(limit: int) -> Chunk:
        limits.append(limit)
        n = min(limit, left[0])
        left[0] -= n
        return [StoredMessage(str(i), "/queue/a", (), b"") for i in range(n)], n < limit

    return limits, step


def test_chunks_are_at_most_the_transaction_size_and_stop_when_nothing_is_due() -> None:
    limits, step = source(7)
    result = run_in_chunks(
        step, max_messages=100, max_seconds=10, transaction_size=3, clock=lambda: 0.0
    )
    assert limits == [3, 3, 3] and len(result.removed) == 7 and not result.more


def test_the_last_chunk_is_cut_to_max_messages() -> None:
    limits, step = source(50)
    result = run_in_chunks(
        step, max_messages=8, max_seconds=10, transaction_size=3, clock=lambda: 0.0
    )
    assert limits == [3, 3, 2] and result.more and result.commits == 3


def test_a_run_stops_at_its_deadline_but_always_makes_progress() -> None:
    limits, step = source(50)
    clock = itertools.count(0.0, 1.0).__next__
    result = run_in_chunks(step, max_messages=100, max_seconds=0, transaction_size=5, clock=clock)
    assert limits == [5] and result.more


def test_nonsense_sizes_are_refused() -> None:
    _, step = source(1)
    with pytest.raises(ValueError):
        run_in_chunks(step, max_messages=1, max_seconds=1, transaction_size=0, clock=lambda: 0.0)
