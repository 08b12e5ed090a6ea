"""The distributing module's features as a STOMP client sees them, with real stomp.py
clients over TCP: selectors (and their errors), priority, wildcards, redelivery counts and
the dead message queue, message groups, exclusive consumers and browsing.

Tests that check that something does *not* arrive wait ``LATE`` seconds, long enough to
see a late arrival.
"""

from __future__ import annotations

import time

from tests.integration.clients import RawClient, connect, fill

LATE = 1.5  # how long "nothing more arrives" is watched
PERSISTENT = {"persistent": "true"}


def _subscribed(connection, recorder, destination, sub_id="1", ack="auto", **headers):
    connection.subscribe(
        destination, id=sub_id, ack=ack, headers={"receipt": f"s-{sub_id}", **headers}
    )
    assert recorder.wait_until(lambda: f"s-{sub_id}" in recorder.receipts)


def _quiet(recorder, count: int) -> None:
    """Nothing beyond ``count`` messages arrives within LATE seconds."""
    time.sleep(LATE)
    assert len(recorder.messages) == count, [m.body for m in recorder.messages[count:]]


def test_selective_consumers_get_what_they_select_and_nobody_starves(server):
    producer, recorder = connect(server.port)
    for i in range(2000):
        producer.send("/queue/sel", f"noise{i}", headers={"region": "US", "price": "500"})
    producer.send("/queue/sel", "cheap", headers={"region": "EU", "price": "99"}, receipt="a")
    producer.send("/queue/sel", "wanted", headers={"region": "EU", "price": "150"}, receipt="b")
    assert recorder.wait_until(lambda: {"a", "b"} <= set(recorder.receipts))
    eu, eu_recorder = connect(server.port)
    _subscribed(eu, eu_recorder, "/queue/sel", selector="region = 'EU' AND price > 100")
    assert [m.body for m in eu_recorder.wait_for_messages(1)] == ["wanted"]
    assert eu_recorder.messages[0].headers["destination"] == "/queue/sel"
    _quiet(eu_recorder, 1)
    rest, rest_recorder = connect(server.port)
    _subscribed(rest, rest_recorder, "/queue/sel")
    bodies = [m.body for m in rest_recorder.wait_for_messages(2001)]
    assert bodies[:3] == ["noise0", "noise1", "noise2"] and bodies[-1] == "cheap"


def test_a_persistent_backlog_in_the_store_does_not_starve_a_selective_consumer(start_server):
    server = start_server(**{"DestinationManager.persqueuebytehighwatermark": "5000"})
    bodies = [f"n{i:05d}" for i in range(3000)]
    fill(server.port, "/queue/pdeep", bodies, kind="noise", **PERSISTENT)
    fill(server.port, "/queue/pdeep", ["wanted"], kind="signal", **PERSISTENT)
    queue = server.core.destinations.queues["/queue/pdeep"]
    assert queue.backlog_start() is not None  # most of it is in the store only
    consumer, recorder = connect(server.port)
    _subscribed(
        consumer, recorder, "/queue/pdeep", ack="client-individual", selector="kind='signal'"
    )
    [message] = recorder.wait_for_messages(1)
    assert message.body == "wanted"
    consumer.ack(message.headers["ack"], receipt="acked")
    assert recorder.wait_until(lambda: "acked" in recorder.receipts)
    assert server.store.count("/queue/pdeep")[0] == 3000


def test_a_selector_with_a_syntax_error_is_refused_with_its_position(server):
    client = RawClient(server.port)
    client.connect()
    client.send(
        b"SUBSCRIBE\nid:1\ndestination:/queue/bad\nselector:price > 100 AND\nreceipt:s\n\n\0"
    )
    error = client.next_frame()
    assert error.command == "ERROR"
    assert error.headers["message"] == "invalid selector"
    assert error.headers["receipt-id"] == "s"
    body = error.body.decode()
    assert "at position 16" in body
    assert body.endswith("price > 100 AND\n               ^")
    assert client.wait_closed()


def test_priority_orders_waiting_messages_of_both_delivery_modes(server):
    producer, recorder = connect(server.port)
    sent = [("low", "1", True), ("mid", "4", False), ("top", "9", True), ("top2", "9", False)]
    for i, (body, priority, persistent) in enumerate(sent):
        headers = {"priority": priority, **(PERSISTENT if persistent else {})}
        producer.send("/queue/prio", body, headers=headers, receipt=str(i))
        # each reaches the queue before the next is sent (a persistent one waits for its
        # commit, so a non-persistent one sent after it could otherwise arrive first)
        assert recorder.wait_until(lambda i=i: str(i) in recorder.receipts)
    consumer, consumer_recorder = connect(server.port)
    _subscribed(
        consumer,
        consumer_recorder,
        "/queue/prio",
        ack="client-individual",
        **{"activemq.prefetchSize": "1"},
    )
    received = []
    for count in range(1, 5):
        message = consumer_recorder.wait_for_messages(count)[-1]
        received.append(message.body)
        consumer.ack(message.headers["ack"])
    assert received == ["top", "top2", "mid", "low"]


def test_wildcard_subscriptions_on_topics_and_queues(server):
    listener, topics = connect(server.port)
    _subscribed(listener, topics, "/topic/prices.*", "t1")
    _subscribed(listener, topics, "/topic/prices.>", "t2")
    worker, queues = connect(server.port)
    _subscribed(worker, queues, "/queue/jobs.*", "q", ack="client-individual")
    producer, recorder = connect(server.port)
    for name in ("/topic/prices.eu", "/topic/prices.eu.de", "/topic/other.eu"):
        producer.send(name, name)
    for name in ("/queue/jobs.a", "/queue/jobs.b", "/queue/jobs.a.b"):
        producer.send(name, name, receipt=name)
    assert recorder.wait_until(lambda: len(recorder.receipts) == 3)
    messages = topics.wait_for_messages(3)
    by_subscription = sorted(
        (m.headers["subscription"], m.headers["destination"]) for m in messages
    )
    assert by_subscription == [
        ("t1", "/topic/prices.eu"),
        ("t2", "/topic/prices.eu"),
        ("t2", "/topic/prices.eu.de"),
    ]
    jobs = queues.wait_for_messages(2)
    assert sorted(m.headers["destination"] for m in jobs) == ["/queue/jobs.a", "/queue/jobs.b"]
    for message in jobs:
        worker.ack(message.headers["ack"])
    _quiet(topics, 3)
    assert len(queues.messages) == 2


def test_redelivery_counts_and_the_dead_message_queue(start_server):
    server = start_server(
        '<wiremq><Destination name="/queue/poison" maxredeliveries="2"/></wiremq>'
    )
    dead, dead_recorder = connect(server.port)
    _subscribed(dead, dead_recorder, "/queue/DMQ", ack="client-individual")
    consumer, recorder = connect(server.port)
    _subscribed(consumer, recorder, "/queue/poison", ack="client-individual")
    fill(server.port, "/queue/poison", ["bad"], **PERSISTENT)
    counts = []
    for attempt in range(3):
        message = recorder.wait_for_messages(attempt + 1)[-1]
        counts.append(message.headers.get("x-delivery-count"))
        consumer.nack(message.headers["ack"])
    assert counts == [None, "1", "2"]
    [moved] = dead_recorder.wait_for_messages(1)
    assert moved.body == "bad"
    assert moved.headers["original-destination"] == "/queue/poison"
    assert moved.headers["dead-reason"] == "redelivery limit"
    assert moved.headers["dead-delivery-count"] == "3"
    _quiet(recorder, 3)
    assert server.store.count("/queue/poison")[0] == 0


def test_nack_with_requeue_false_goes_to_the_dead_message_queue(server):
    dead, dead_recorder = connect(server.port)
    _subscribed(dead, dead_recorder, "/queue/DMQ")
    consumer, recorder = connect(server.port)
    _subscribed(consumer, recorder, "/queue/refused", ack="client-individual")
    fill(server.port, "/queue/refused", ["no thanks"])
    [message] = recorder.wait_for_messages(1)
    consumer.nack(message.headers["ack"], requeue=False)
    [moved] = dead_recorder.wait_for_messages(1)
    assert moved.headers["dead-reason"] == "rejected"
    assert moved.headers["original-destination"] == "/queue/refused"


def test_a_redelivery_delay_holds_the_message_back(start_server):
    server = start_server(
        '<wiremq><Destination name="/queue/later" redeliverydelay="800"/></wiremq>'
    )
    consumer, recorder = connect(server.port)
    _subscribed(consumer, recorder, "/queue/later", ack="client-individual")
    fill(server.port, "/queue/later", ["again"])
    [message] = recorder.wait_for_messages(1)
    nacked = time.monotonic()
    consumer.nack(message.headers["ack"])
    again = recorder.wait_for_messages(2)[-1]
    assert time.monotonic() - nacked >= 0.75
    assert again.headers["redelivered"] == "true" and again.headers["x-delivery-count"] == "1"


def test_message_groups_stick_to_one_consumer_until_it_leaves(server):
    first, first_recorder = connect(server.port)
    second, second_recorder = connect(server.port)
    _subscribed(first, first_recorder, "/queue/groups", ack="client-individual")
    _subscribed(second, second_recorder, "/queue/groups", ack="client-individual")
    producer, recorder = connect(server.port)
    for i in range(6):
        headers = {"JMSXGroupID": "order-1", "JMSXGroupSeq": str(i + 1)}
        producer.send("/queue/groups", f"o{i}", headers=headers, receipt=str(i))
    assert recorder.wait_until(lambda: len(recorder.receipts) == 6)
    assert first_recorder.wait_until(
        lambda: len(first_recorder.messages) + len(second_recorder.messages) == 6
    )
    owner, owner_connection, other = (
        (first_recorder, first, second_recorder)
        if first_recorder.messages
        else (second_recorder, second, first_recorder)
    )
    assert [m.body for m in owner.messages] == [f"o{i}" for i in range(6)]
    assert other.messages == []
    assert owner.messages[0].headers["JMSXGroupFirstForConsumer"] == "true"
    assert [m.headers["JMSXGroupSeq"] for m in owner.messages] == ["1", "2", "3", "4", "5", "6"]
    for message in owner.messages:
        owner_connection.ack(message.headers["ack"])
    owner_connection.disconnect()
    producer.send("/queue/groups", "o6", headers={"JMSXGroupID": "order-1"})
    [moved] = other.wait_for_messages(1)
    assert moved.body == "o6" and moved.headers["JMSXGroupFirstForConsumer"] == "true"


def test_an_exclusive_consumer_takes_everything_until_it_leaves(server):
    plain, plain_recorder = connect(server.port)
    _subscribed(plain, plain_recorder, "/queue/excl")
    exclusive, exclusive_recorder = connect(server.port)
    _subscribed(exclusive, exclusive_recorder, "/queue/excl", **{"activemq.exclusive": "true"})
    fill(server.port, "/queue/excl", ["1", "2", "3"])
    assert [m.body for m in exclusive_recorder.wait_for_messages(3)] == ["1", "2", "3"]
    exclusive.disconnect()
    fill(server.port, "/queue/excl", ["4"])
    assert [m.body for m in plain_recorder.wait_for_messages(1)] == ["4"]
    assert len(exclusive_recorder.messages) == 3


def test_a_browser_sees_the_queue_then_browser_end_and_consumes_nothing(server):
    fill(server.port, "/queue/browse", ["a", "b", "c"])
    fill(server.port, "/queue/browse", ["first"], priority="9")
    browser, recorder = connect(server.port)
    _subscribed(browser, recorder, "/queue/browse", browser="true")
    messages = recorder.wait_for_messages(5)
    assert [m.body for m in messages[:4]] == ["first", "a", "b", "c"]
    assert messages[4].headers["browser"] == "end" and messages[4].body == ""
    _quiet(recorder, 5)
    consumer, consumer_recorder = connect(server.port)
    _subscribed(consumer, consumer_recorder, "/queue/browse")
    assert len(consumer_recorder.wait_for_messages(4)) == 4


def test_topic_subscribers_and_durable_subscribers_get_what_their_selectors_select(server):
    durable, durable_recorder = connect(server.port, **{"client-id": "sel"})
    headers = {"activemq.subscriptionName": "big", "selector": "size >= 10"}
    _subscribed(durable, durable_recorder, "/topic/sizes", "d", ack="client-individual", **headers)
    durable.disconnect()
    live, live_recorder = connect(server.port)
    _subscribed(live, live_recorder, "/topic/sizes", selector="size < 10 OR size IS NULL")
    producer, recorder = connect(server.port)
    for size in ("3", "12", "", "40"):
        extra = {"size": size} if size else {}
        producer.send("/topic/sizes", size or "none", headers={**extra, **PERSISTENT}, receipt=size)
    assert recorder.wait_until(lambda: len(recorder.receipts) == 4)
    assert [m.body for m in live_recorder.wait_for_messages(2)] == ["3", "none"]
    back, back_recorder = connect(server.port, **{"client-id": "sel"})
    _subscribed(back, back_recorder, "/topic/sizes", "d", ack="client-individual", **headers)
    assert [m.body for m in back_recorder.wait_for_messages(2)] == ["12", "40"]
    _quiet(back_recorder, 2)
    assert len(live_recorder.messages) == 2


def test_selectors_read_the_jms_fields_and_numeric_header_values(server):
    jms, jms_recorder = connect(server.port)
    _subscribed(
        jms,
        jms_recorder,
        "/queue/fields",
        "j",
        selector="JMSPriority > 6 AND JMSType = 'order' AND JMSDeliveryMode = 'PERSISTENT'",
    )
    numeric, numeric_recorder = connect(server.port)
    _subscribed(
        numeric,
        numeric_recorder,
        "/queue/fields",
        "n",
        selector="price * 2 > 250 AND qty BETWEEN 1 AND 10 AND code LIKE 'A\\_%' ESCAPE '\\'",
    )
    sent = [
        ("urgent order", {"priority": "9", "type": "order", **PERSISTENT}),
        ("not persistent", {"priority": "9", "type": "order"}),
        ("low priority", {"priority": "5", "type": "order", **PERSISTENT}),
        ("big", {"price": "150", "qty": "5", "code": "A_1"}),
        ("too cheap", {"price": "100", "qty": "5", "code": "A_1"}),
        ("not a number", {"price": "lots", "qty": "5", "code": "A_1"}),
        ("code unlike", {"price": "150", "qty": "5", "code": "AB1"}),
        ("exponent", {"price": "1.5e2", "qty": "10", "code": "A_"}),
    ]
    producer, recorder = connect(server.port)
    for i, (body, headers) in enumerate(sent):
        producer.send("/queue/fields", body, headers=headers, receipt=str(i))
    assert recorder.wait_until(lambda: len(recorder.receipts) == len(sent))
    assert [m.body for m in jms_recorder.wait_for_messages(1)] == ["urgent order"]
    assert [m.body for m in numeric_recorder.wait_for_messages(2)] == ["big", "exponent"]
    _quiet(numeric_recorder, 2)
    assert len(jms_recorder.messages) == 1
    queue = server.core.destinations.queues["/queue/fields"]
    assert sorted(m.body for m in queue.waiting()) == sorted(
        b"not persistent,low priority,too cheap,not a number,code unlike".split(b",")
    )


def test_a_consumer_that_vanishes_with_a_message_counts_as_a_delivery(start_server):
    server = start_server(
        '<wiremq><Destination name="/queue/vanish" maxredeliveries="1"/></wiremq>'
    )
    dead, dead_recorder = connect(server.port)
    _subscribed(dead, dead_recorder, "/queue/DMQ")
    second, second_recorder = connect(server.port)
    _subscribed(
        second, second_recorder, "/queue/vanish", ack="client-individual", selector="JMSRedelivered"
    )
    fill(server.port, "/queue/vanish", ["held"], **PERSISTENT)
    first, first_recorder = connect(server.port)
    _subscribed(first, first_recorder, "/queue/vanish", ack="client-individual")
    [message] = first_recorder.wait_for_messages(1)
    assert message.headers["redelivered"] == "false" and "x-delivery-count" not in message.headers
    assert second_recorder.messages == []
    first.disconnect()  # without acknowledging: the message goes back, delivered once
    [again] = second_recorder.wait_for_messages(1)
    assert again.headers["redelivered"] == "true" and again.headers["x-delivery-count"] == "1"
    second.disconnect()  # the second delivery vanishes too: past maxredeliveries 1
    [moved] = dead_recorder.wait_for_messages(1)
    assert moved.body == "held"
    assert moved.headers["original-destination"] == "/queue/vanish"
    assert moved.headers["dead-reason"] == "redelivery limit"
    assert moved.headers["dead-delivery-count"] == "2"
    assert server.store.count("/queue/vanish")[0] == 0
