"""Instructions the real server's event loop spends per lone round trip, under callgrind.

``wiremq serve`` (or the relay, ``--relay``: ``../shared/peers/ceiling_relay.py``, the
floor) runs under ``valgrind --tool=callgrind --separate-threads=yes``; a consumer on
``/queue/q`` (ack auto) and a producer that sends one 128-byte SEND at a time and waits
for its MESSAGE, as the round trip row of ``bench/table.py`` does. Two servers side by
side, one taken through ``--small`` round trips and one through ``--large``: the
difference of their main threads' instruction totals over the difference of round trips
is what one round trip costs the event loop, Twisted's reactor and socket calls
included (start-up and shutdown cancel out). The server's timers that run per second,
not per message (the journal's hand-over, the memory, disk, users-file and slowness
checks), are set to run seldom: under valgrind a run lasts 50 times longer, and how much
longer depends on the machine's load. Runs of the same code agree within about ±1,500
instructions back to back, ±5,000 at other loads of the machine; a change to the
message path is decided by ``bench/path_profile.py --lone`` under callgrind (±300).

    .venv/bin/python bench/roundtrip_callgrind.py            # wiremq
    .venv/bin/python bench/roundtrip_callgrind.py --relay    # the relay
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from peers import PEERS

RELAY = PEERS / "ceiling_relay.py"
SELDOM = (
    "Journal.flushinterval=1",
    "DiskSpace.checkinterval=60",
    "Security.usersfilecheckinterval=60",
    "MemWatch.checkinterval=60",
    "SlowSubscriber.checkinterval=60",
)
FRAME = b"SEND\ndestination:/queue/q\ncontent-length:128\n\n" + b"x" * 128 + b"\0"
WARM_UP = 200


def _connected(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(b"CONNECT\naccept-version:1.2\nhost:/\n\n\0")
    _until(sock, b"\0")
    return sock


def _until(sock: socket.socket, end: bytes) -> bytes:
    got = b""
    while not got.endswith(end):
        data = sock.recv(65536)
        if not data:
            raise RuntimeError(f"connection closed after {got[-200:]!r}")
        got += data
    return got


def main_thread_instructions(relay: bool, round_trips: int) -> int:
    """The server's main thread's instructions over start-up, the warm-up, ``round_trips``
    lone round trips and shutdown."""
    work = Path(tempfile.mkdtemp(prefix="wiremq-roundtrip-cg-"))
    try:
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        if relay:
            server = [sys.executable, str(RELAY), "--port", str(port)]
        else:
            wiremq = str(Path(sys.executable).with_name("wiremq"))
            server = [wiremq, "serve", "--host", "127.0.0.1", "--port", str(port)]
            server += ["--data", str(work / "data"), "--admin-port", "0"]
            server += [arg for setting in SELDOM for arg in ("--set", setting)]
        valgrind = ["valgrind", "--tool=callgrind", "--separate-threads=yes"]
        valgrind.append(f"--callgrind-out-file={work / 'callgrind.out'}")
        with open(work / "server.log", "wb") as log:
            proc = subprocess.Popen([*valgrind, *server], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while True:
            try:
                consumer = _connected(port)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((work / "server.log").read_text()[-2000:]) from None
                time.sleep(0.5)
        consumer.sendall(b"SUBSCRIBE\nid:0\ndestination:/queue/q\nack:auto\nreceipt:r\n\n\0")
        _until(consumer, b"\0")
        producer = _connected(port)
        for _ in range(WARM_UP + round_trips):
            producer.sendall(FRAME)
            _until(consumer, b"x\0")
        producer.close()
        consumer.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(300)
        text = (work / "callgrind.out-01").read_text()
        return int(re.findall(r"^(?:totals|summary): (\d+)", text, re.M)[-1])
    finally:
        shutil.rmtree(work, True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--relay", action="store_true", help="the relay instead of wiremq")
    parser.add_argument("--small", type=int, default=300, help="round trips of one run")
    parser.add_argument("--large", type=int, default=3300, help="round trips of the other")
    args = parser.parse_args()
    with ThreadPoolExecutor(2) as pool:
        small, large = pool.map(
            lambda n: main_thread_instructions(args.relay, n), (args.small, args.large)
        )
    who = "relay" if args.relay else "wiremq"
    per_trip = (large - small) / (args.large - args.small)
    print(f"{who}: {small:,} / {large:,} instructions; per lone round trip: {per_trip:,.0f}")


if __name__ == "__main__":
    main()
