"""Transactions in their basic form: SENDs and ACKs held until COMMIT, dropped on ABORT."""

from __future__ import annotations

from tests.integration.clients import connect


def test_committed_sends_arrive_together_and_aborted_ones_never(server):
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/tx", id="1", headers={"receipt": "s"})
    assert recorder.wait_until(lambda: "s" in recorder.receipts)
    producer, producer_recorder = connect(server.port)
    producer.begin("t1")
    producer.send("/queue/tx", "a", transaction="t1")
    producer.send("/queue/tx", "b", transaction="t1", receipt="held")
    assert producer_recorder.wait_until(lambda: "held" in producer_recorder.receipts)
    assert recorder.messages == []
    producer.begin("t2")
    producer.send("/queue/tx", "never", transaction="t2")
    producer.abort("t2")
    producer.commit("t1")
    assert [m.body for m in recorder.wait_for_messages(2)] == ["a", "b"]
    producer.send("/queue/tx", "c", receipt="c")
    assert [m.body for m in recorder.wait_for_messages(3)] == ["a", "b", "c"]


def test_acks_in_an_aborted_transaction_are_not_applied(server):
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/txack", id="1", ack="client-individual", headers={"receipt": "s"})
    assert recorder.wait_until(lambda: "s" in recorder.receipts)
    producer, _ = connect(server.port)
    producer.send("/queue/txack", "x")
    producer.send("/queue/txack", "y")
    x, y = recorder.wait_for_messages(2)
    consumer.begin("t")
    consumer.ack(x.headers["ack"], transaction="t")
    consumer.abort("t")
    consumer.begin("u")
    consumer.ack(y.headers["ack"], transaction="u")
    consumer.commit("u", headers={"receipt": "committed"})
    assert recorder.wait_until(lambda: "committed" in recorder.receipts)
    consumer.disconnect()
    again, again_recorder = connect(server.port)
    again.subscribe("/queue/txack", id="1")
    assert [m.body for m in again_recorder.wait_for_messages(1)] == ["x"]


def test_open_transactions_are_dropped_when_the_client_goes_away(server):
    consumer, recorder = connect(server.port)
    consumer.subscribe("/topic/txgone", id="1", headers={"receipt": "s"})
    assert recorder.wait_until(lambda: "s" in recorder.receipts)
    producer, producer_recorder = connect(server.port)
    producer.begin("t")
    producer.send("/topic/txgone", "lost", transaction="t", receipt="r")
    assert producer_recorder.wait_until(lambda: "r" in producer_recorder.receipts)
    producer.disconnect()
    other, _ = connect(server.port)
    other.send("/topic/txgone", "after")
    assert [m.body for m in recorder.wait_for_messages(1)] == ["after"]
