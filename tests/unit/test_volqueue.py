"""VolQueueStore: per-queue counts of non-persistent messages, and their totals."""

from wiremq.stores.volqueue import VolQueueStore


def test_counts_per_queue_and_in_total():
    store = VolQueueStore()
    q = store.counter("/queue/q")
    q.messages, q.bytes = 3, 60
    other = store.counter("/queue/other")
    other.messages, other.bytes = 1, 40
    assert store.counter("/queue/q") is q
    assert (store.count("/queue/q"), store.byte_count("/queue/q")) == (3, 60)
    assert (store.total_messages, store.total_bytes) == (4, 100)
    store.drop("/queue/q")
    assert (store.count("/queue/q"), store.byte_count("/queue/q")) == (0, 0)
    assert (store.total_messages, store.total_bytes) == (1, 40)
