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


TOO_BIG = '<wiremq><Destination name="/queue/small" maxmsgsize="100"/></wiremq>'


def test_a_refused_persistent_send_fails_its_commit_and_nothing_of_it_is_applied(
    start_server,
):
    server = start_server(TOO_BIG)
    consumer, recorder = connect(server.port)
    for destination in ("/queue/small", "/topic/tx-side"):
        consumer.subscribe(destination, id=destination, headers={"receipt": destination})
        assert recorder.wait_until(lambda d=destination: d in recorder.receipts)
    producer, producer_recorder = connect(server.port)
    producer.begin("t")
    persistent = {"persistent": "true"}
    producer.send("/queue/small", "fits", headers=persistent, transaction="t", receipt="s1")
    producer.send("/topic/tx-side", "volatile", transaction="t", receipt="s2")
    producer.send("/queue/small", "x" * 500, headers=persistent, transaction="t", receipt="s3")
    assert producer_recorder.wait_until(
        lambda: {"s1", "s2", "s3"} <= set(producer_recorder.receipts)
    )
    producer.commit("t", headers={"receipt": "c"})
    assert producer_recorder.wait_until(lambda: producer_recorder.errors)
    [error] = producer_recorder.errors
    assert error.headers["receipt-id"] == "c"
    assert error.headers["message"] == "transaction failed"
    assert "message 3 of transaction 't' (receipt 's3')" in error.body
    assert "message too large" in error.body
    assert "nothing of the transaction was applied" in error.body
    assert "c" not in producer_recorder.receipts
    assert not recorder.wait_until(lambda: recorder.messages, timeout=1.5)
    assert server.store.count("/queue/small") == (0, 0)


def test_the_acknowledgements_of_a_failed_commit_are_given_back(start_server):
    server = start_server(TOO_BIG)
    producer, _ = connect(server.port)
    producer.send("/queue/work", "job", headers={"persistent": "true"}, receipt="r")
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/work", id="1", ack="client-individual")
    [job] = recorder.wait_for_messages(1)
    consumer.begin("t")
    consumer.ack(job.headers["ack"], transaction="t")
    consumer.send("/queue/small", "x" * 500, headers={"persistent": "true"}, transaction="t")
    consumer.commit("t", headers={"receipt": "c"})
    assert recorder.wait_until(lambda: recorder.errors)
    assert recorder.errors[0].headers["message"] == "transaction failed"
    other, other_recorder = connect(server.port)
    other.subscribe("/queue/work", id="1", ack="client-individual")
    [again] = other_recorder.wait_for_messages(1)
    assert again.body == "job" and again.headers["redelivered"] == "true"
    assert server.store.count("/queue/work")[0] == 1  # the ACK was not applied
