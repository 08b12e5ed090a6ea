"""Nothing lost, nothing doubled: the edges of delivery that once lost or doubled messages.

Each test reproduces a case that failed on 557e0e2 (issue 9). Tests that check
that something does *not* arrive wait ``LATE`` seconds, long enough to see a
late arrival.
"""

from __future__ import annotations

import socket
import struct
import time

from tests.conftest import call_in_reactor
from tests.integration.clients import RawClient, connect, fill, until
from wiremq.modules.destinations.subscription import Subscription
from wiremq.modules.message import Message

LATE = 2.0  # how long "nothing more arrives" is watched


def _subscribed(connection, recorder, destination, sub_id="1", ack="auto", **headers):
    connection.subscribe(
        destination, id=sub_id, ack=ack, headers={"receipt": f"s-{sub_id}", **headers}
    )
    assert recorder.wait_until(lambda: f"s-{sub_id}" in recorder.receipts)


def _durable(port: int, client_id: str, topic: str):
    """A client-individual durable subscriber of ``topic`` (client id, subscription "d"),
    subscribed (its receipt came), with its recorder."""
    connection, recorder = connect(port, **{"client-id": client_id})
    _subscribed(
        connection,
        recorder,
        topic,
        "d",
        "client-individual",
        **{"activemq.subscriptionName": "d"},
    )
    return connection, recorder


def _raw_subscribed(client: RawClient, destination: str, ack: str, **headers: str) -> None:
    extra = "".join(f"{k}:{v}\n" for k, v in headers.items())
    client.send(
        f"SUBSCRIBE\nid:x\ndestination:{destination}\nack:{ack}\n{extra}receipt:s\n\n\0".encode()
    )
    frame = client.next_frame()
    assert frame.command == "RECEIPT", frame


def _reset(client: RawClient) -> None:
    """Close with a TCP reset, as a client that crashes does."""
    client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.sock.close()


# -- a message held by one consumer never goes to another ---------------------------------


def test_a_queue_giving_back_its_live_buffer_never_hands_out_held_messages(start_server):
    server = start_server(
        **{
            "DestinationManager.qlbcleanupinterval": "0.1",
            "DestinationManager.qlbcleanuptimetolive": "0.3",
        }
    )
    holder, holder_recorder = connect(server.port)
    _subscribed(
        holder,
        holder_recorder,
        "/queue/held",
        "b",
        "client-individual",
        **{"activemq.prefetchSize": "3"},
    )
    leaver, leaver_recorder = connect(server.port)
    _subscribed(
        leaver,
        leaver_recorder,
        "/queue/held",
        "a",
        "client-individual",
        **{"activemq.prefetchSize": "3"},
    )
    fill(server.port, "/queue/held", [str(i) for i in range(10)], persistent="true")
    held = {m.body for m in holder_recorder.wait_for_messages(3)}
    leaver_recorder.wait_for_messages(3)
    leaver.disconnect()  # its three go back to the queue; the holder's window is full
    time.sleep(1.0)  # idle past qlbcleanuptimetolive: the queue gives its live buffer back
    newcomer, newcomer_recorder = connect(server.port)
    _subscribed(newcomer, newcomer_recorder, "/queue/held", "c", "client-individual")
    newcomer_recorder.wait_for_messages(7)
    time.sleep(LATE)
    got = newcomer_recorder.bodies()
    assert not held & set(got), f"messages held by another consumer were handed out: {got}"
    assert sorted(got) == sorted(str(i) for i in range(10) if str(i) not in held)
    holder.disconnect()  # now the held ones go to the newcomer, once each
    newcomer_recorder.wait_for_messages(10)
    time.sleep(LATE)
    assert sorted(int(b) for b in newcomer_recorder.bodies()) == list(range(10))


def test_a_queue_giving_back_its_live_buffer_keeps_what_was_redelivered(start_server):
    """Found as a slow test that failed past a minute: messages that came back from a
    consumer, then were given back to the store by an idle queue, were read back as
    first deliveries (JMSRedelivered and the delivery count lost, so maxredeliveries
    could never be reached)."""
    server = start_server(
        **{
            "DestinationManager.qlbcleanupinterval": "0.1",
            "DestinationManager.qlbcleanuptimetolive": "0.3",
        }
    )
    leaver, leaver_recorder = connect(server.port)
    _subscribed(
        leaver,
        leaver_recorder,
        "/queue/back",
        "a",
        "client-individual",
        **{"activemq.prefetchSize": "3"},
    )
    fill(server.port, "/queue/back", [str(i) for i in range(10)], persistent="true")
    delivered = {m.body for m in leaver_recorder.wait_for_messages(3)}
    leaver.disconnect()  # its three come back, redelivered from now on
    time.sleep(1.0)  # idle past qlbcleanuptimetolive: the queue gives its live buffer back
    newcomer, newcomer_recorder = connect(server.port)
    _subscribed(newcomer, newcomer_recorder, "/queue/back", "c", "client-individual")
    newcomer_recorder.wait_for_messages(10)
    time.sleep(LATE)
    flagged = {m.body for m in newcomer_recorder.messages if m.headers.get("redelivered") == "true"}
    assert len(newcomer_recorder.messages) == 10 and flagged == delivered


# -- what the socket writer tells a subscription ----------------------------------------------


def test_a_subscription_is_told_of_a_delivery_once_its_socket_holds_it(server, monkeypatch):
    """Told after the send, not before: the bookkeeping of ``written`` (acknowledgement,
    counts, the journal's record) is not on the path of the client waiting for it."""
    consumer = RawClient(server.port)
    consumer.connect()
    _raw_subscribed(consumer, "/queue/told", "auto")
    held_when_told: list[bytes] = []
    written = Subscription.written

    def telling(subscription: Subscription, messages: list[Message]) -> None:
        if subscription.destination.name == "/queue/told":
            consumer.sock.setblocking(False)  # a look, not a wait (reads set a timeout again)
            try:
                held = consumer.sock.recv(65536, socket.MSG_PEEK)
            except BlockingIOError:
                held = b""
            held_when_told.append(held)
        written(subscription, messages)

    monkeypatch.setattr(Subscription, "written", telling)
    fill(server.port, "/queue/told", ["the body"])
    assert until(lambda: held_when_told)
    assert held_when_told[0].startswith(b"MESSAGE\n") and b"the body" in held_when_told[0]
    assert consumer.next_frame().body == b"the body"


# -- deliveries never written go back --------------------------------------------------------


def test_persistent_messages_unwritten_to_a_vanished_auto_consumer_go_back_at_once(server):
    vanishing = RawClient(server.port)
    vanishing.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    vanishing.connect()
    _raw_subscribed(vanishing, "/queue/vanish", "auto")
    body = "x" * 16384  # 10 MB in all: more than the socket buffers take
    fill(server.port, "/queue/vanish", [body] * 600, persistent="true")
    _reset(vanishing)  # never read: most of the 600 wait unwritten in its egress
    consumer, recorder = connect(server.port)
    _subscribed(consumer, recorder, "/queue/vanish")
    store = server.store
    assert store is not None
    # What the vanished consumer's socket took counts as delivered (auto); everything
    # else comes to the new consumer, and nothing is left behind in the store.
    assert until(lambda: store.count("/queue/vanish") == (0, 0), 15), store.count("/queue/vanish")
    assert len(recorder.messages) > 0
    assert all(m.body == body for m in recorder.messages)


def test_a_topic_subscriber_vanishing_with_unwritten_messages_drops_and_counts_them(server, events):
    vanishing = RawClient(server.port)
    vanishing.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    vanishing.connect()
    _raw_subscribed(vanishing, "/topic/vanish", "auto")
    producer, _ = connect(server.port)
    for _ in range(600):  # no receipts: the topic's watermarks stop it once it is full
        producer.send("/topic/vanish", "y" * 16384)
    time.sleep(1.0)
    _reset(vanishing)
    assert until(
        lambda: any(e.get("event") == "subscription.unwritten_dropped" for e in events), 10
    )
    dropped = next(e for e in events if e.get("event") == "subscription.unwritten_dropped")
    assert 0 < dropped["count"] <= 600 and dropped["destination"] == "/topic/vanish"


def test_unsubscribing_takes_back_what_was_not_yet_written_to_the_consumer(server):
    slow = RawClient(server.port)
    slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect()
    _raw_subscribed(slow, "/queue/unwritten", "client-individual")
    count = 400  # 6.4 MB: more than the socket buffers take
    fill(server.port, "/queue/unwritten", ["z" * 16384] * count, persistent="true")
    slow.send(b"UNSUBSCRIBE\nid:x\nreceipt:u\n\n\0")
    frames = [slow.next_frame(timeout=30)]  # the UNSUBSCRIBE's RECEIPT comes, however late
    while frames[-1].headers.get("receipt-id") != "u":
        frames.append(slow.next_frame(timeout=30))
    frames += _frames_until_quiet(slow)  # and anything still written after it
    written = [f for f in frames if f.command == "MESSAGE"]
    assert len(written) < count, "what was queued for it was still written after it ended"
    consumer, recorder = connect(server.port)
    _subscribed(consumer, recorder, "/queue/unwritten")
    recorder.wait_for_messages(count)  # every one, the written ones redelivered
    time.sleep(LATE)
    assert len(recorder.messages) == count
    redelivered = [m for m in recorder.messages if m.headers["redelivered"] == "true"]
    assert len(redelivered) == len(written)  # the never-written ones are first deliveries


# -- NACK on topics ---------------------------------------------------------------------


def test_nack_on_a_durable_subscription_redelivers_then_acknowledges(server):
    subscriber, recorder = _durable(server.port, "nacker", "/topic/nacked")
    fill(server.port, "/topic/nacked", ["0", "1"], persistent="true")
    first, second = recorder.wait_for_messages(2)
    subscriber.nack(first.headers["ack"], receipt="n")
    again = recorder.wait_for_messages(3)[2]
    assert again.body == "0" and again.headers["redelivered"] == "true"
    subscriber.ack(again.headers["ack"])
    subscriber.ack(second.headers["ack"], receipt="a")
    assert recorder.wait_until(lambda: "a" in recorder.receipts)
    subscriber.disconnect()
    back, back_recorder = _durable(server.port, "nacker", "/topic/nacked")
    time.sleep(LATE)
    assert back_recorder.messages == []  # both acknowledged: nothing comes back


def test_a_nacked_message_left_unacknowledged_comes_back_despite_later_acks(server):
    subscriber, recorder = _durable(server.port, "later", "/topic/nacklater")
    fill(server.port, "/topic/nacklater", ["0", "1"], persistent="true")
    first, second = recorder.wait_for_messages(2)
    subscriber.nack(first.headers["ack"])
    assert recorder.wait_for_messages(3)[2].body == "0"  # redelivered, then left unacked
    subscriber.ack(second.headers["ack"], receipt="a")  # a later message acknowledged
    assert recorder.wait_until(lambda: "a" in recorder.receipts)
    subscriber.disconnect()
    back, back_recorder = _durable(server.port, "later", "/topic/nacklater")
    assert back_recorder.wait_for_messages(1)[0].body == "0"
    time.sleep(LATE)
    assert back_recorder.bodies() == ["0"]  # the acknowledged "1" does not come back


def test_messages_acknowledged_past_an_unacknowledged_one_stay_acknowledged_across_a_restart(
    reactor, start_server
):
    server = start_server()
    subscriber, recorder = _durable(server.port, "restarter", "/topic/ackgap")
    fill(server.port, "/topic/ackgap", [str(i) for i in range(5)], persistent="true")
    messages = recorder.wait_for_messages(5)
    for message in messages[1:4]:  # "0" and "4" stay unacknowledged
        subscriber.ack(message.headers["ack"], receipt=f"a{message.body}")
    assert recorder.wait_until(lambda: len(recorder.receipts) == 4)  # the SUBSCRIBE's too
    subscriber.disconnect()
    call_in_reactor(reactor, server.stop)
    server = start_server()
    back, back_recorder = _durable(server.port, "restarter", "/topic/ackgap")
    back_recorder.wait_for_messages(2)
    time.sleep(LATE)
    assert back_recorder.bodies() == ["0", "4"]


def test_two_nacked_messages_left_unacknowledged_both_come_back(server):
    subscriber, recorder = _durable(server.port, "twice", "/topic/nacktwice")
    fill(server.port, "/topic/nacktwice", ["0", "1", "2"], persistent="true")
    first, second, third = recorder.wait_for_messages(3)
    subscriber.nack(first.headers["ack"])
    recorder.wait_for_messages(4)
    subscriber.nack(second.headers["ack"])  # redelivered after "0"'s copy
    recorder.wait_for_messages(5)
    subscriber.ack(third.headers["ack"], receipt="a")  # "0" and "1" left unacknowledged
    assert recorder.wait_until(lambda: "a" in recorder.receipts)
    subscriber.disconnect()
    back, back_recorder = _durable(server.port, "twice", "/topic/nacktwice")
    back_recorder.wait_for_messages(2)
    time.sleep(LATE)
    assert back_recorder.bodies() == ["0", "1"]


def test_nack_on_a_durable_subscription_is_not_lost_when_the_subscriber_leaves(server):
    subscriber, recorder = _durable(server.port, "leaver", "/topic/nackleave")
    fill(server.port, "/topic/nackleave", ["0"], persistent="true")
    first = recorder.wait_for_messages(1)[0]
    subscriber.disconnect()
    back, back_recorder = _durable(server.port, "leaver", "/topic/nackleave")
    again = back_recorder.wait_for_messages(1)[0]
    assert again.body == first.body
    back.nack(again.headers["ack"], receipt="n")
    assert back_recorder.wait_for_messages(2)[1].body == "0"


def test_nack_on_a_topic_with_requeue_false_drops_the_message(server):
    subscriber, recorder = connect(server.port)
    _subscribed(subscriber, recorder, "/topic/nackdrop", "t", "client-individual")
    fill(server.port, "/topic/nackdrop", ["0", "1"])
    first, _ = recorder.wait_for_messages(2)
    subscriber.nack(first.headers["ack"], receipt="n", requeue="False")
    assert recorder.wait_until(lambda: "n" in recorder.receipts)
    time.sleep(LATE)
    assert recorder.bodies() == ["0", "1"]


def test_a_topic_nack_redelivers_to_that_subscriber_only(server):
    nacker, nacker_recorder = connect(server.port)
    _subscribed(nacker, nacker_recorder, "/topic/nackone", "n", "client-individual")
    other, other_recorder = connect(server.port)
    _subscribed(other, other_recorder, "/topic/nackone", "o", "client-individual")
    fill(server.port, "/topic/nackone", ["0"])
    first = nacker_recorder.wait_for_messages(1)[0]
    other_recorder.wait_for_messages(1)
    nacker.nack(first.headers["ack"])
    again = nacker_recorder.wait_for_messages(2)[1]
    assert again.body == "0" and again.headers["redelivered"] == "true"
    time.sleep(LATE)
    assert other_recorder.bodies() == ["0"]


# -- requeue and redelivered, as stomp.py and RabbitMQ spell them -------------------------


def test_requeue_false_is_read_whatever_its_case(server):
    consumer, recorder = connect(server.port)
    _subscribed(consumer, recorder, "/queue/requeuecase", "1", "client-individual")
    fill(server.port, "/queue/requeuecase", ["0", "1"])
    first, second = recorder.wait_for_messages(2)
    consumer.nack(first.headers["ack"], receipt="n", requeue="False")
    assert recorder.wait_until(lambda: "n" in recorder.receipts)
    time.sleep(LATE)
    assert recorder.bodies() == ["0", "1"]  # dropped, not redelivered


def test_first_deliveries_say_redelivered_false(server):
    consumer, recorder = connect(server.port)
    _subscribed(consumer, recorder, "/queue/firsttime", "1", "client-individual")
    fill(server.port, "/queue/firsttime", ["0"])
    first = recorder.wait_for_messages(1)[0]
    assert first.headers["redelivered"] == "false"
    consumer.nack(first.headers["ack"])
    assert recorder.wait_for_messages(2)[1].headers["redelivered"] == "true"


# -- frames of one connection take effect in the order they came -----------------------------


def _frames_until_receipt(client: RawClient, receipt: str) -> list:
    frames = []
    while True:
        frame = client.next_frame()
        if frame.command == "RECEIPT" and frame.headers["receipt-id"] == receipt:
            return frames
        frames.append(frame)


def _frames_until_quiet(client: RawClient) -> list:
    """Every frame that arrives until none has for ``LATE`` seconds."""
    frames = []
    while True:
        try:
            frames.append(client.next_frame(timeout=LATE))
        except AssertionError:
            return frames


def test_a_message_sent_before_a_subscription_never_reaches_it(server):
    for attempt in range(20):
        topic = f"/topic/order{attempt}"
        client = RawClient(server.port)
        client.connect()
        client.send(
            f"SUBSCRIBE\nid:s0\ndestination:{topic}\nreceipt:r0\n\n\0"
            f"UNSUBSCRIBE\nid:s0\n\n\0"
            f"SEND\ndestination:{topic}\n\nbefore\0"
            f"SUBSCRIBE\nid:s1\ndestination:{topic}\nreceipt:r1\n\n\0".encode()
        )
        frames = _frames_until_receipt(client, "r1")
        assert [f.command for f in frames] == ["RECEIPT"], frames  # r0 only
        client.send(f"SEND\ndestination:{topic}\n\nafter\0".encode())
        message = client.next_frame()
        assert (message.command, message.body) == ("MESSAGE", b"after")
        client.close()
    time.sleep(0.1)


def test_a_durable_subscription_keeps_messages_sent_after_it_on_the_same_connection(server):
    client = RawClient(server.port)
    client.send(b"CONNECT\naccept-version:1.2\nhost:h\nclient-id:ordered\n\n\0")
    assert client.next_frame().command == "CONNECTED"
    client.send(
        b"SUBSCRIBE\nid:d\ndestination:/topic/dorder\nactivemq.subscriptionName:d\n\n\0"
        b"SEND\ndestination:/topic/dorder\npersistent:true\n\nafter\0"
        b"UNSUBSCRIBE\nid:d\nreceipt:u\n\n\0"
    )
    live = _frames_until_receipt(client, "u")
    client.send(b"SUBSCRIBE\nid:d2\ndestination:/topic/dorder\nactivemq.subscriptionName:d\n\n\0")
    replayed = _frames_until_quiet(client)
    # Delivered once: live if it was written before the UNSUBSCRIBE, else from the store.
    got = [(f.command, f.body) for f in live + replayed]
    assert got == [("MESSAGE", b"after")], got


def test_nuls_and_eols_between_frames_are_accepted(server):
    client = RawClient(server.port)
    client.connect()
    client.send(
        b"SUBSCRIBE\nid:s\ndestination:/queue/nuls\nreceipt:a\n\n\0\n\0\0\r\n"
        b"SEND\ndestination:/queue/nuls\n\nhello\0\0\n"
        b"SEND\ndestination:/queue/nuls\ncontent-length:2\n\nhi\0\0\0"
    )
    frames = [client.next_frame() for _ in range(3)]
    assert [f.command for f in frames] == ["RECEIPT", "MESSAGE", "MESSAGE"]
    assert [f.body for f in frames[1:]] == [b"hello", b"hi"]


# -- headers a consumer reads are never framing ------------------------------------------------


def test_an_escaped_newline_never_reaches_a_stomp_1_0_consumer_raw(server):
    old = RawClient(server.port)
    old.send(b"CONNECT\nlogin:x\n\n\0")
    assert old.next_frame().command == "CONNECTED"
    old.decoder.version = "1.0"
    old.send(b"SUBSCRIBE\ndestination:/queue/inject\nreceipt:s\n\n\0")
    assert old.next_frame().command == "RECEIPT"
    producer = RawClient(server.port)
    producer.connect()
    producer.send(b"SEND\ndestination:/queue/inject\nevil:v\\ncontent-length:0\n\nbody\0")
    producer.send(b"SEND\ndestination:/queue/inject\n\nsecond\0")
    first, second = old.next_frame(), old.next_frame()
    assert (first.command, first.body) == ("MESSAGE", b"body")
    assert first.headers["evil"] == "v\\ncontent-length:0"  # escaped, as RabbitMQ does
    assert (second.command, second.body) == ("MESSAGE", b"second")
    assert b"\nevil:v\ncontent-length" not in old.raw


def test_a_nul_in_a_destination_name_is_refused(server):
    client = RawClient(server.port)
    client.connect()
    client.send(b"SEND\ndestination:/queue/a\0b\ncontent-length:1\nreceipt:r\n\nx\0")
    frame = client.next_frame()
    assert frame.command == "ERROR"
    assert frame.headers["receipt-id"] == "r"
    assert "destination" in frame.headers["message"]


# -- a durable SUBSCRIBE's receipt follows its registration -----------------------------------


def test_persistent_messages_published_after_a_durable_subscribe_receipt_are_kept(server):
    for attempt in range(5):
        topic = f"/topic/race{attempt}"
        producer, producer_recorder = connect(server.port)
        subscriber, _ = _durable(server.port, f"racer{attempt}", topic)
        for i in range(20):  # at once after the receipt, from another connection
            producer.send(topic, str(i), headers={"persistent": "true"}, receipt=str(i))
        receipts = producer_recorder.receipts
        assert producer_recorder.wait_until(lambda r=receipts: len(r) == 20)
        subscriber.disconnect()
        back, back_recorder = _durable(server.port, f"racer{attempt}", topic)
        assert sorted(int(b) for b in (m.body for m in back_recorder.wait_for_messages(20))) == (
            list(range(20))
        )
        back.disconnect()
        producer.disconnect()


# -- a cumulative ACK covers what the client received before it ----------------------------


def test_a_cumulative_ack_covers_what_was_written_before_it_whatever_the_egress_priority(
    server,
):
    producer, producer_recorder = connect(server.port)
    producer.send("/queue/cumulative", "first", receipt="1")
    producer.send("/queue/cumulative", "second", headers={"class-of-service": "3"}, receipt="2")
    assert producer_recorder.wait_until(lambda: len(producer_recorder.receipts) == 2)
    consumer, recorder = connect(server.port)
    _subscribed(consumer, recorder, "/queue/cumulative", "c", "client")
    received = recorder.wait_for_messages(2)
    # Delivered in order, but the class of service 3 message's egress queue (D-3) is
    # written before the other's (D-1): it is received first.
    assert [m.body for m in received] == ["second", "first"]
    consumer.ack(received[-1].headers["ack"], receipt="all")
    assert recorder.wait_until(lambda: "all" in recorder.receipts)
    consumer.disconnect()
    again, again_recorder = connect(server.port)
    _subscribed(again, again_recorder, "/queue/cumulative", "d")
    time.sleep(LATE)
    assert again_recorder.bodies() == []


def test_an_ack_naming_the_wrong_subscription_says_so(server):
    client = RawClient(server.port)
    client.connect("1.1")
    _raw_subscribed(client, "/queue/wrongsub", "client-individual")
    fill(server.port, "/queue/wrongsub", ["0"])
    message = client.next_frame()
    message_id = message.headers["message-id"]
    client.send(f"ACK\nsubscription:other\nmessage-id:{message_id}\nreceipt:r\n\n\0".encode())
    error = client.next_frame()
    assert error.command == "ERROR" and error.headers["receipt-id"] == "r"
    assert "on subscription 'other'" in error.body.decode()
    assert "awaits acknowledgement on another subscription" in error.body.decode()
