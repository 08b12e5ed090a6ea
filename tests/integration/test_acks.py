"""Ack modes, NACK, and redelivery of what a consumer did not acknowledge."""

from __future__ import annotations

from tests.integration.clients import RawClient, connect, fill


def _subscribed(connection, recorder, destination, sub_id="1", ack="auto"):
    connection.subscribe(destination, id=sub_id, ack=ack, headers={"receipt": f"s-{sub_id}"})
    assert recorder.wait_until(lambda: f"s-{sub_id}" in recorder.receipts)


def test_client_ack_is_cumulative_and_the_rest_is_redelivered(server):
    first, first_recorder = connect(server.port)
    _subscribed(first, first_recorder, "/queue/cum", ack="client")
    fill(server.port, "/queue/cum", [str(i) for i in range(5)])
    messages = first_recorder.wait_for_messages(5)
    first.ack(messages[2].headers["ack"], receipt="acked")
    assert first_recorder.wait_until(lambda: "acked" in first_recorder.receipts)
    first.disconnect()
    second, second_recorder = connect(server.port)
    _subscribed(second, second_recorder, "/queue/cum", ack="client")
    redelivered = second_recorder.wait_for_messages(2)
    assert [m.body for m in redelivered] == ["3", "4"]
    assert all(m.headers["redelivered"] == "true" for m in redelivered)


def test_client_individual_ack_acknowledges_only_that_message(server):
    first, first_recorder = connect(server.port)
    _subscribed(first, first_recorder, "/queue/ind", ack="client-individual")
    fill(server.port, "/queue/ind", [str(i) for i in range(4)])
    messages = first_recorder.wait_for_messages(4)
    first.ack(messages[2].headers["ack"], receipt="acked")
    assert first_recorder.wait_until(lambda: "acked" in first_recorder.receipts)
    first.disconnect()
    second, second_recorder = connect(server.port)
    _subscribed(second, second_recorder, "/queue/ind", ack="client-individual")
    assert [m.body for m in second_recorder.wait_for_messages(3)] == ["0", "1", "3"]


def test_consumer_that_drops_goes_to_another_live_consumer(server):
    stays, stays_recorder = connect(server.port)
    _subscribed(stays, stays_recorder, "/queue/drop", ack="client-individual")
    drops = RawClient(server.port)
    drops.connect()
    drops.send(b"SUBSCRIBE\nid:x\ndestination:/queue/drop\nack:client\nreceipt:s\n\n\0")
    assert drops.next_frame().command == "RECEIPT"
    fill(server.port, "/queue/drop", [str(i) for i in range(10)])
    got = [drops.next_frame() for _ in range(5)]
    assert all(frame.command == "MESSAGE" for frame in got)
    drops.close()  # abrupt: no DISCONNECT, nothing acknowledged
    stays_recorder.wait_for_messages(10)
    redelivered = [m for m in stays_recorder.messages if m.headers.get("redelivered") == "true"]
    assert sorted(m.body for m in redelivered) == sorted(f.body.decode() for f in got)
    assert sorted(int(m.body) for m in stays_recorder.messages) == list(range(10))


def test_unsubscribe_with_unacked_messages_redelivers_them(server):
    consumer, recorder = connect(server.port)
    _subscribed(consumer, recorder, "/queue/unsub", sub_id="a", ack="client")
    fill(server.port, "/queue/unsub", [str(i) for i in range(3)])
    recorder.wait_for_messages(3)
    consumer.unsubscribe("a")
    _subscribed(consumer, recorder, "/queue/unsub", sub_id="b", ack="auto")
    again = recorder.wait_for_messages(6)[3:]
    assert [m.body for m in again] == ["0", "1", "2"]
    assert all(m.headers["redelivered"] == "true" for m in again)


def test_nack_requeues_the_message_as_redelivered(server):
    consumer, recorder = connect(server.port)
    _subscribed(consumer, recorder, "/queue/nack", ack="client-individual")
    fill(server.port, "/queue/nack", ["0"])
    first = recorder.wait_for_messages(1)[0]
    assert first.headers["redelivered"] == "false"
    consumer.nack(first.headers["ack"])
    again = recorder.wait_for_messages(2)[1]
    assert again.body == first.body
    assert again.headers["message-id"] == first.headers["message-id"]
    assert again.headers["redelivered"] == "true"
    consumer.ack(again.headers["ack"], receipt="done")
    assert recorder.wait_until(lambda: "done" in recorder.receipts)
    assert not recorder.errors


def test_nack_with_requeue_false_drops_the_message(server):
    consumer, recorder = connect(server.port)
    _subscribed(consumer, recorder, "/queue/nackdrop", ack="client-individual")
    fill(server.port, "/queue/nackdrop", ["0", "1"])
    first, second = recorder.wait_for_messages(2)
    consumer.nack(first.headers["ack"], receipt="n", requeue="false")
    assert recorder.wait_until(lambda: "n" in recorder.receipts)
    consumer.disconnect()
    again, again_recorder = connect(server.port)
    _subscribed(again, again_recorder, "/queue/nackdrop")
    assert [m.body for m in again_recorder.wait_for_messages(1)] == [second.body]


def test_stomp_1_1_ack_by_message_id_and_subscription(server):
    consumer, recorder = connect(server.port, "1.1")
    _subscribed(consumer, recorder, "/queue/ack11", sub_id="s", ack="client-individual")
    fill(server.port, "/queue/ack11", ["0"])
    message = recorder.wait_for_messages(1)[0]
    consumer.ack(message.headers["message-id"], "s", receipt="acked")
    assert recorder.wait_until(lambda: "acked" in recorder.receipts)
    assert not recorder.errors


def test_ack_of_an_unknown_message_is_an_error(server):
    client = RawClient(server.port)
    client.connect()
    client.send(b"SUBSCRIBE\nid:1\ndestination:/queue/unknown-ack\nack:client\n\n\0")
    client.send(b"ACK\nid:no-such-message@1\nreceipt:a\n\n\0")
    error = client.next_frame()
    assert error.command == "ERROR"
    assert error.headers["message"] == "unknown message"
    assert error.headers["receipt-id"] == "a"
    assert client.wait_closed()


def test_acks_read_together_act_in_order_up_to_a_refused_one(server):
    """ACKs that arrive in one read act as one run: those before a refused one take
    effect and are answered, the ERROR names the refused one, and those after it do not
    act (their message goes to the next consumer)."""
    client = RawClient(server.port)
    client.connect()
    client.send(b"SUBSCRIBE\nid:1\ndestination:/queue/ack-run\nack:client-individual\n\n\0")
    fill(server.port, "/queue/ack-run", ["0", "1", "2"])
    acks = [client.next_frame().headers["ack"] for _ in range(3)]
    client.send(
        b"".join(
            f"ACK\nid:{ack}\nreceipt:{receipt}\n\n\0".encode()
            for ack, receipt in [
                (acks[0], "a0"),
                (acks[1], "a1"),
                ("nope@1", "bad"),
                (acks[2], "a2"),
            ]
        )
    )
    frames = [client.next_frame() for _ in range(3)]
    assert [(f.command, f.headers.get("receipt-id")) for f in frames] == [
        ("RECEIPT", "a0"),
        ("RECEIPT", "a1"),
        ("ERROR", "bad"),
    ]
    assert frames[2].headers["message"] == "unknown message"
    assert client.wait_closed()
    again, recorder = connect(server.port)
    _subscribed(again, recorder, "/queue/ack-run")
    [message] = recorder.wait_for_messages(1)
    assert (message.body, message.headers["redelivered"]) == ("2", "true")
    assert not recorder.wait_until(lambda: len(recorder.messages) > 1, timeout=1.0)
