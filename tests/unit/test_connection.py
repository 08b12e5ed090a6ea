"""The client connection: receipts, errors and the order in which a client's frames act.

On the ``Net`` of ``tests/unit/net.py``: a real core on a fake clock, simulated sockets.
"""

from __future__ import annotations

import pytest

from tests.unit.net import PERSISTENT, Peer, frame, send_frame


def _receipts(peer: Peer) -> list[str]:
    return [f.headers["receipt-id"] for f in peer.writer.frames if f.command == "RECEIPT"]


@pytest.mark.parametrize(
    ("command", "headers"),
    [
        ("SUBSCRIBE", {"destination": "/queue/a", "id": "1"}),
        ("BEGIN", {"transaction": "t"}),
    ],
)
def test_a_receipt_is_sent_when_asked(make_net, command, headers):
    peer = Peer(make_net(), "client")
    peer.feed(frame(command, {**headers, "receipt": "r:1"}))
    assert _receipts(peer) == ["r:1"]


def test_unsubscribe_commit_and_abort_are_receipted(make_net):
    peer = Peer(make_net(), "client")
    peer.subscribe("/queue/a")
    peer.feed(
        frame("UNSUBSCRIBE", {"id": "1", "receipt": "u"}),
        frame("BEGIN", {"transaction": "t"}),
        frame("COMMIT", {"transaction": "t", "receipt": "c"}),
        frame("BEGIN", {"transaction": "t2"}),
        frame("ABORT", {"transaction": "t2", "receipt": "a"}),
    )
    assert _receipts(peer) == ["u", "c", "a"]


def test_sends_around_other_frames_in_one_read_all_act_in_order(make_net):
    net = make_net()
    consumer = Peer(net, "consumer")
    consumer.subscribe("/queue/q")
    consumer.subscribe("/topic/t", sub_id="2")
    producer = Peer(net, "producer")
    producer.feed(
        send_frame("/queue/q", "a")
        + frame("BEGIN", {"transaction": "x"})
        + send_frame("/topic/t", "b")
        + send_frame("/queue/q", "c", {"transaction": "x"})
        + send_frame("/queue/q", "d")
        + frame("COMMIT", {"transaction": "x", "receipt": "done"})
        + send_frame("/topic/t", "e")
    )
    by_subscription: dict[str, list[str]] = {}
    for message in consumer.messages:
        by_subscription.setdefault(message.headers["subscription"], []).append(
            message.body.decode()
        )
    assert by_subscription == {"1": ["a", "d", "c"], "2": ["b", "e"]}
    assert _receipts(producer) == ["done"] and producer.errors == []


def test_an_error_waits_for_the_work_sent_before_it(make_net):
    net = make_net(persistent=True)
    producer = Peer(net, "producer")
    net.workers_held = True  # the store is slow: commits wait
    producer.feed(
        send_frame("/queue/p", "kept", {**PERSISTENT, "receipt": "r1"})
        + frame("SEND", {"receipt": "bad"})  # no destination
    )
    assert producer.writer.frames == []  # the ERROR waits for r1's commit
    net.workers_held = False
    net.settle()
    assert [f.command for f in producer.writer.frames] == ["RECEIPT", "ERROR"]
    error = producer.writer.frames[-1]
    assert error.headers["receipt-id"] == "bad"
    assert error.headers["message"] == "missing destination header"
    assert net.core.store.count("/queue/p")[0] == 1


def test_a_refusal_reaches_a_client_that_already_said_disconnect(make_net):
    net = make_net(destinations={"/queue/small": {"maxmsgsize": 10}}, persistent=True)
    producer = Peer(net, "producer")
    producer.feed(
        send_frame("/queue/small", "x" * 100, {**PERSISTENT, "receipt": "big"})
        + frame("DISCONNECT", {"receipt": "bye"})
    )
    [error] = producer.errors
    assert error.headers["receipt-id"] == "big"
    assert "bye" not in _receipts(producer)
    assert producer.writer.closed


@pytest.mark.parametrize("destination", ["/elsewhere/a", "/queue/a*"])
def test_a_destination_that_is_no_queue_or_topic_is_refused_naming_the_receipt(
    make_net, destination
):
    producer = Peer(make_net(), "producer")
    producer.feed(send_frame(destination, "x", {"receipt": "r"}))
    [error] = producer.errors
    assert error.headers["receipt-id"] == "r"
    assert error.headers["message"] in ("unknown destination", "invalid destination")


def test_disconnect_receipt_comes_after_the_earlier_receipts_and_nothing_more_is_read(
    make_net,
):
    net = make_net(persistent=True)
    producer = Peer(net, "producer")
    net.workers_held = True
    producer.feed(
        send_frame("/queue/p", "1", {**PERSISTENT, "receipt": "r1"})
        + frame("DISCONNECT", {"receipt": "bye"})
        + send_frame("/queue/p", "never", PERSISTENT)
    )
    assert _receipts(producer) == []
    net.workers_held = False
    net.settle()
    assert _receipts(producer) == ["r1", "bye"]
    assert producer.writer.closed
    assert net.core.store.count("/queue/p")[0] == 1


def test_a_refused_destination_in_a_batch_does_not_send_the_next_message_elsewhere(make_net):
    """Admission resolves a run of one destination once: a name it refused must not leave
    the run's previous destination in place for the next message of that name."""
    net = make_net()
    consumer = Peer(net, "consumer")
    consumer.subscribe("/queue/a")
    producer = Peer(net, "producer")
    producer.feed(
        send_frame("/queue/a", "first")
        + send_frame("/queue/b*", "refused")
        + send_frame("/queue/b*", "refused again")
    )
    assert consumer.bodies() == ["first"]
    assert [e.headers["message"] for e in producer.errors] == ["invalid destination"]
