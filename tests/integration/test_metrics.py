"""``/metrics`` read by the official Prometheus client's parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.integration.clients import RawClient, connect, fill


def _families(api) -> dict:
    answer = api.request("GET", "/metrics")
    assert answer.status == 200
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {f.name: f for f in text_string_to_metric_families(answer.body.decode())}


def _value(family, **labels) -> float:
    for sample in family.samples:
        if all(sample.labels.get(k) == v for k, v in labels.items()):
            return sample.value
    raise AssertionError(f"no sample of {family.name} with {labels}")


def test_metrics_parse_and_follow_the_naming_conventions(console):
    server, api = console
    fill(server.port, "/queue/m", ["a", "b", "c"])
    fill(server.port, "/queue/m", ["p"], persistent="true")
    consumer, recorder = connect(server.port)
    consumer.subscribe("/topic/t", id="1")
    families = _families(api)
    received = families["wiremq_messages_received"]  # the parser drops the _total suffix
    assert received.type == "counter" and _value(received) == 4
    assert families["wiremq_connections"].type == "gauge"
    assert _value(families["wiremq_connections"]) == 1
    assert _value(families["wiremq_resident_memory_bytes"]) > 1_000_000
    depth = families["wiremq_destination_messages"]
    assert _value(depth, destination="/queue/m", kind="queue") == 4
    assert _value(families["wiremq_destination_stored_bytes"], destination="/queue/m") > 0
    assert _value(families["wiremq_destination_consumers"], destination="/topic/t") == 1
    tripped = families["wiremq_watermark_tripped"]
    assert _value(tripped, watermark="VolQueueStore") == 0
    for name, family in families.items():
        assert name.startswith("wiremq_"), name
        if family.type == "counter":
            assert all(s.name.endswith("_total") for s in family.samples), name
        assert family.documentation, name


def test_refusals_and_trips_are_counted(start_server, console_of):
    server = start_server(
        **{
            "VolQueueStoreImpl.globalmsghighwatermark": "2",
            "VolQueueStoreImpl.globalmsglowwatermark": "1",
            "MessageSpool.maxspoolusage": "10",
        }
    )
    api = console_of(server)
    fill(server.port, "/queue/w", ["a", "b"])
    producer, recorder = connect(server.port)
    producer.send("/queue/big", "x" * 100, headers={"persistent": "true"})
    assert recorder.wait_until(lambda: recorder.errors)
    families = _families(api)
    assert _value(families["wiremq_watermark_trips"], watermark="VolQueueStore") == 1
    assert _value(families["wiremq_watermark_tripped"], watermark="VolQueueStore") == 1
    refused = families["wiremq_spool_refused_messages"]
    assert _value(refused, reason="message spool full") == 1


def _fill_queues(port: int, counts: dict[str, int]) -> None:
    """``counts[name]`` messages to each queue, over one raw connection, in one write."""
    client = RawClient(port)
    client.connect()
    frames = [
        f"SEND\ndestination:{name}\n\nx\0".encode() for name, n in counts.items() for _ in range(n)
    ]
    client.send(b"".join(frames) + b"SEND\ndestination:/queue/last\nreceipt:r\n\nx\0")
    assert client.next_frame().command == "RECEIPT"
    client.close()


def test_only_the_busiest_destinations_have_series_of_their_own(start_server, console_of):
    server = start_server(**{"Admin.metricsdestinations": "3"})
    api = console_of(server)
    _fill_queues(server.port, {f"/queue/q{i}": i % 7 for i in range(1, 30)})  # 6 have 6
    families = _families(api)
    depth = families["wiremq_destination_messages"]
    shown = {s.labels["destination"]: s.value for s in depth.samples}
    assert len(shown) == 3 and set(shown.values()) == {6}
    assert all(
        len(f.samples) <= 3 for n, f in families.items() if n.startswith("wiremq_destination_")
    )
    queues = _value(families["wiremq_queues"])
    assert _value(families["wiremq_destinations_not_exported"]) == queues - 3
    assert _value(families["wiremq_messages_received"]) == sum(i % 7 for i in range(1, 30)) + 1


def test_a_scrape_with_many_destinations_stays_bounded(console):
    """2,000 queues: the scrape has the series of the 100 busiest (the default), not 2,000."""
    server, api = console
    _fill_queues(server.port, {f"/queue/many.{i}": 1 for i in range(2000)})
    answer = api.request("GET", "/metrics")
    lines = answer.body.decode().splitlines()
    per_destination = [line for line in lines if line.startswith("wiremq_destination_")]
    assert len(per_destination) <= 100 * 9
    assert len(lines) < 1500
    families = _families(api)
    assert _value(families["wiremq_destinations_not_exported"]) >= 1900
