"""Chart history: samples of the query API's state, rates from the counters it keeps."""

from wiremq.modules.events import EventStream
from wiremq.modules.history import History


def _state(received: int, delivered: int, depth: int, rss: int = 1000) -> dict:
    queue = {
        "name": "/queue/a",
        "messages": depth,
        "bytes": depth * 10,
        "received": received,
        "delivered": delivered,
        "acknowledged": delivered,
    }
    return {
        "queues": [queue],
        "topics": [],
        "clients": [],
        "totals": {"received": received, "delivered": delivered, "connections": 2},
        "memory": {"rss_bytes": rss},
        "transactions": {"bytes": 0},
    }


def test_rates_are_the_counters_change_per_second_and_gauges_are_as_read():
    history = History(span=60, interval=10, destinations=5)
    history.sample(100.0, _state(0, 0, 0))
    history.sample(110.0, _state(500, 200, 300))
    history.sample(120.0, _state(500, 500, 0))
    server = history.json()
    assert server["times"] == [100.0, 110.0, 120.0]
    assert server["series"]["received"]["values"] == [None, 50.0, 0.0]
    assert server["series"]["delivered"]["values"] == [None, 20.0, 30.0]
    assert server["series"]["messages"]["values"] == [0, 300, 0]
    assert server["series"]["received"]["unit"] == "msg/s"
    queue = history.json(destination="/queue/a")
    assert queue["series"]["received"]["values"] == [None, 50.0, 0.0]
    assert history.json(since=105.0)["times"] == [110.0, 120.0]


def test_a_counter_that_starts_again_charts_no_rate_and_old_samples_go():
    history = History(span=20, interval=10, destinations=5)
    for t, received in ((0, 10), (10, 20), (20, 5), (30, 15)):
        history.sample(float(t), _state(received, 0, 0))
    server = history.json()
    assert server["times"] == [10.0, 20.0, 30.0]  # 20 s of history at one sample per 10 s
    assert server["series"]["received"]["values"] == [1.0, None, 1.0]


def test_only_the_busiest_destinations_are_kept():
    history = History(span=60, interval=10, destinations=1)
    state = _state(0, 0, 5)
    state["queues"].append({**state["queues"][0], "name": "/queue/b", "messages": 9})
    history.sample(0.0, state)
    assert list(history.destinations) == ["/queue/b"]
    assert history.json(destination="/queue/a") == {"times": [], "series": {}}


def test_events_are_numbered_and_read_after_a_number():
    stream = EventStream(keep=3)
    for i in range(5):
        stream(None, "info", {"event": f"e{i}"})
    assert stream.total == 5
    assert [(n, e["event"]) for n, e in stream.since(0, 10)] == [(3, "e2"), (4, "e3"), (5, "e4")]
    assert [n for n, _ in stream.since(3, 10)] == [4, 5]
    assert [n for n, _ in stream.since(2, 1)] == [3]
    assert stream.since(5, 10) == []


def test_the_first_samples_come_sooner_so_charts_show_rates_within_seconds():
    history = History(span=3600, interval=10, destinations=5)
    waits = []
    now = 0.0
    for _ in range(6):
        wait = history.next_interval(10.0)
        waits.append(wait)
        now += wait
        history.sample(now, _state(int(now * 100), 0, 0))
    assert waits == [0.0, 1.25, 2.5, 5.0, 10.0, 10.0]
    assert history.json()["series"]["received"]["values"][1] == 100.0, "a rate at 1.25 s"


def test_every_connection_has_its_latest_rates():
    history = History(span=60, interval=10, destinations=0)  # none charted: rates still kept
    client = {"session": "s1", "published": 10, "messages_sent": 0, "subscriptions": []}
    history.sample(100.0, {**_state(0, 0, 0), "clients": [client]})
    acked = [{"acknowledged": 30}]
    later = {**client, "published": 60, "messages_sent": 40, "subscriptions": acked}
    history.sample(110.0, {**_state(500, 200, 300), "clients": [later]})
    assert history.rates.of_connection("s1") == {
        "publish_rate": 5.0,
        "deliver_rate": 4.0,
        "ack_rate": 3.0,
    }
    ended = {**later, "subscriptions": []}  # its subscription's count went with it
    history.sample(120.0, {**_state(500, 200, 300), "clients": [ended]})
    assert history.rates.of_connection("s1")["ack_rate"] is None
    history.sample(130.0, {**_state(500, 200, 300), "clients": []})
    assert history.rates.of_connection("s1")["publish_rate"] is None  # gone
