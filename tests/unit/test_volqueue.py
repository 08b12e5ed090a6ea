"""VolQueueStore: per-queue FIFOs with message and byte counts."""

from dataclasses import dataclass

import pytest

from wiremq.stores.volqueue import VolQueueStore


@dataclass(frozen=True)
class Msg:
    name: str
    size: int


A, B, C, D = Msg("a", 10), Msg("b", 20), Msg("c", 30), Msg("d", 40)


@pytest.fixture
def store():
    store = VolQueueStore()
    for message in (A, B, C):
        store.fifo("/queue/q").append(message)
    store.fifo("/queue/other").append(D)
    return store


def test_counts_per_queue_and_in_total(store):
    assert (store.count("/queue/q"), store.byte_count("/queue/q")) == (3, 60)
    assert (store.count("/queue/other"), store.byte_count("/queue/other")) == (1, 40)
    assert (store.total_messages, store.total_bytes) == (4, 100)


def test_pop_is_fifo_and_updates_counts(store):
    fifo = store.fifo("/queue/q")
    assert [fifo.popleft() for _ in range(3)] == [A, B, C] and not fifo
    assert (store.count("/queue/q"), store.byte_count("/queue/q")) == (0, 0)
    assert (store.total_messages, store.total_bytes) == (1, 40)


def test_unknown_queue_is_empty(store):
    assert (store.count("/queue/none"), store.byte_count("/queue/none")) == (0, 0)
    assert store.drop("/queue/none") == []
    assert store.total_messages == 4


def test_push_front_keeps_order_ahead_of_waiting_messages(store):
    fifo = store.fifo("/queue/q")
    fifo.popleft()
    fifo.push_front(iter([D, A]))
    assert list(fifo) == [D, A, B, C]


def test_push_front_onto_a_new_queue_counts_it(store):
    store.fifo("/queue/new").push_front([A, B])
    assert (store.count("/queue/new"), store.byte_count("/queue/new")) == (2, 30)
    assert (store.total_messages, store.total_bytes) == (6, 130)


def test_remove_if_takes_out_what_matches_and_keeps_the_order(store):
    fifo = store.fifo("/queue/q")
    assert fifo.remove_if(lambda m: m.size == 20) == [B]
    assert list(fifo) == [A, C]
    assert store.byte_count("/queue/q") == 40


def test_drop_returns_the_messages_and_forgets_the_queue(store):
    assert store.drop("/queue/q") == [A, B, C]
    assert (store.count("/queue/q"), store.byte_count("/queue/q")) == (0, 0)
    assert (store.total_messages, store.total_bytes) == (1, 40)
    store.fifo("/queue/q").append(D)
    assert (store.count("/queue/q"), store.byte_count("/queue/q")) == (1, 40)
