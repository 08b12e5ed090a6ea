"""A DISCONNECT's receipt covers the acknowledgements sent before it, as it covers the
SENDs: once it arrives, a kill -9 loses none of them (a real server process, real
sockets, its store on disk)."""

from __future__ import annotations

from pathlib import Path

from tests.integration.clients import RawClient
from tests.reliability.serverproc import ServerProcess

ROUNDS = 3  # a receipt sent before the ACKs' commit loses the race to the kill most times


def produce(port: int, queue: str, bodies: list[str]) -> None:
    client = RawClient(port)
    try:
        client.connect()
        for body in bodies:
            client.send(
                f"SEND\ndestination:{queue}\npersistent:true\nreceipt:{body}\n\n{body}\0".encode()
            )
            assert client.next_frame(timeout=30).command == "RECEIPT"
    finally:
        client.close()


def consume(port: int, queue: str, count: int, acknowledge: int) -> list[str]:
    """Receive ``count`` messages (client-individual), ACK the first ``acknowledge`` of
    them without receipts, then DISCONNECT with one and wait for it; the bodies."""
    client = RawClient(port)
    try:
        client.connect()
        client.send(f"SUBSCRIBE\nid:s\ndestination:{queue}\nack:client-individual\n\n\0".encode())
        frames = [client.next_frame(timeout=30) for _ in range(count)]
        assert all(frame.command == "MESSAGE" for frame in frames), frames
        for frame in frames[:acknowledge]:
            client.send(f"ACK\nid:{frame.headers['ack']}\n\n\0".encode())
        client.send(b"DISCONNECT\nreceipt:bye\n\n\0")
        reply = client.next_frame(timeout=30)
        assert reply.command == "RECEIPT" and reply.headers["receipt-id"] == "bye", reply
    finally:
        client.close()
    return [frame.body.decode() for frame in frames]


def test_acknowledgements_before_a_disconnects_receipt_survive_a_kill(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    servers = [ServerProcess.start(data, tmp_path / "server-0.log")]
    try:
        for turn in range(ROUNDS):
            queue = f"/queue/disconnect.acks.{turn}"
            bodies = [f"r{turn}-{n}" for n in range(3)]
            produce(servers[-1].port, queue, bodies)
            assert consume(servers[-1].port, queue, 3, acknowledge=2) == bodies
            servers[-1].kill()  # at once: the receipt said the ACKs were done
            servers.append(ServerProcess.start(data, tmp_path / f"server-{turn + 1}.log"))
            # Only the unacknowledged message comes back; a later one shows that nothing
            # else is still on its way.
            produce(servers[-1].port, queue, ["later"])
            assert consume(servers[-1].port, queue, 2, acknowledge=2) == [bodies[2], "later"]
    finally:
        for server in servers:
            server.kill()
