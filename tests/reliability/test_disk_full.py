"""A full disk (issue 25, item 1): the data folder on a small tmpfs the test mounts.

A producer sends 64 KiB persistent messages, each with a receipt awaited, until
the server stops reading it (the free-disk watermark: flow control, not an
error). Another process then fills the filesystem to the last byte. While it is
full, a consumer receives and acknowledges half of what was receipted; the
server is killed (-9) and started again on the full disk, and a consumer drains
the rest. Once space comes back, a held producer goes on. Nothing receipted is
lost, nothing is delivered that was not sent.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.integration.clients import RawClient, free_port, until
from tests.integration.console import Api
from tests.reliability.serverproc import ServerProcess
from tests.tmpfs import MIB, fill_up, small_tmpfs

pytestmark = pytest.mark.reliability

DISK = 48 * MIB
BODY_BYTES = 64 * 1024
QUEUE = "/queue/disk.full"
HELD_AFTER = 4.0  # seconds without a receipt: the producer is held


def config(catchup: float) -> str:
    """config.xml, the databases catching up with the log every ``catchup`` seconds."""
    return f"""<wiremq>
  <Server packinterval="1"/>
  <WriteAheadLog segmentsize="{MIB}" catchupinterval="{catchup}"/>
  <DiskSpace minfreebytes="{12 * MIB}" resumefreebytes="{16 * MIB}"
             reservebytes="{6 * MIB}" checkinterval="0.1"/>
</wiremq>
"""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "disk", DISK) as mount:
        yield mount


def body(n: int) -> bytes:
    head = f"m-{n:06d}:".encode()
    return head + b"x" * (BODY_BYTES - len(head))


@dataclass
class Producer:
    """Persistent SENDs, each receipt awaited: until the server stops reading it (no
    receipt for ``HELD_AFTER`` s) or refuses a SEND (an ERROR)."""

    port: int
    first: int = 0
    receipted: list[int] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    waiting: int | None = None  # the SEND written whose receipt has not come
    client: RawClient | None = None

    def run_until_held(self, limit: int) -> None:
        client = self.client = RawClient(self.port)
        client.connect()
        for n in range(self.first, self.first + limit):
            frame = (
                f"SEND\ndestination:{QUEUE}\npersistent:true\nreceipt:r-{n}\n"
                f"content-length:{BODY_BYTES}\n\n"
            ).encode()
            self.waiting = n
            client.send(frame + body(n) + b"\0")
            if not self._receipt(n, HELD_AFTER):
                return
        self.waiting = None

    def _receipt(self, n: int, timeout: float) -> bool:
        assert self.client is not None
        try:
            frame = self.client.next_frame(timeout)
        except AssertionError:
            return False  # held: no receipt (and no error) within the time
        if frame.command == "ERROR":
            self.refused.append(frame.headers.get("message", ""))
            return False
        assert frame.command == "RECEIPT" and frame.headers["receipt-id"] == f"r-{n}", frame
        self.receipted.append(n)
        self.waiting = None
        return True

    def held_one_receipted(self, timeout: float) -> bool:
        """The held SEND got its receipt (the server reads the producer again)."""
        assert self.waiting is not None
        return self._receipt(self.waiting, timeout)


def consume(port: int, count: int, timeout: float = 20.0) -> list[int]:
    """Receive and acknowledge (client-individual, each ACK's receipt awaited at the end)
    up to ``count`` messages; the numbers received."""
    client = RawClient(port)
    client.connect()
    client.send(
        f"SUBSCRIBE\nid:s\ndestination:{QUEUE}\nack:client-individual\n"
        "consumerQueueEntriesSize:8\n\n\0".encode()
    )
    got: list[int] = []
    try:
        while len(got) < count:
            try:
                frame = client.next_frame(timeout)
            except AssertionError:
                break  # nothing more came
            assert frame.command == "MESSAGE", frame
            got.append(int(frame.body[2:8]))
            client.send(f"ACK\nid:{frame.headers['ack']}\n\n\0".encode())
        client.send(b"DISCONNECT\nreceipt:bye\n\n\0")
        last = client.next_frame()
        while last.command == "MESSAGE":  # sent before the DISCONNECT: not acknowledged
            last = client.next_frame()
        assert last.command == "RECEIPT", last  # every ACK before it was taken
    finally:
        client.close()
    return got


def state(admin: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/api/state", timeout=10) as reply:
        return json.loads(reply.read())


def metrics(admin: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=10) as reply:
        return reply.read().decode()


def disk_of(admin: int, store: str) -> dict:
    return next(d for d in state(admin)["disk"] if store in d["stores"])


@pytest.mark.parametrize(
    "catchup",
    [0.2, 60.0],
    ids=["databases-caught-up", "databases-behind-the-log"],
)
def test_a_full_disk_holds_producers_serves_consumers_and_restarts(small_disk, tmp_path, catchup):
    """With the databases behind the log (a catch-up that lagged), what they lack cannot
    be applied on the full disk: reads and the restart take it from the log."""
    data = small_disk / "data"
    data.mkdir()
    (data / "config.xml").write_text(config(catchup))
    admin = free_port()
    first = ServerProcess.start(data, tmp_path / "first.log", admin_port=admin)
    servers = [first]
    try:
        # Producers are held, not refused, before the disk is full.
        producer = Producer(first.port)
        producer.run_until_held(2000)
        receipted = list(producer.receipted)
        print(f"receipted {len(receipted)}, refused {len(producer.refused)}")
        assert not producer.refused, producer.refused
        assert producer.waiting is not None, "the producer was never held"
        assert len(receipted) > 100
        seen = disk_of(admin, "PersQueueFileStore")
        assert seen["producers_held"] is True and seen["used_bytes"] > DISK - 16 * MIB, seen
        assert seen["reserve_held"] is True, "the producers filled the disk past the reserve"
        assert 'wiremq_disk_free_bytes{store="PersQueueFileStore"}' in metrics(admin)

        # Another process fills the disk to the last byte.
        filler = small_disk / "filler"
        fill_up(filler)
        assert os.statvfs(small_disk).f_bavail == 0
        assert until(lambda: disk_of(admin, "wal")["reserve_held"] is False, timeout=10)

        # While it is full, a consumer gets and acknowledges half.
        half = len(receipted) // 2
        delivered_full = consume(first.port, half)
        print(f"delivered while full {len(delivered_full)} of {half}")
        assert delivered_full == receipted[:half]
        first.kill()

        # The server starts on the full disk and serves the rest.
        admin = free_port()
        again = ServerProcess.start(data, tmp_path / "again.log", admin_port=admin)
        servers.append(again)
        assert disk_of(admin, "wal")["producers_held"] is True
        assert os.statvfs(small_disk).f_bavail <= 6 * MIB  # what the reserve gave back
        rest = consume(again.port, len(receipted) - half)
        print(f"delivered after a restart while full {len(rest)}")
        assert delivered_full + rest == receipted, "lost or duplicated messages"

        # A producer held while the disk is full goes on once space comes back.
        late = Producer(again.port, first=10_000)
        late.run_until_held(50)
        assert late.waiting is not None and not late.refused, (late.receipted, late.refused)
        filler.unlink()
        if catchup > 1:  # the databases catch up again (live) now that there is space
            Api(admin).with_csrf().set_parameter("WriteAheadLog.catchupinterval", 0.2)
        assert late.held_one_receipted(10.0), "the held producer did not go on"
        print(f"held while full, then receipted: {late.receipted}")
        # Nothing else is left: the SEND held when the server was killed got no receipt
        # (it was not read, but if it had been, it could be stored).
        tail = consume(again.port, 100, timeout=5.0)
        assert [n for n in tail if n != producer.waiting] == late.receipted
    finally:
        for server in servers:
            server.kill()
        for server in servers:
            if "Traceback" in server.stderr():
                print(server.stderr()[-4000:])
