"""The distributing module's queue features on a whole core with a fake clock: selectors
that never starve a consumer, priority, redelivery limits and delays, message groups,
exclusive consumers and browsing (``tests/unit/net.py``)."""

from __future__ import annotations

import pytest

from tests.unit.net import PERSISTENT, Net, Peer, frame, send_frame

SMALL_LIVE_BUFFER = {"DestinationManager.persqueuebytehighwatermark": 2000}


def _send_many(peer: Peer, destination: str, bodies: list[str], **headers: str) -> None:
    peer.feed(b"".join(send_frame(destination, body, dict(headers)) for body in bodies))


def _nack(peer: Peer, message) -> None:
    peer.feed(frame("NACK", {"id": message.headers["ack"]}))


# -- runs ------------------------------------------------------------------------------------


def test_a_read_to_several_destinations_reaches_each_in_order(make_net):
    """One read's SENDs go to each destination as runs (a batch to one destination all
    at once): every message arrives, in the order it was sent there."""
    net = make_net()
    consumer = Peer(net, "consumer")
    for number, name in enumerate(("/queue/a", "/queue/b", "/queue/c")):
        consumer.subscribe(name, sub_id=str(number))
    producer = Peer(net, "producer")
    sent = [("/queue/a", "a1"), ("/queue/a", "a2"), ("/queue/b", "b1"), ("/queue/a", "a3")]
    sent += [("/queue/c", "c1"), ("/queue/b", "b2"), ("/queue/b", "b3")]
    producer.feed(b"".join(send_frame(name, body) for name, body in sent))
    _send_many(producer, "/queue/c", ["c2", "c3"])  # a read to one destination alone
    got: dict[str, list[str]] = {}
    for message in consumer.messages:
        got.setdefault(message.headers["destination"], []).append(message.body.decode())
    assert got == {
        "/queue/a": ["a1", "a2", "a3"],
        "/queue/b": ["b1", "b2", "b3"],
        "/queue/c": ["c1", "c2", "c3"],
    }


@pytest.mark.parametrize("selector", [None, "price > 1"])
def test_one_read_of_plain_prioritised_and_stored_messages_keeps_priority_then_arrival(
    make_net, selector
):
    """A queue numbers a read's plain runs in C and the rest one by one: each message's
    arrival follows the one that reached the queue before it (a persistent one once it
    is stored; a transaction's all at its commit, in the order sent), and delivery is by
    priority, then arrival."""
    net = make_net(persistent=True)
    if selector is not None:  # a selective queue: its consumer is there, and not ready
        waiting = Peer(net, "waiting")
        waiting.subscribe("/queue/r", selector=selector, ack="client", consumerQueueEntriesSize="1")
        waiting.send("/queue/r", "first", {"price": "2"})  # arrival 1
        assert waiting.bodies() == ["first"]
    producer = Peer(net, "p")
    sent = [("a", {}), ("b", {"priority": "9"}), ("c", {}), ("d", dict(PERSISTENT)), ("e", {})]
    sent += [("f", {"priority": "0"}), ("g", {}), ("h", {})]
    transacted = [("t1", {}), ("t2", dict(PERSISTENT)), ("t3", {"priority": "9"}), ("t4", {})]
    read = b"".join(send_frame("/queue/r", body, headers) for body, headers in sent)
    read += frame("BEGIN", {"transaction": "tx"})
    for body, headers in transacted:
        read += send_frame("/queue/r", body, {**headers, "transaction": "tx"})
    producer.feed(read + frame("COMMIT", {"transaction": "tx"}))
    queue = net.queue("/queue/r")
    waiting = queue.waiting()
    arrivals = {m.body.decode(): m.arrival for m in waiting}
    order = ["a", "b", "c", "e", "f", "g", "h", "t1", "t2", "t3", "t4", "d"]
    first = 1 if selector is None else 2
    assert [arrivals[body] for body in order] == list(range(first, first + len(order)))
    delivered = ["b", "t3", "a", "c", "e", "g", "h", "t1", "t2", "t4", "d", "f"]
    assert [m.body.decode() for m in waiting] == delivered
    assert queue.received == first - 1 + len(order)
    assert queue.selective == (selector is not None)
    consumer = Peer(net, "c")
    consumer.subscribe("/queue/r")
    assert consumer.bodies() == delivered


# -- selectors -------------------------------------------------------------------------------


def test_a_selective_consumer_gets_only_what_it_selects_and_the_rest_waits(make_net):
    net = make_net()
    producer, eu, anyone = Peer(net, "p"), Peer(net, "eu"), Peer(net, "any")
    eu.subscribe("/queue/s", selector="region = 'EU' AND price > 100")
    for i, (region, price) in enumerate([("EU", 150), ("US", 150), ("EU", 50), ("EU", 101)]):
        producer.send("/queue/s", str(i), {"region": region, "price": str(price)})
    assert eu.bodies() == ["0", "3"]
    queue = net.queue("/queue/s")
    assert [m.body for m in queue.waiting()] == [b"1", b"2"]  # nobody selects them: they wait
    anyone.subscribe("/queue/s")
    assert anyone.bodies() == ["1", "2"]


def test_what_a_lone_selective_consumer_cannot_take_from_a_read_waits_in_arrival_order(
    make_net,
):
    net = make_net()
    picky = Peer(net, "picky")
    picky.subscribe("/queue/s", selector="price > 100", ack="client", consumerQueueEntriesSize="2")
    sent = [("s1", 150), ("u1", 50), ("s2", 150), ("s3", 150), ("u2", 50), ("s4", 150)]
    read = b"".join(send_frame("/queue/s", body, {"price": str(price)}) for body, price in sent)
    Peer(net, "p").feed(read)
    assert picky.bodies() == ["s1", "s2"]  # its window is full
    queue = net.queue("/queue/s")
    assert [m.body.decode() for m in queue.waiting()] == ["u1", "s3", "u2", "s4"]
    anyone = Peer(net, "anyone")
    anyone.subscribe("/queue/s")
    assert anyone.bodies() == ["u1", "s3", "u2", "s4"]


def test_a_selective_consumer_behind_a_large_unmatched_backlog_is_not_starved(make_net):
    net = make_net()
    producer, consumer = Peer(net, "p"), Peer(net, "c")
    _send_many(producer, "/queue/deep", [str(i) for i in range(20_000)], kind="noise")
    producer.send("/queue/deep", "wanted", {"kind": "signal"})
    consumer.subscribe("/queue/deep", selector="kind = 'signal'")
    assert consumer.bodies() == ["wanted"]
    producer.send("/queue/deep", "later", {"kind": "signal"})
    assert consumer.bodies() == ["wanted", "later"]
    assert len(net.queue("/queue/deep").waiting()) == 20_000


def test_a_persistent_unmatched_backlog_read_back_from_the_store_does_not_starve(make_net):
    net = make_net(SMALL_LIVE_BUFFER, persistent=True)
    producer, consumer = Peer(net, "p"), Peer(net, "c")
    _send_many(
        producer, "/queue/pdeep", [f"n{i:04d}" for i in range(3000)], kind="noise", **PERSISTENT
    )
    producer.send("/queue/pdeep", "wanted", {"kind": "signal", **PERSISTENT})
    queue = net.queue("/queue/pdeep")
    assert queue.backlog_start() is not None and queue.counts.live_buffer_bytes <= 2000
    consumer.subscribe("/queue/pdeep", ack="client-individual", selector="kind = 'signal'")
    assert consumer.bodies() == ["wanted"]
    consumer.ack(consumer.messages[0])
    assert net.core.store.count("/queue/pdeep")[0] == 3000
    everyone = Peer(net, "everyone")
    everyone.subscribe("/queue/pdeep")
    assert sorted(everyone.bodies()) == [f"n{i:04d}" for i in range(3000)]


def test_after_a_restart_a_selective_consumer_finds_its_message_deep_in_the_store(
    make_net, tmp_path
):
    first = make_net(SMALL_LIVE_BUFFER, persistent=True)
    producer = Peer(first, "p")
    noise = [f"n{i:04d}" for i in range(2000)]
    _send_many(producer, "/queue/r", noise, kind="noise", **PERSISTENT)
    producer.send("/queue/r", "wanted", {"kind": "signal", **PERSISTENT})
    first.close()
    reopened = Net(SMALL_LIVE_BUFFER, {}, tmp_path / "store-0.fs", tmp_path / "data-0")
    try:
        consumer = Peer(reopened, "c")
        consumer.subscribe("/queue/r", selector="kind = 'signal'")
        assert consumer.bodies() == ["wanted"]
    finally:
        reopened.close()


def test_a_hundred_selectors_on_one_header_each_get_their_own_messages(make_net):
    net = make_net()
    producer = Peer(net, "p")
    consumers = []
    for shard in range(100):
        consumer = Peer(net, f"c{shard}")
        consumer.subscribe("/queue/sharded", selector=f"shard = {shard} AND kind = 'job'")
        consumers.append(consumer)
    producer.feed(
        b"".join(
            send_frame("/queue/sharded", f"{i}", {"shard": str(i % 100), "kind": "job"})
            for i in range(1000)
        )
    )
    for shard, consumer in enumerate(consumers):
        assert consumer.bodies() == [str(i) for i in range(shard, 1000, 100)]
    matcher = net.queue("/queue/sharded").selective_dispatch.matcher
    assert len(matcher.indexed["shard"][1]) == 100 and not matcher.others


def test_a_bad_selector_is_refused_with_its_position(make_net):
    net = make_net()
    consumer = Peer(net, "c")
    consumer.subscribe("/queue/x", selector="price >> 100", receipt="s")
    [error] = consumer.errors
    assert error.headers["message"] == "invalid selector"
    assert error.headers["receipt-id"] == "s"
    assert "at position 8" in error.body.decode()
    assert error.body.decode().endswith("price >> 100\n       ^")


# -- priority --------------------------------------------------------------------------------


def test_priority_first_then_arrival_across_delivery_modes(make_net):
    net = make_net(persistent=True)
    producer = Peer(net, "p")
    sent = [("a", "4", False), ("b", "9", True), ("c", "0", False), ("d", "9", False)]
    sent += [("e", "4", True), ("f", "7", False), ("g", "", False), ("h", "x", True)]
    for body, priority, persistent in sent:
        headers = {"priority": priority} if priority else {}
        if persistent:
            headers.update(PERSISTENT)
        producer.send("/queue/prio", body, headers)
    consumer = Peer(net, "c")
    consumer.subscribe("/queue/prio", consumerQueueEntriesSize="1", ack="client-individual")
    received = []
    for _ in range(len(sent)):
        [message] = consumer.messages
        received.append(message.body.decode())
        consumer.writer.frames.clear()
        consumer.ack(message)
    # 9s first (b before d: arrival), then 7, then the 4s (absent and invalid count as 4), 0
    assert received == ["b", "d", "f", "a", "e", "g", "h", "c"]


def test_a_higher_priority_message_left_in_the_store_goes_before_those_in_memory(make_net):
    net = make_net({"DestinationManager.persqueuebytehighwatermark": 100}, persistent=True)
    producer = Peer(net, "p")
    for i in range(8):
        producer.send("/queue/ps", f"low{i}" + "." * 20, {"priority": "1", **PERSISTENT})
    producer.send("/queue/ps", "high" + "." * 20, {"priority": "8", **PERSISTENT})
    queue = net.queue("/queue/ps")
    assert queue.backlog_start() is not None  # the high one is only in the store
    consumer = Peer(net, "c")
    consumer.subscribe("/queue/ps", consumerQueueEntriesSize="1", ack="client-individual")
    received = []
    for _ in range(9):
        [message] = consumer.messages
        received.append(message.body.decode().rstrip("."))
        consumer.writer.frames.clear()
        consumer.ack(message)
    assert received == ["high"] + [f"low{i}" for i in range(8)]


# -- redelivery ------------------------------------------------------------------------------


def test_nacks_count_deliveries_and_the_limit_moves_the_message_to_the_dmq(make_net):
    net = make_net(destinations={"/queue/poison": {"maxredeliveries": 2}})
    producer, consumer, dead = Peer(net, "p"), Peer(net, "c"), Peer(net, "d")
    dead.subscribe("/queue/DMQ")
    consumer.subscribe("/queue/poison", ack="client-individual")
    producer.send("/queue/poison", "bad", {"custom": "x"})
    counts = []
    for _ in range(3):
        [message] = consumer.messages
        counts.append((message.headers["redelivered"], message.headers.get("x-delivery-count")))
        consumer.writer.frames.clear()
        _nack(consumer, message)
    assert counts == [("false", None), ("true", "1"), ("true", "2")]
    assert consumer.messages == []
    [moved] = dead.messages
    assert moved.body == b"bad" and moved.headers["custom"] == "x"
    assert moved.headers["original-destination"] == "/queue/poison"
    assert moved.headers["dead-reason"] == "redelivery limit"
    assert moved.headers["dead-delivery-count"] == "3"
    assert "x-delivery-count" not in moved.headers


def test_consumers_that_vanish_holding_a_message_count_as_deliveries(make_net):
    net = make_net(destinations={"/queue/v": {"maxredeliveries": 1}}, persistent=True)
    producer, dead = Peer(net, "p"), Peer(net, "d")
    dead.subscribe("/queue/DMQ", ack="client-individual")  # holds it: it stays stored
    producer.send("/queue/v", "held", PERSISTENT)
    for attempt in range(2):
        consumer = Peer(net, f"c{attempt}")
        consumer.subscribe("/queue/v", ack="client")
        [message] = consumer.messages
        assert message.headers.get("x-delivery-count") == (None if attempt == 0 else "1")
        consumer.connection.connection_lost()
        net.settle()
    [moved] = dead.messages
    assert moved.headers["dead-reason"] == "redelivery limit"
    assert moved.headers["dead-delivery-count"] == "2"
    assert moved.headers["persistent"] == "true"
    assert net.core.store.count("/queue/v")[0] == 0
    assert net.core.store.count("/queue/DMQ")[0] == 1


def test_nack_without_requeue_moves_the_message_to_the_dmq_at_once(make_net):
    net = make_net(persistent=True)
    producer, consumer, dead = Peer(net, "p"), Peer(net, "c"), Peer(net, "d")
    dead.subscribe("/queue/DMQ", ack="client-individual")
    consumer.subscribe("/queue/rej", ack="client-individual")
    producer.send("/queue/rej", "no", PERSISTENT)
    [message] = consumer.messages
    consumer.feed(frame("NACK", {"id": message.headers["ack"], "requeue": "false"}))
    [moved] = dead.messages
    assert moved.headers["dead-reason"] == "rejected"
    assert moved.headers["dead-delivery-count"] == "1"
    assert net.core.store.count("/queue/rej")[0] == 0
    assert net.core.store.count("/queue/DMQ")[0] == 1


def test_the_redelivery_delay_grows_by_the_backoff_up_to_its_maximum(make_net):
    destination = {
        "redeliverydelay": 1000,
        "redeliverybackoff": 3.0,
        "maxredeliverydelay": 5000,
        "maxredeliveries": 5,
    }
    net = make_net(destinations={"/queue/slow": destination})
    producer, consumer = Peer(net, "p"), Peer(net, "c")
    consumer.subscribe("/queue/slow", ack="client-individual")
    producer.send("/queue/slow", "again")
    times = []
    for _ in range(4):
        [message] = consumer.messages
        times.append(net.runtime.now)
        consumer.writer.frames.clear()
        _nack(consumer, message)  # settles: the fake clock runs to the next timer
    [message] = consumer.messages
    times.append(net.runtime.now)
    gaps = [round(b - a, 3) for a, b in zip(times, times[1:], strict=False)]
    assert gaps == [1.0, 3.0, 5.0, 5.0]
    assert message.headers["x-delivery-count"] == "4"


# -- message groups and exclusive consumers ---------------------------------------------------


def test_a_message_group_sticks_to_one_consumer_and_moves_when_it_goes(make_net):
    net = make_net()
    producer, first, second = Peer(net, "p"), Peer(net, "a"), Peer(net, "b")
    first.subscribe("/queue/g", ack="client-individual")
    second.subscribe("/queue/g", ack="client-individual")
    for i in range(6):
        group = "A" if i % 2 == 0 else "B"
        producer.send("/queue/g", f"{group}{i}", {"JMSXGroupID": group, "JMSXGroupSeq": str(i)})
    by_consumer = {peer: [m.body.decode() for m in peer.messages] for peer in (first, second)}
    assert sorted(by_consumer.values()) == [["A0", "A2", "A4"], ["B1", "B3", "B5"]]
    owner_of_a = first if by_consumer[first][0] == "A0" else second
    other = second if owner_of_a is first else first
    flags = [m.headers.get("JMSXGroupFirstForConsumer") for m in owner_of_a.messages]
    assert flags == ["true", None, None]
    assert owner_of_a.messages[1].headers["JMSXGroupSeq"] == "2"
    other.writer.frames.clear()
    owner_of_a.connection.connection_lost()  # its unacknowledged A messages move too
    net.settle()
    producer.send("/queue/g", "A6", {"JMSXGroupID": "A"})
    moved = [m.body.decode() for m in other.messages]
    assert moved == ["A0", "A2", "A4", "A6"]
    assert other.messages[0].headers["JMSXGroupFirstForConsumer"] == "true"
    assert other.messages[0].headers["redelivered"] == "true"


def test_an_exclusive_consumer_gets_everything_and_another_takes_over(make_net):
    net = make_net()
    producer = Peer(net, "p")
    normal, exclusive, backup = Peer(net, "n"), Peer(net, "x"), Peer(net, "y")
    normal.subscribe("/queue/ex")
    exclusive.subscribe("/queue/ex", **{"activemq.exclusive": "true"})
    backup.subscribe("/queue/ex", **{"activemq.exclusive": "true"})
    _send_many(producer, "/queue/ex", ["1", "2", "3"])
    assert exclusive.bodies() == ["1", "2", "3"] and normal.bodies() == backup.bodies() == []
    exclusive.feed(frame("UNSUBSCRIBE", {"id": "1"}))
    _send_many(producer, "/queue/ex", ["4", "5"])
    assert backup.bodies() == ["4", "5"] and normal.bodies() == []
    backup.feed(frame("UNSUBSCRIBE", {"id": "1"}))
    _send_many(producer, "/queue/ex", ["6"])
    assert normal.bodies() == ["6"]


# -- browsing --------------------------------------------------------------------------------


def test_a_browser_sees_every_waiting_message_in_order_and_takes_none(make_net):
    net = make_net({"DestinationManager.persqueuebytehighwatermark": 100}, persistent=True)
    producer = Peer(net, "p")
    for i in range(10):
        producer.send("/queue/b", f"m{i}" + "." * 20, PERSISTENT)
    producer.send("/queue/b", "urgent", {"priority": "9"})
    producer.send("/queue/b", "skip-me", {"kind": "other"})
    browser = Peer(net, "browser")
    browser.subscribe("/queue/b", browser="true", selector="kind IS NULL")
    bodies = [m.body.decode().rstrip(".") for m in browser.messages]
    assert bodies[0] == "urgent"
    assert sorted(bodies[1:-1]) == [f"m{i}" for i in range(10)]
    end = browser.messages[-1]
    assert end.headers["browser"] == "end" and end.body == b""
    assert end.headers["destination"] == "/queue/b"
    consumer = Peer(net, "c")
    consumer.subscribe("/queue/b")
    assert len(consumer.messages) == 12  # nothing was taken


# -- wildcards -------------------------------------------------------------------------------


def test_wildcard_queue_consumers_compete_for_every_matching_queue(make_net):
    net = make_net()
    producer, jobs, other = Peer(net, "p"), Peer(net, "w"), Peer(net, "o")
    producer.send("/queue/jobs.a", "before")  # a queue made before the subscription
    jobs.subscribe("/queue/jobs.*", ack="client-individual")
    producer.send("/queue/jobs.b", "new-queue")
    producer.send("/queue/jobs.b.c", "too-deep")
    producer.send("/queue/other", "not-mine")
    assert sorted(jobs.bodies()) == ["before", "new-queue"]
    destinations = {m.body.decode(): m.headers["destination"] for m in jobs.messages}
    assert destinations == {"before": "/queue/jobs.a", "new-queue": "/queue/jobs.b"}
    other.subscribe("/queue/jobs.b", ack="client-individual")
    producer.send("/queue/jobs.b", "one")
    producer.send("/queue/jobs.b", "two")
    assert sorted(jobs.bodies()[2:] + other.bodies()) == ["one", "two"]
    for message in jobs.messages:
        jobs.ack(message)
    jobs.feed(frame("UNSUBSCRIBE", {"id": "1"}))
    producer.send("/queue/jobs.a", "after")
    assert net.queue("/queue/jobs.a").consumers == {}


def test_wildcard_topic_subscriptions_one_level_and_many(make_net):
    net = make_net()
    producer, star, tail = Peer(net, "p"), Peer(net, "s"), Peer(net, "t")
    star.subscribe("/topic/a.*")
    tail.subscribe("/topic/a.>", selector="n > 1")
    for name in ("/topic/a", "/topic/a.b", "/topic/a.b.c", "/topic/x.b"):
        producer.send(name, name, {"n": "2"})
    producer.send("/topic/a.c", "low", {"n": "1"})
    assert star.bodies() == ["/topic/a.b", "low"]
    assert tail.bodies() == ["/topic/a.b", "/topic/a.b.c"]
    assert [m.headers["destination"] for m in tail.messages] == ["/topic/a.b", "/topic/a.b.c"]


def test_bad_wildcards_are_refused(make_net):
    net = make_net()
    for pattern in ("/queue/a.>.b", "/queue/a*", "/queue/a..*"):
        consumer = Peer(net, pattern)
        consumer.subscribe(pattern)
        [error] = consumer.errors
        assert error.headers["message"] == "invalid destination", pattern


# -- more edges ------------------------------------------------------------------------------


def test_the_last_selective_consumer_leaving_makes_the_queue_plain_again(make_net):
    net = make_net()
    producer, selective, plain = Peer(net, "p"), Peer(net, "s"), Peer(net, "a")
    selective.subscribe("/queue/m", selector="k = 1")
    _send_many(producer, "/queue/m", ["x", "y"], k="2")
    queue = net.queue("/queue/m")
    assert queue.selective and list(queue.selective_dispatch.filters) == ["k = 1"]
    selective.feed(frame("UNSUBSCRIBE", {"id": "1"}))
    selective_dispatch = queue.selective_dispatch
    assert not queue.selective and not selective_dispatch.filters
    assert not selective_dispatch.matcher.indexed
    plain.subscribe("/queue/m")
    assert plain.bodies() == ["x", "y"]


def test_a_group_message_its_owner_does_not_select_waits_for_the_owner_to_go(make_net):
    net = make_net()
    producer, owner, other = Peer(net, "p"), Peer(net, "o"), Peer(net, "x")
    owner.subscribe("/queue/gs", selector="part = 1")
    producer.send("/queue/gs", "first", {"JMSXGroupID": "g", "part": "1"})
    other.subscribe("/queue/gs")
    producer.send("/queue/gs", "second", {"JMSXGroupID": "g", "part": "2"})
    assert owner.bodies() == ["first"] and other.bodies() == []
    owner.feed(frame("UNSUBSCRIBE", {"id": "1"}))
    assert other.bodies() == ["second"]
    assert other.messages[0].headers["JMSXGroupFirstForConsumer"] == "true"


def test_group_sequence_minus_one_closes_the_group(make_net):
    net = make_net()
    producer, first, second = Peer(net, "p"), Peer(net, "a"), Peer(net, "b")
    first.subscribe("/queue/gc", ack="client-individual", consumerQueueEntriesSize="1")
    producer.send("/queue/gc", "1", {"JMSXGroupID": "g"})
    producer.send("/queue/gc", "2", {"JMSXGroupID": "g", "JMSXGroupSeq": "-1"})
    assert first.bodies() == ["1"]
    first.ack(first.messages[0])
    assert first.bodies() == ["1", "2"]  # still its group until the closing message
    second.subscribe("/queue/gc", ack="client-individual")
    first.ack(first.messages[1])
    producer.send("/queue/gc", "3", {"JMSXGroupID": "g"})  # a new group of the same id
    owners = [p for p in (first, second) if "3" in p.bodies()]
    assert len(owners) == 1
    [message] = [m for m in owners[0].messages if m.body == b"3"]
    assert message.headers["JMSXGroupFirstForConsumer"] == "true"


def test_an_expired_message_listed_for_a_selector_is_never_delivered(make_net):
    net = make_net()
    producer, consumer = Peer(net, "p"), Peer(net, "c")
    consumer.subscribe("/queue/exp", selector="k = 1", consumerQueueEntriesSize="1", ack="client")
    soon = str(net.runtime.now_ms() + 1000)
    producer.send("/queue/exp", "held", {"k": "1"})  # fills the window: the next are listed
    producer.send("/queue/exp", "old", {"k": "1", "expires": soon})
    producer.send("/queue/exp", "fresh", {"k": "1"})
    assert consumer.bodies() == ["held"]
    net.runtime.advance(2.0)
    consumer.ack(consumer.messages[0])
    assert consumer.bodies() == ["held", "fresh"]
    assert net.queue("/queue/exp").waiting() == []


def test_a_topic_nack_past_the_limit_copies_the_message_to_the_dmq(make_net):
    net = make_net(destinations={"/topic/t": {"maxredeliveries": 1}})
    producer, subscriber, other, dead = (
        Peer(net, "p"),
        Peer(net, "s"),
        Peer(net, "o"),
        Peer(net, "d"),
    )
    dead.subscribe("/queue/DMQ")
    subscriber.subscribe("/topic/t", ack="client-individual")
    other.subscribe("/topic/t")
    producer.send("/topic/t", "news")
    for expected in (None, "1"):
        [message] = subscriber.messages
        assert message.headers.get("x-delivery-count") == expected
        subscriber.writer.frames.clear()
        _nack(subscriber, message)
    assert subscriber.messages == [] and other.bodies() == ["news"]
    [moved] = dead.messages
    assert moved.headers["dead-reason"] == "redelivery limit"
    assert moved.headers["original-destination"] == "/topic/t"


def test_topic_selectors_apply_to_live_and_durable_replayed_messages(make_net):
    net = make_net(persistent=True)
    producer = Peer(net, "p")
    durable = Peer(net, "d")
    durable.subscribe(
        "/topic/sel", ack="client-individual", selector="n > 5", **{"durable": "true"}
    )
    durable.connection.connection_lost()
    net.settle()
    for n in (1, 7, 3, 9):
        producer.send("/topic/sel", str(n), {"n": str(n), **PERSISTENT})
    back = Peer(net, "d2")
    back.subscribe("/topic/sel", ack="client-individual", selector="n > 5", **{"durable": "true"})
    assert back.bodies() == ["7", "9"]
    live = Peer(net, "l")
    live.subscribe("/topic/sel", selector="n <= 5")
    producer.send("/topic/sel", "4", {"n": "4"})
    producer.send("/topic/sel", "6", {"n": "6"})
    assert live.bodies() == ["4"] and back.bodies() == ["7", "9", "6"]


def test_wildcards_browsers_and_durables_do_not_mix(make_net):
    net = make_net(persistent=True)
    cases = [
        ("/queue/a.*", {"browser": "true"}, "browsing a wildcard"),
        ("/topic/a.*", {"durable": "true"}, "durable wildcard"),
        ("/topic/t", {"browser": "true"}, "not a queue"),
    ]
    for destination, headers, message in cases:
        client = Peer(net, destination)
        client.subscribe(destination, **headers)
        [error] = client.errors
        assert error.headers["message"] == message


def test_a_wildcard_client_ack_is_cumulative_over_its_queues(make_net):
    net = make_net()
    producer, consumer = Peer(net, "p"), Peer(net, "c")
    consumer.subscribe("/queue/w.*", ack="client")
    for name in ("/queue/w.a", "/queue/w.b", "/queue/w.a"):
        producer.send(name, name)
    assert len(consumer.messages) == 3
    consumer.ack(consumer.messages[-1])  # covers all three
    consumer.connection.connection_lost()
    net.settle()
    again = Peer(net, "again")
    again.subscribe("/queue/w.*")
    assert again.bodies() == []


def test_a_queue_stuck_with_unselected_messages_does_not_remember_every_pulled_one(make_net):
    values = {
        "DestinationManager.persqueuebytehighwatermark": 100,
        "PersQueueFileStore.scanmsgamount": 20,
    }
    net = make_net(values, persistent=True)
    producer, consumer = Peer(net, "p"), Peer(net, "c")
    _send_many(producer, "/queue/stuck", [f"junk{i}" + "." * 20 for i in range(4)], **PERSISTENT)
    consumer.subscribe("/queue/stuck", ack="client-individual", selector="k = 1")
    queue = net.queue("/queue/stuck")
    received = []
    for i in range(300):
        producer.send("/queue/stuck", f"m{i}", {"k": "1", **PERSISTENT})
        for message in consumer.messages:
            received.append(message.body.decode())
            consumer.ack(message)
        consumer.writer.frames.clear()
    assert received == [f"m{i}" for i in range(300)]
    assert queue.counts.live_buffer_bytes > 0 and queue.backlog.after is not None  # the junk stays
    assert len(queue.backlog.pulled) <= 2 * 20  # swept: not one per message taken


def test_a_topic_selects_while_any_subscriber_has_a_selector_and_fans_out_plainly_after(make_net):
    net = make_net(persistent=True)
    producer, plain = Peer(net, "p"), Peer(net, "plain")
    low, high, durable = Peer(net, "low"), Peer(net, "high"), Peer(net, "d")
    plain.subscribe("/topic/mix")
    low.subscribe("/topic/mix", selector="n < 5")
    high.subscribe("/topic/mix", selector="n > 5")
    durable.subscribe("/topic/mix", selector="n = 1", durable="true")
    topic = net.topic("/topic/mix")
    assert topic.selecting == 3
    low.feed(frame("UNSUBSCRIBE", {"id": "1"}))
    durable.connection.connection_lost()
    net.settle()
    assert topic.selecting == 1
    producer.send("/topic/mix", "3", {"n": "3"})
    producer.send("/topic/mix", "7", {"n": "7"})
    assert high.bodies() == ["7"] and plain.bodies() == ["3", "7"] and low.bodies() == []
    back = Peer(net, "d")  # the durable subscriber again, with another selector
    back.subscribe("/topic/mix", selector="n = 2", durable="true")
    assert topic.selecting == 2
    producer.send("/topic/mix", "1", {"n": "1"})
    producer.send("/topic/mix", "2", {"n": "2"})
    assert back.bodies() == ["2"] and high.bodies() == ["7"]
    for subscriber in (high, back):
        subscriber.feed(frame("UNSUBSCRIBE", {"id": "1"}))
    assert topic.selecting == 0
    producer.send("/topic/mix", "9", {"n": "9"})
    assert plain.bodies() == ["3", "7", "1", "2", "9"] and high.bodies() == ["7"]


def test_a_plain_queue_delivers_what_comes_after_messages_taken_out_of_it(make_net):
    """Messages taken out of a plain queue's list (expired here; given back, or taken by an
    operator, the same way) leave the list it appends new messages to in place."""
    net = make_net()
    producer = Peer(net, "p")
    expires = str(net.runtime.now_ms() + 1000)
    producer.send("/queue/taken", "expiring", {"expires": expires})
    queue = net.queue("/queue/taken")
    queue.sweeps.sweep_volatile(net.runtime.now_ms() + 2000)
    assert queue.waiting() == []
    producer.send("/queue/taken", "after")
    consumer = Peer(net, "c")
    consumer.subscribe("/queue/taken")
    assert consumer.bodies() == ["after"]
    consumer.feed(frame("UNSUBSCRIBE", {"id": "1"}))
    producer.send("/queue/taken", "operator")
    producer.send("/queue/taken", "later")
    assert [m.body for m in queue.take_waiting(lambda m: m.body == b"operator")] == [b"operator"]
    producer.send("/queue/taken", "last")
    again = Peer(net, "again")
    again.subscribe("/queue/taken")
    assert again.bodies() == ["later", "last"]
