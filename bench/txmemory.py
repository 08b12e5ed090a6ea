"""wiremq transaction memory benchmark (issue 12): open transactions under each strategy.

For each TransactionMemSizeManager strategy, against a fresh server of its own
(``MemWatch.maxmemory`` 256 MiB, ``uncommittedtxmemsizelimit`` 32 MiB): 50
clients each hold a 1 MiB transaction open (16 SENDs of 64 KiB), then 8 flood
clients send further transacted messages as fast as the server reads them
(transactions of 8 MiB, committed, then the next) for ``--flood`` seconds;
then the holders COMMIT and everyone leaves. It prints, per strategy:

- the server's peak RSS (sampled every 10 ms), against maxmemory;
- the transactions discarded (by the server's ``transaction.discarded`` events),
  holders' and flood's, and the flood's bytes committed;
- the time to free memory: from the SEND that took the open transactions over
  the limit to its owner's or victim's ERROR notice (the discard is immediate:
  the time for the server to take the decision and say so), and after
  everyone left, the time until the server's RSS is back under half of
  maxmemory (MemWatch's level 0: its extra collections and trims give the
  memory back).

    .venv/bin/python bench/txmemory.py [--strategy NAME ...] [--flood SECONDS]
"""

from __future__ import annotations

import argparse
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from server_proc import ManagedServer, PeriodicSampler

MIB = 2**20
MAXMEMORY = 256 * MIB
LIMIT = 32 * MIB
PIECE = 64 * 1024
HOLDERS = 50
HOLDER_PIECES = 16  # 1 MiB each
FLOODERS = 8
FLOOD_PIECES = 128  # 8 MiB per flood transaction
STRATEGIES = ("MAXBYTES", "MAXMESSAGES", "ALL", "NONE", "OLDESTTX", "YOUNGESTTX")


class Rss(PeriodicSampler):
    def __init__(self, pid: int) -> None:
        super().__init__(0.01, "rss")
        self.process = psutil.Process(pid)
        self.peak = 0
        self.now = 0

    def sample(self) -> None:
        try:
            self.now = self.process.memory_info().rss
        except psutil.Error:
            return
        self.peak = max(self.peak, self.now)


class Client:
    """A raw STOMP connection that notes when ERRORs and RECEIPTs arrive."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=120)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.receipts: dict[str, float] = {}
        self.notices: dict[str, float] = {}  # transaction -> when its discard notice came
        self.closed = False
        self._changed = threading.Condition()
        self.sock.sendall(b"CONNECT\naccept-version:1.2\nhost:x\nheart-beat:0,0\n\n\0")
        threading.Thread(target=self._read, daemon=True).start()
        self.wait(lambda: "connected" in self.receipts)

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                with self._changed:
                    self.closed = True
                    self._changed.notify_all()
                return
            buffer += data
            while b"\0" in buffer:
                frame, _, buffer = buffer.partition(b"\0")
                head = frame.lstrip(b"\n").split(b"\n\n", 1)[0].decode()
                lines = head.split("\n")
                headers = dict(line.split(":", 1) for line in lines[1:] if ":" in line)
                with self._changed:
                    now = time.monotonic()
                    if lines[0] == "CONNECTED":
                        self.receipts["connected"] = now
                    elif lines[0] == "RECEIPT":
                        self.receipts[headers["receipt-id"]] = now
                    elif lines[0] == "ERROR" and "transaction" in headers:
                        self.notices[headers["transaction"]] = now
                    self._changed.notify_all()

    def wait(self, condition, timeout: float = 120) -> bool:  # type: ignore[no-untyped-def]
        with self._changed:
            return self._changed.wait_for(condition, timeout)

    def send(self, data: bytes) -> bool:
        try:
            self.sock.sendall(data)
            return True
        except OSError:
            return False

    def close(self) -> None:
        self.sock.close()


def piece(destination: bytes, transaction: str, receipt: str | None = None) -> bytes:
    extra = b"receipt:%s\n" % receipt.encode() if receipt else b""
    return (
        b"SEND\ndestination:%s\ntransaction:%s\n%scontent-length:%d\n\n"
        % (destination, transaction.encode(), extra, PIECE)
        + b"x" * PIECE
        + b"\0"
    )


@dataclass
class Flood:
    port: int
    number: int
    stop: threading.Event
    committed: int = 0  # bytes of committed flood transactions
    sent: dict[str, list[float]] = field(default_factory=dict)  # transaction -> SEND times
    notices: dict[str, float] = field(default_factory=dict)

    def run(self) -> None:
        round_ = 0
        client = Client(self.port)
        while not self.stop.is_set():
            name = f"f{self.number}-{round_}"
            round_ += 1
            ok = client.send(b"BEGIN\ntransaction:%s\n\n\0" % name.encode())
            times = self.sent[name] = []
            for _ in range(FLOOD_PIECES):
                if not ok or self.stop.is_set() or name in client.notices:
                    break  # discarded: it stops at once, and its COMMIT will fail
                times.append(time.monotonic())
                ok = client.send(piece(b"/queue/flood", name))
            if not ok:
                break
            client.send(
                b"COMMIT\ntransaction:%s\nreceipt:%s\n\n\0" % (name.encode(), name.encode())
            )
            client.wait(lambda n=name, c=client: n in c.receipts or c.closed)
            if name in client.receipts:
                self.committed += FLOOD_PIECES * PIECE
            if client.closed:  # its COMMIT failed (discarded): a new connection
                self.notices.update(client.notices)
                client = Client(self.port)
        self.notices.update(client.notices)
        client.close()


def discards(log: Path) -> dict[str, int]:
    text = log.read_text(errors="replace")
    found = re.findall(r"transaction\.discarded.*?transaction=(\S+)", text)
    return {
        "holders": sum(1 for t in found if t.startswith("h")),
        "flood": sum(1 for t in found if t.startswith("f")),
    }


def run(strategy: str, flood_seconds: float, wiremq: str) -> dict[str, object]:
    settings = [
        f"MemWatch.maxmemory={MAXMEMORY}",
        f"TransactionMemSizeManager.uncommittedtxmemsizelimit={LIMIT}",
        f"TransactionMemSizeManager.txmemsizereducestategy={strategy}",
        "StompListener.maxtransactions=100",
    ]
    with ManagedServer(wiremq, settings) as server, Rss(server.pid) as rss:
        holders = [Client(server.port) for _ in range(HOLDERS)]
        for n, holder in enumerate(holders):
            holder.send(b"BEGIN\ntransaction:h%d\n\n\0" % n)
            for i in range(HOLDER_PIECES):
                last = f"h{n}-{i}" if i == HOLDER_PIECES - 1 else None
                holder.send(piece(b"/queue/held", f"h{n}", last))
        for n, holder in enumerate(holders):
            holder.wait(lambda h=holder, n=n: f"h{n}-{HOLDER_PIECES - 1}" in h.receipts)
        stop = threading.Event()
        floods = [Flood(server.port, n, stop) for n in range(FLOODERS)]
        threads = [threading.Thread(target=f.run, daemon=True) for f in floods]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        time.sleep(flood_seconds)
        stop.set()
        for n, holder in enumerate(holders):  # commit (a discarded one gets an ERROR)
            holder.send(b"COMMIT\ntransaction:h%d\nreceipt:c%d\n\n\0" % (n, n))
        for n, holder in enumerate(holders):
            holder.wait(lambda h=holder, n=n: f"c{n}" in h.receipts or h.closed)
        for thread in threads:
            thread.join(120)
        ended = time.monotonic()
        for holder in holders:
            holder.close()
        back = None
        while time.monotonic() - ended < 30:
            rss.sample()
            if rss.now < MAXMEMORY // 2:
                back = time.monotonic() - ended
                break
            time.sleep(0.05)
        # From the last SEND written before a discarded transaction's ERROR notice came to
        # the notice: how soon its owner hears (the discard itself happens as the SEND that
        # crossed the limit is read).
        latencies = [
            when - max(t for t in flood.sent[name] if t <= when)
            for flood in floods
            for name, when in flood.notices.items()
            if any(t <= when for t in flood.sent.get(name, ()))
        ]
        counted = discards(server.log_path)
        return {
            "strategy": strategy,
            "peak_rss": rss.peak,
            "discards": counted,
            "flood_committed": sum(f.committed for f in floods),
            "flood_seconds": ended - started,
            "notice_ms": 1000 * sorted(latencies)[len(latencies) // 2] if latencies else None,
            "rss_back_s": back,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", action="append", choices=STRATEGIES)
    parser.add_argument("--flood", type=float, default=8.0, help="seconds of flood")
    args = parser.parse_args(argv)
    wiremq = str(Path(sys.executable).with_name("wiremq"))
    print(
        f"maxmemory {MAXMEMORY // MIB} MiB, uncommittedtxmemsizelimit {LIMIT // MIB} MiB, "
        f"{HOLDERS} holders of 1 MiB, {FLOODERS} flood clients of 8 MiB transactions, "
        f"{args.flood:g} s of flood"
    )
    for strategy in args.strategy or STRATEGIES:
        result = run(strategy, args.flood, wiremq)
        peak = result["peak_rss"]
        assert isinstance(peak, int)
        counted = result["discards"]
        assert isinstance(counted, dict)
        committed = result["flood_committed"]
        assert isinstance(committed, int)
        notice = result["notice_ms"]
        back = result["rss_back_s"]
        print(
            f"{strategy:12} peak RSS {peak / MIB:5.0f} MiB ({100 * peak / MAXMEMORY:3.0f} % of "
            f"maxmemory)  discarded: {counted['holders']:3} holders, {counted['flood']:3} flood"
            f"  flood committed {committed / MIB:6.0f} MiB"
            f"  notice {'-' if notice is None else f'{notice:.1f} ms':>8}"
            f"  RSS back under 50 % {'-' if back is None else f'{back:.2f} s'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
