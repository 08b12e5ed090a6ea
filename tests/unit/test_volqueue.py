"""VolQueueStore: one count of non-persistent messages per queue, until the queue goes."""

from wiremq.stores.volqueue import VolQueueStore


def test_one_count_per_queue_until_it_is_dropped():
    store = VolQueueStore()
    q = store.counter("/queue/q")
    q.messages, q.bytes = 3, 60
    other = store.counter("/queue/other")
    other.messages, other.bytes = 1, 40
    assert store.counter("/queue/q") is q
    assert (q.messages, q.bytes, other.messages, other.bytes) == (3, 60, 1, 40)
    store.drop("/queue/q")
    again = store.counter("/queue/q")
    assert again is not q and (again.messages, again.bytes) == (0, 0)
    assert store.counter("/queue/other") is other
