"""The in-memory index of live positions the write-ahead log facade commits with."""

from __future__ import annotations

import random

from wiremq.stores.walstate import CHUNK_BITS, LiveIndex


def test_add_remove_and_sizes() -> None:
    index = LiveIndex()
    index.add(1, 10)
    index.add(2, 0)  # a message may have no bytes at all
    assert (index.size(1), index.size(2), index.size(3)) == (10, 0, None)
    assert (index.count, index.bytes) == (2, 10)
    assert index.remove(2) == 0 and index.remove(2) is None
    assert index.remove(10**9) is None
    assert (index.count, index.bytes) == (1, 10)


def test_an_emptied_chunk_is_dropped() -> None:
    index = LiveIndex()
    for seq in range(1, 600):
        index.add(seq, 1)
    for seq in range(1, 1 << CHUNK_BITS):
        index.remove(seq)
    assert len(index._chunks) == 2  # the first chunk held 1..255 and is gone
    assert list(index)[0] == (256, 1)


def test_cut_takes_everything_at_or_below_a_position_and_nothing_else() -> None:
    rng = random.Random(7)
    index = LiveIndex()
    live = {}
    for seq in range(1000, 3000):
        if rng.random() < 0.5:
            size = rng.randrange(100)
            index.add(seq, size)
            live[seq] = size
    taken = index.cut(2222)
    assert taken == sorted((s, z) for s, z in live.items() if s <= 2222)
    assert list(index) == sorted((s, z) for s, z in live.items() if s > 2222)
    assert index.count == len(live) - len(taken)
    assert index.bytes == sum(z for s, z in live.items() if s > 2222)
    assert index.cut(2222) == [] and index.cut(100) == []
    index.add(5, 3)  # below the cut (an undo puts it back): found again
    assert index.cut(10) == [(5, 3)]


def test_iteration_is_in_order_across_chunks() -> None:
    index = LiveIndex()
    for seq in (900, 3, 70_000, 256, 255):
        index.add(seq, seq)
    assert [seq for seq, _ in index] == [3, 255, 256, 900, 70_000]


def test_a_block_added_at_once_is_what_adding_its_messages_one_by_one_gives() -> None:
    rng = random.Random(3)
    for first in (1, 200, 255, 256, 1000):
        sizes = [rng.randrange(1000) for _ in range(rng.randrange(1, 600))]
        gone = {i for i in range(len(sizes)) if rng.random() < 0.3}
        at_once, one_by_one = LiveIndex(), LiveIndex()
        at_once.add_block(first, sizes, gone)
        for i, size in enumerate(sizes):
            if i not in gone:
                one_by_one.add(first + i, size)
        assert list(at_once) == list(one_by_one)
        assert (at_once.count, at_once.bytes) == (one_by_one.count, one_by_one.bytes)
        assert at_once._live == one_by_one._live
        assert at_once.cut(first + len(sizes)) == list(one_by_one)
