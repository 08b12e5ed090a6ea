"""One table of statistics: what /metrics exports is what the console charts from."""

from wiremq.admin.metrics import exposition
from wiremq.modules.history import History
from wiremq.modules.statistics import DESTINATION, SERVER, WATERMARK


def _state() -> dict:
    watermark = {"name": "VolQueueStore", "tripped": False, "messages": 1, "bytes": 2}
    queue = {
        "name": "/queue/a",
        "kind": "queue",
        "messages": 3,
        "bytes": 30,
        "stored_messages": 0,
        "stored_bytes": 0,
        "received": 7,
        "delivered": 4,
        "acknowledged": 2,
        "consumers": 1,
        "producers": 1,
        "shutdown": False,
        "watermarks": [watermark],
    }
    return {
        "queues": [queue],
        "topics": [],
        "clients": [],
        "watermarks": [watermark],
        "totals": {
            "received": 7,
            "delivered": 4,
            "acknowledged": 2,
            "connections": 2,
            "queues": 1,
            "topics": 0,
        },
        "memory": {"rss_bytes": 1000},
        "transactions": {"bytes": 0, "open": 0, "messages": 0},
        "server": {"uptime": 1.5},
    }


def test_every_charted_series_is_an_exported_metric_of_the_same_reading():
    state = _state()
    exported = exposition(state)
    history = History(span=60, interval=10, destinations=5)
    history.sample(100.0, state)
    charted = history.json()["series"]
    for statistic in SERVER:
        if statistic.read(state) is not None:
            assert f"# TYPE {statistic.metric} {statistic.kind}" in exported
        if statistic.chart is not None and not statistic.rate:
            assert charted[statistic.chart]["values"] == [statistic.read(state)]
    assert set(charted) == {s.chart for s in SERVER if s.chart is not None}
    destination = history.json(destination="/queue/a")["series"]
    assert set(destination) == {s.chart for s in DESTINATION if s.chart is not None}
    assert "wiremq_messages 3\n" in exported, "the server's depth is exported and charted"
    assert "wiremq_messages_acknowledged_total 2\n" in exported, "what became of them too"


def test_names_are_unique_and_counters_say_total():
    metrics = [s.metric for s in (*SERVER, *DESTINATION, *WATERMARK)]
    assert len(metrics) == len(set(metrics))
    for statistic in (*SERVER, *DESTINATION, *WATERMARK):
        assert statistic.metric.endswith("_total") == (statistic.kind == "counter")
        assert (statistic.chart is None) == (not statistic.label)
