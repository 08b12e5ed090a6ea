"""How the costs a client controls scale: subscriptions on one connection, unfinished frames.

Not a test: the figures of the "Bounds" section of bench/README.md.

- ``subscriptions``: N SUBSCRIBEs then N UNSUBSCRIBEs on one connection (half on one
  queue, half on a topic each), timed to the receipt after each batch, for several N;
  constant cost per request shows as a constant time per thousand.
- ``unfinished``: C connections each send all but the last byte of a large frame; the
  server's RSS is read while they hold them (bounded by StompListener.maxunfinishedbytes),
  then they send the rest and every receipt is awaited.

    .venv/bin/python bench/bounds.py [--counts 10000 20000 40000] [--connections 40]
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from server_proc import ManagedServer  # noqa: E402

MIB = 1024 * 1024
CONNECT = b"CONNECT\naccept-version:1.2\nhost:bench\n\n\0"


def _client(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(CONNECT)
    _wait_for(sock, b"CONNECTED")
    return sock


def _wait_for(sock: socket.socket, marker: bytes) -> None:
    seen = b""
    while marker not in seen:
        data = sock.recv(65536)
        if not data:
            raise RuntimeError(f"connection closed before {marker!r}")
        seen = seen[-len(marker) :] + data


def subscriptions(port: int, count: int) -> tuple[float, float]:
    """Seconds for ``count`` SUBSCRIBEs, then for as many UNSUBSCRIBEs, on one connection."""
    sock = _client(port)
    subscribes = b"".join(
        b"SUBSCRIBE\nid:%d\ndestination:%s\n\n\0"
        % (n, b"/queue/bench" if n % 2 else b"/topic/bench-%d" % n)
        for n in range(count)
    )
    started = time.monotonic()
    sock.sendall(subscribes + b"SUBSCRIBE\nid:x\ndestination:/queue/x\nreceipt:s\n\n\0")
    _wait_for(sock, b"receipt-id:s")
    subscribed = time.monotonic()
    unsubscribes = b"".join(b"UNSUBSCRIBE\nid:%d\n\n\0" % n for n in range(count))
    sock.sendall(unsubscribes + b"UNSUBSCRIBE\nid:x\nreceipt:u\n\n\0")
    _wait_for(sock, b"receipt-id:u")
    sock.close()
    return subscribed - started, time.monotonic() - subscribed


def unfinished(port: int, pid: int, connections: int, body: int) -> tuple[float, float, float]:
    """RSS (MB) before, while ``connections`` each hold all but one byte of a ``body``-byte
    frame, and the seconds until every one of them finished once they sent the rest."""
    rss = lambda: psutil.Process(pid).memory_info().rss / MIB  # noqa: E731
    before = rss()
    socks = [_client(port) for _ in range(connections)]
    go_on = threading.Event()

    def send(sock: socket.socket, n: int) -> None:
        head = b"SEND\ndestination:/topic/big\ncontent-length:%d\nreceipt:%d\n\n" % (body, n)
        sock.sendall(head + b"x" * (body - 1))
        go_on.wait()
        sock.sendall(b"x\0")
        _wait_for(sock, b"receipt-id:%d\n" % n)

    threads = [threading.Thread(target=send, args=(s, n)) for n, s in enumerate(socks)]
    for thread in threads:
        thread.start()
    time.sleep(5.0)  # every client sends what the server lets it
    holding = rss()
    started = time.monotonic()
    go_on.set()
    for thread in threads:
        thread.join()
    for sock in socks:
        sock.close()
    return before, holding, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wiremq", default=str(Path(sys.executable).with_name("wiremq")))
    parser.add_argument("--counts", type=int, nargs="+", default=[10_000, 20_000, 40_000])
    parser.add_argument("--connections", type=int, default=40)
    parser.add_argument("--body", type=int, default=9 * MIB)
    args = parser.parse_args()
    most = max(args.counts)
    with ManagedServer(args.wiremq, [f"StompListener.maxsubscriptions={most + 1}"]) as server:
        for count in args.counts:
            made, ended = subscriptions(server.port, count)
            print(
                f"subscriptions {count:>7}: SUBSCRIBE {made:6.2f} s "
                f"({made / count * 1e6:5.1f} us each), UNSUBSCRIBE {ended:6.2f} s "
                f"({ended / count * 1e6:5.1f} us each)"
            )
    settings = [
        f"StompListener.maxconnectionsperaddress={args.connections + 1}",
        f"StompListener.maxbodysize={args.body + MIB}",
    ]
    with ManagedServer(args.wiremq, settings) as server:
        before, holding, finished = unfinished(server.port, server.pid, args.connections, args.body)
        print(
            f"unfinished frames: {args.connections} x {args.body / MIB:.0f} MiB held back: "
            f"RSS {before:.0f} -> {holding:.0f} MB; all finished {finished:.1f} s after"
        )


if __name__ == "__main__":
    main()
