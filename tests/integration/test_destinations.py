"""Queues and topics: exactly-once competing consumers, fan-out, unsubscribe."""

from __future__ import annotations

from collections import Counter

from tests.integration.clients import connect


def test_queue_spreads_messages_fairly_over_competing_consumers(server):
    consumers = [connect(server.port) for _ in range(3)]
    for i, (connection, _) in enumerate(consumers):
        connection.subscribe("/queue/work", id=f"c{i}", ack="auto", headers={"receipt": f"s{i}"})
    for i, (_, recorder) in enumerate(consumers):
        assert recorder.wait_until(lambda r=recorder, i=i: f"s{i}" in r.receipts)
    producer, _ = connect(server.port)
    for i in range(300):
        producer.send("/queue/work", str(i))
    recorders = [r for _, r in consumers]
    assert recorders[0].wait_until(lambda: sum(len(r.messages) for r in recorders) == 300)
    bodies = [b for r in recorders for b in r.bodies()]
    assert Counter(bodies) == Counter(str(i) for i in range(300)), "every message exactly once"
    assert [len(r.messages) for r in recorders] == [100, 100, 100]
    for recorder in recorders:  # each consumer sees its share in send order
        numbers = [int(b) for b in recorder.bodies()]
        assert numbers == sorted(numbers)


def test_queue_keeps_messages_until_a_consumer_arrives(server):
    producer, _ = connect(server.port)
    for i in range(20):
        producer.send("/queue/later", str(i), receipt=f"r{i}" if i == 19 else None)
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/later", id="1")
    assert recorder.wait_for_messages(20)
    assert recorder.bodies() == [str(i) for i in range(20)]


def test_topic_delivers_every_message_to_every_current_subscriber(server):
    subscribers = [connect(server.port) for _ in range(3)]
    for connection, recorder in subscribers:
        connection.subscribe("/topic/news", id="t", headers={"receipt": "s"})
        assert recorder.wait_until(lambda r=recorder: "s" in r.receipts)
    publisher, _ = connect(server.port)
    publisher.send("/topic/early-bird", "nobody hears this")
    for i in range(50):
        publisher.send("/topic/news", str(i))
    for _, recorder in subscribers:
        assert recorder.wait_for_messages(50)
        assert recorder.bodies() == [str(i) for i in range(50)]
        assert all(m.headers["destination"] == "/topic/news" for m in recorder.messages)


def test_topic_does_not_keep_messages_for_later_subscribers(server):
    publisher, publisher_recorder = connect(server.port)
    publisher.send("/topic/gone", "before", receipt="sent")
    assert publisher_recorder.wait_until(lambda: "sent" in publisher_recorder.receipts)
    subscriber, recorder = connect(server.port)
    subscriber.subscribe("/topic/gone", id="1", headers={"receipt": "s"})
    assert recorder.wait_until(lambda: "s" in recorder.receipts)
    publisher.send("/topic/gone", "after")
    assert recorder.wait_for_messages(1)[0].body == "after"
    assert len(recorder.messages) == 1


def test_unsubscribe_stops_delivery(server):
    consumer, recorder = connect(server.port)
    consumer.subscribe("/topic/u", id="1", headers={"receipt": "s"})
    assert recorder.wait_until(lambda: "s" in recorder.receipts)
    consumer.unsubscribe("1", headers={"receipt": "u"})
    assert recorder.wait_until(lambda: "u" in recorder.receipts)
    producer, producer_recorder = connect(server.port)
    producer.send("/topic/u", "x", receipt="sent")
    assert producer_recorder.wait_until(lambda: "sent" in producer_recorder.receipts)
    consumer.subscribe("/topic/u", id="2", headers={"receipt": "s2"})
    assert recorder.wait_until(lambda: "s2" in recorder.receipts)
    producer.send("/topic/u", "y")
    assert [m.body for m in recorder.wait_for_messages(1)] == ["y"]
