"""kill -9 around a transacted COMMIT (issue #8): a COMMIT's RECEIPT means every message of the
transaction survives, and a COMMIT cut by the kill leaves all of its messages or none.

One raw-socket producer sends thousands of persistent messages in one transaction and
COMMITs; the server gets SIGKILL the moment the COMMIT's RECEIPT is read (and, in the
other test, at once after the COMMIT is written, without waiting for anything). After a
restart on the same data a consumer drains the queue.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.integration.clients import TIMEOUT
from tests.reliability.load import CrashClient
from tests.reliability.serverproc import Servers
from wiremq.modules.stomp.encoder import encode_frame

pytestmark = pytest.mark.reliability

MESSAGES = 2000


def _send_transaction(client: CrashClient, queue: str, name: str, count: int) -> None:
    """BEGIN, ``count`` persistent SENDs in the transaction, COMMIT with a receipt."""
    frames = [encode_frame("BEGIN", [("transaction", name)])]
    frames += [
        encode_frame(
            "SEND",
            [("destination", queue), ("persistent", "true"), ("transaction", name)],
            f"{name}:{i}".encode(),
        )
        for i in range(count)
    ]
    frames.append(encode_frame("COMMIT", [("transaction", name), ("receipt", f"c-{name}")]))
    assert client.write(b"".join(frames))


def _drain(port: int, queue: str) -> list[str]:
    """Every body the queue holds, acknowledged; waits long enough to see a late one."""
    client = CrashClient(port)
    client.connect()
    client.write(
        encode_frame("SUBSCRIBE", [("id", "0"), ("destination", queue), ("ack", "client")])
    )
    bodies: list[str] = []
    while (frame := client.poll(2.0)) is not None:
        assert frame.command == "MESSAGE", frame
        bodies.append(frame.body.decode())
        client.write(encode_frame("ACK", [("id", frame.headers["ack"])]))
    return bodies


def test_every_message_of_a_receipted_commit_survives_kill_9(servers: Servers, tmp_path: Path):
    data = tmp_path / "data"
    server = servers(data, "first")
    producer = CrashClient(server.port)
    producer.connect()
    _send_transaction(producer, "/queue/tx-kill", "t1", MESSAGES)
    frame = producer.poll(TIMEOUT)
    assert frame is not None and frame.headers.get("receipt-id") == "c-t1", frame
    server.kill()  # the moment the COMMIT's RECEIPT arrived
    restarted = servers(data, "second")
    bodies = _drain(restarted.port, "/queue/tx-kill")
    assert sorted(bodies) == sorted(f"t1:{i}" for i in range(MESSAGES))
    assert bodies == [f"t1:{i}" for i in range(MESSAGES)]  # and in order


@pytest.mark.parametrize("delay", [0.0, 0.005, 0.02])
def test_a_commit_cut_by_kill_9_leaves_all_of_its_messages_or_none(
    servers: Servers, tmp_path: Path, delay: float
):
    data = tmp_path / "data"
    server = servers(data, "first")
    producer = CrashClient(server.port)
    producer.connect()
    _send_transaction(producer, "/queue/tx-cut", "t1", MESSAGES)
    time.sleep(delay)
    server.kill()
    restarted = servers(data, "second")
    bodies = _drain(restarted.port, "/queue/tx-cut")
    assert len(bodies) in (0, MESSAGES), f"{len(bodies)} of {MESSAGES} survived"
    if bodies:
        assert bodies == [f"t1:{i}" for i in range(MESSAGES)]
