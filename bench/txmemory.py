"""wiremq transaction memory benchmark (issue 12): open transactions under each strategy.

For each TransactionMemSizeManager strategy, against a fresh server of its own
(``MemWatch.maxmemory`` 256 MiB, ``uncommittedtxmemsizelimit`` 64 MiB): 50
clients each hold a 1 MiB transaction open (16 SENDs of 64 KiB; 50 MiB in
all, within the limit), then 8 flood clients send further transacted messages
as fast as the server reads them (transactions of 8 MiB, committed, then the
next) for ``--flood`` seconds, which takes the open transactions over the
limit again and again; then the holders COMMIT and everyone leaves. A
consumer takes every committed message, so what the server holds is what the
transactions hold. It prints, per strategy:

- the server's peak RSS (sampled every 10 ms), against maxmemory;
- the transactions discarded (by the server's ``transaction.discarded`` events),
  holders' and flood's, and the flood's bytes committed;
- the time to free memory. A discard frees the chosen transactions' bytes
  while the SEND that took the total over the limit is handled, so what a
  client sees is its notice: from the last flood SEND written before a
  discard notice (ERROR with a ``transaction`` header) to the notice, median
  and largest over all notices. Under NONE nothing is discarded: the flood's
  connections are not read while the total is over the limit, and memory is
  freed when the holders COMMIT; then "flood resumed" is the time from the
  holders' COMMITs to the flood's last COMMIT RECEIPT. And after everyone
  left, the time until the server's RSS is back within 16 MiB of what it was
  before the holders came (MemWatch's collections at level 1 and above give
  memory back to the system; below 50 % of maxmemory freed memory may stay
  with the process).

    .venv/bin/python bench/txmemory.py [--strategy NAME ...] [--flood SECONDS]
"""

from __future__ import annotations

import argparse
import bisect
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
LIMIT = 64 * MIB
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
    last_receipt: float = 0.0  # when its last COMMIT RECEIPT came
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
                ok = client.send(piece(b"/queue/flood", name))
                times.append(time.monotonic())
            if not ok:
                break
            client.send(
                b"COMMIT\ntransaction:%s\nreceipt:%s\n\n\0" % (name.encode(), name.encode())
            )
            client.wait(lambda n=name, c=client: n in c.receipts or c.closed)
            if name in client.receipts:
                self.committed += len(times) * PIECE
                self.last_receipt = client.receipts[name]
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


def drain(port: int) -> socket.socket:
    """A consumer of both queues that reads and drops what it is sent."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=None)
    sock.sendall(
        b"CONNECT\naccept-version:1.2\nhost:x\nheart-beat:0,0\n\n\0"
        b"SUBSCRIBE\nid:held\ndestination:/queue/held\nack:auto\n\n\0"
        b"SUBSCRIBE\nid:flood\ndestination:/queue/flood\nack:auto\n\n\0"
    )

    def read() -> None:
        try:
            while sock.recv(1 << 20):
                pass
        except OSError:
            pass

    threading.Thread(target=read, daemon=True).start()
    return sock


def run(strategy: str, flood_seconds: float, wiremq: str) -> dict[str, object]:
    settings = [
        f"MemWatch.maxmemory={MAXMEMORY}",
        f"TransactionMemSizeManager.uncommittedtxmemsizelimit={LIMIT}",
        f"TransactionMemSizeManager.txmemsizereducestategy={strategy}",
        "StompListener.maxtransactions=100",
    ]
    with ManagedServer(wiremq, settings) as server, Rss(server.pid) as rss:
        consumer = drain(server.port)
        time.sleep(0.5)
        rss.sample()
        baseline = rss.now
        holders = [Client(server.port) for _ in range(HOLDERS)]
        for n, holder in enumerate(holders):
            holder.send(b"BEGIN\ntransaction:h%d\n\n\0" % n)
            for i in range(HOLDER_PIECES):
                last = f"h{n}-{i}" if i == HOLDER_PIECES - 1 else None
                holder.send(piece(b"/queue/held", f"h{n}", last))
        for n, holder in enumerate(holders):
            if not holder.wait(lambda h=holder, n=n: f"h{n}-{HOLDER_PIECES - 1}" in h.receipts):
                raise RuntimeError(f"holder {n} got no RECEIPT for its last SEND")
        stop = threading.Event()
        floods = [Flood(server.port, n, stop) for n in range(FLOODERS)]
        threads = [threading.Thread(target=f.run, daemon=True) for f in floods]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        time.sleep(flood_seconds)
        stop.set()
        committing = time.monotonic()
        for n, holder in enumerate(holders):  # commit (a discarded one gets an ERROR)
            holder.send(b"COMMIT\ntransaction:h%d\nreceipt:c%d\n\n\0" % (n, n))
        for n, holder in enumerate(holders):
            holder.wait(lambda h=holder, n=n: f"c{n}" in h.receipts or h.closed)
        for thread in threads:
            thread.join(120)
        ended = time.monotonic()
        last_commit = max((f.last_receipt for f in floods), default=0.0)
        for holder in holders:
            holder.close()
        back = None
        while time.monotonic() - ended < 20:
            rss.sample()
            if rss.now < baseline + 16 * MIB:
                back = time.monotonic() - ended
                break
            time.sleep(0.05)
        consumer.close()
        # From the last flood SEND written before a discard notice to the notice: how soon
        # the owner hears (the discard happens as the SEND that crossed the limit is read).
        sends = sorted(t for flood in floods for times in flood.sent.values() for t in times)
        notices = [when for client in [*holders, *floods] for when in (client.notices.values())]
        latencies = sorted(
            when - sends[bisect.bisect_right(sends, when) - 1]
            for when in notices
            if bisect.bisect_right(sends, when) > 0
        )
        counted = discards(server.log_path)
        return {
            "strategy": strategy,
            "baseline": baseline,
            "peak_rss": rss.peak,
            "discards": counted,
            "flood_committed": sum(f.committed for f in floods),
            "flood_seconds": ended - started,
            "notice_ms": (
                (1000 * latencies[len(latencies) // 2], 1000 * latencies[-1]) if latencies else None
            ),
            "resumed_s": last_commit - committing if last_commit > committing else None,
            "rss_after": rss.now,
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
        peak, baseline, after = result["peak_rss"], result["baseline"], result["rss_after"]
        assert isinstance(peak, int) and isinstance(baseline, int) and isinstance(after, int)
        counted = result["discards"]
        assert isinstance(counted, dict)
        committed = result["flood_committed"]
        assert isinstance(committed, int)
        notice, resumed, back = result["notice_ms"], result["resumed_s"], result["rss_back_s"]
        heard = "-" if not isinstance(notice, tuple) else f"{notice[0]:.1f}/{notice[1]:.1f} ms"
        print(
            f"{strategy:12} peak RSS {peak / MIB:4.0f} MiB ({100 * peak / MAXMEMORY:3.0f} % of "
            f"maxmemory; {baseline / MIB:.0f} MiB before)  discarded: {counted['holders']:3} "
            f"holders, {counted['flood']:4} flood  flood committed {committed / MIB:5.0f} MiB"
            f"  notice median/max {heard:>14}"
            f"  flood resumed {'-' if resumed is None else f'{resumed:.2f} s'}"
            f"  RSS back {'-' if back is None else f'{back:.2f} s'} ({after / MIB:.0f} MiB)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
