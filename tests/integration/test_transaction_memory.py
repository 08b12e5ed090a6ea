"""TransactionMemSizeManager in a real server: past uncommittedtxmemsizelimit a transaction
is discarded (its owner told at once and at its COMMIT), or, under NONE, producers wait."""

from __future__ import annotations

import time

from tests.integration.clients import connect, until
from tests.integration.test_flow_control import client_state, flow_state


def _limited(start_server, strategy: str):
    return start_server(
        **{
            "TransactionMemSizeManager.uncommittedtxmemsizelimit": "10000",
            "TransactionMemSizeManager.txmemsizereducestategy": strategy,
        }
    )


def test_the_largest_transaction_is_discarded_and_its_owner_told_at_once_and_at_commit(
    reactor, start_server
):
    server = _limited(start_server, "MAXBYTES")
    consumer, delivered = connect(server.port)
    consumer.subscribe("/queue/txm", id="1", headers={"receipt": "s"})
    assert delivered.wait_until(lambda: "s" in delivered.receipts)
    big, big_told = connect(server.port)
    small, small_told = connect(server.port)
    big.begin("big")
    for i in range(4):
        big.send("/queue/txm", "b" * 2000, transaction="big", receipt=f"b{i}")
    assert big_told.wait_until(lambda: len(big_told.receipts) == 4)
    small.begin("small")
    for i in range(2):
        small.send("/queue/txm", "s" * 1500, transaction="small", receipt=f"s{i}")
    assert big_told.wait_until(lambda: big_told.errors)  # 11,000 > 10,000: the largest goes
    (notice,) = big_told.errors
    assert notice.headers["message"] == "transaction discarded"
    assert notice.headers["transaction"] == "big"
    assert "MAXBYTES" in notice.body and "uncommittedtxmemsizelimit (10000)" in notice.body
    assert big.is_connected(), "told at once, the connection goes on"
    big.send("/queue/txm", "more", transaction="big", receipt="after")  # held nowhere
    assert big_told.wait_until(lambda: "after" in big_told.receipts)
    state = flow_state(reactor, server)["transactions"]
    assert state["bytes"] == 3000 and state["discards"] == {"MAXBYTES": 1}
    big.commit("big", headers={"receipt": "commit-big"})
    assert big_told.wait_until(lambda: len(big_told.errors) == 2)
    error = big_told.errors[1]
    assert error.headers["message"] == "transaction discarded"
    assert error.headers["receipt-id"] == "commit-big" and "'big'" in error.body
    small.commit("small", headers={"receipt": "commit-small"})
    assert small_told.wait_until(lambda: "commit-small" in small_told.receipts)
    assert delivered.wait_until(lambda: len(delivered.messages) == 2)
    time.sleep(0.3)  # nothing of the discarded transaction comes late
    assert [m.body[0] for m in delivered.messages] == ["s", "s"]


def test_under_none_transacted_senders_wait_until_memory_is_freed(reactor, start_server):
    server = _limited(start_server, "NONE")
    holder, held = connect(server.port)
    holder.begin("h")
    holder.send("/queue/txn", "h" * 9000, transaction="h", receipt="h")
    assert held.wait_until(lambda: "h" in held.receipts)
    sender, sent = connect(server.port)
    sender.begin("t")
    sender.send("/queue/txn", "t" * 2000, transaction="t", receipt="t1")  # over: it waits
    assert sent.wait_until(lambda: "t1" in sent.receipts)
    sender.send("/queue/txn", "more", transaction="t", receipt="t2")
    time.sleep(0.5)
    assert "t2" not in sent.receipts and not held.errors and not sent.errors
    state = flow_state(reactor, server)
    stopped = [c for c in state["clients"] if c["stopped_by"] == ["transaction memory"]]
    assert len(stopped) == 1 and state["transactions"]["producers_stopped"] == 1
    holder.abort("h")
    assert sent.wait_until(lambda: "t2" in sent.receipts)
    session = stopped[0]["session"]
    assert until(lambda: client_state(flow_state(reactor, server), session)["reading"])
