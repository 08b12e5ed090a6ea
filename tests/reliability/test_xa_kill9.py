"""Prepared XA branches survive kill -9 with their messages and acknowledgements, and are
committed or rolled back from a new connection after the restart (docs/xa.md)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.integration.clients import connect
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


def _bodies(port: int, queue: str, count: int) -> list[str]:
    """Every message the queue holds (``count`` expected; a later one would show)."""
    consumer, recorder = connect(port)
    consumer.subscribe(queue, id="d", ack="auto")
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
