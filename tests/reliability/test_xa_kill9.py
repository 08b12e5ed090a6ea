"""Prepared XA branches survive kill -9 with their messages and acknowledgements, and are
committed or rolled back from a new connection after the restart (docs/xa.md)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.integration.clients import connect, fill
from tests.integration.xaclient import XAResource
from tests.reliability.serverproc import Servers

pytestmark = pytest.mark.reliability


def _prepare(worker: XAResource, xid: str, taken: str, sent: str) -> None:
    """A branch that takes (acknowledges) the message ``taken`` from /queue/xa-in and sends
    ``sent`` to /queue/xa-out, prepared."""
    assert worker.wait(lambda: any(m.body == taken for m in worker.messages))
    message = next(m for m in worker.messages if m.body == taken)
    worker.start(xid)
    worker.send("/queue/xa-out", sent, xid, persistent="true")
    worker.connection.ack(message.headers["ack"], transaction=xid)
    worker.end(xid)
    worker.prepare(xid)


def _bodies(port: int, queue: str, count: int, selector: str | None = None) -> list[str]:
    """Every message the queue holds that ``selector`` selects (``count`` expected; a later
    one would show)."""
    consumer, recorder = connect(port)
    headers = {} if selector is None else {"selector": selector}
    consumer.subscribe(queue, id="d", ack="auto", headers=headers)
    recorder.wait_until(lambda: len(recorder.messages) >= count)
    time.sleep(0.5)
    bodies = recorder.bodies()
    consumer.disconnect()
    return bodies


def test_prepared_branches_survive_kill_9_and_are_finished_after_the_restart(
    servers: Servers, tmp_path: Path
):
    data = tmp_path / "data"
    server = servers(data, "first")
    producer, produced = connect(server.port)
    for body in ("for-commit", "for-rollback"):
        producer.send("/queue/xa-in", body, headers={"persistent": "true"}, receipt=body)
    assert produced.wait_until(lambda: len(produced.receipts) == 2)
    # One message at a time: the second comes once the first branch's prepare took the first.
    worker = XAResource(server.port)
    worker.connection.subscribe(
        "/queue/xa-in", id="w", ack="client-individual", headers={"activemq.prefetchSize": "1"}
    )
    _prepare(worker, "fmt1:gtrid-a:bq", "for-commit", "committed result")
    _prepare(worker, "fmt1:gtrid-b:bq", "for-rollback", "rolled-back result")
    server.kill()

    restarted = servers(data, "second")
    coordinator = XAResource(restarted.port)
    assert coordinator.recover() == ["fmt1:gtrid-a:bq", "fmt1:gtrid-b:bq"]
    # While prepared, what the branches took is nobody else's.
    assert _bodies(restarted.port, "/queue/xa-in", 0) == []
    assert _bodies(restarted.port, "/queue/xa-out", 0) == []
    coordinator.commit("fmt1:gtrid-a:bq")
    coordinator.rollback("fmt1:gtrid-b:bq")
    assert coordinator.recover() == []
    assert _bodies(restarted.port, "/queue/xa-out", 1) == ["committed result"]
    assert _bodies(restarted.port, "/queue/xa-in", 1) == ["for-rollback"]
    restarted.kill()

    # Finished for good: nothing comes back after another crash.
    third = servers(data, "third")
    assert XAResource(third.port).recover() == []
    assert _bodies(third.port, "/queue/xa-in", 0) == []
    assert _bodies(third.port, "/queue/xa-out", 0) == []


def test_a_prepared_branch_s_sends_come_back_after_the_restart_as_they_were_sent(
    servers: Servers, tmp_path: Path
):
    """A non-persistent SEND of a prepared branch stays non-persistent after a restart, and
    every SEND keeps the time the server received it; a message stored the ordinary way
    comes back as before. Seen through selectors on JMSDeliveryMode and JMSTimestamp."""
    data = tmp_path / "data"
    server = servers(data, "first")
    before = int(time.time() * 1000)
    fill(server.port, "/queue/xa-modes", ["stored"], persistent="true", kind="stored")
    worker = XAResource(server.port)
    worker.start("fmt1:modes:bq")
    worker.send("/queue/xa-modes", "non-persistent", "fmt1:modes:bq", kind="np")
    worker.send("/queue/xa-modes", "persistent", "fmt1:modes:bq", kind="p", persistent="true")
    worker.end("fmt1:modes:bq")
    worker.prepare("fmt1:modes:bq")
    received = int(time.time() * 1000)
    server.kill()

    restarted = servers(data, "second")
    XAResource(restarted.port).commit("fmt1:modes:bq")
    as_sent = (
        "(kind = 'np' AND JMSDeliveryMode = 'NON_PERSISTENT'"
        " OR kind IN ('p', 'stored') AND JMSDeliveryMode = 'PERSISTENT')"
        f" AND JMSTimestamp BETWEEN {before} AND {received}"
    )
    assert sorted(_bodies(restarted.port, "/queue/xa-modes", 3, as_sent)) == [
        "non-persistent",
        "persistent",
        "stored",
    ]
    assert _bodies(restarted.port, "/queue/xa-modes", 0) == []  # none was otherwise
