"""The floor for a producer waiting on each persistent receipt: no broker, one sync.

A STOMP server reduced to what a persistent SEND's receipt needs on this
machine: a blocking thread per connection reads a SEND, writes it into a
preallocated file and syncs it (``pwrite`` + ``fdatasync``, inline, under one
lock), then sends its RECEIPT. A SUBSCRIBE gets the bodies stored for its
destination, all at once, so that the peers' load generator can drain what it
filled; nothing else of a broker is there (no acknowledgements, no recovery).
What a lone producer makes against it is the ceiling any broker on this
machine can reach for that scenario, as ``../shared/peers/ceiling_relay.py``
is for non-persistent messages (bench/README.md, "Receipts at the sync").

    .venv/bin/python bench/sync_floor.py --port 62005 --file /tmp/floor.log &
    python3 ../shared/peers/stompbench.py --port 62005 --scenario queue-p --size 128 \\
        --producers 1 --receipt-every 1 --receipt-window 1 --drain-after --messages 4000
"""

from __future__ import annotations

import argparse
import os
import socket
import threading
from collections.abc import Iterator

PREALLOCATED = 256 << 20  # written in place: no metadata to sync


class Floor:
    """The file every SEND is synced into, and the bodies kept for SUBSCRIBEs."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        os.posix_fallocate(self.fd, 0, PREALLOCATED)
        os.fsync(self.fd)
        self.offset = 0
        self.lock = threading.Lock()
        self.bodies: dict[bytes, list[bytes]] = {}

    def store(self, destination: bytes, frame: bytes, body: bytes) -> None:
        """Write and sync one SEND (wrapping round the file), then keep its body."""
        with self.lock:
            if self.offset + len(frame) > PREALLOCATED:
                self.offset = 0
            os.pwrite(self.fd, frame, self.offset)
            os.fdatasync(self.fd)
            self.offset += len(frame)
            self.bodies.setdefault(destination, []).append(body)

    def take(self, destination: bytes) -> list[bytes]:
        with self.lock:
            return self.bodies.pop(destination, [])


def frames(conn: socket.socket) -> Iterator[bytes]:
    """The frames a client sends (NUL-terminated; no content-length bodies with NULs)."""
    buffer = b""
    while True:
        while b"\0" in buffer:
            frame, buffer = buffer.split(b"\0", 1)
            frame = frame.lstrip(b"\r\n")
            if frame:
                yield frame
        data = conn.recv(65536)
        if not data:
            return
        buffer += data


def parse(frame: bytes) -> tuple[bytes, dict[bytes, bytes], bytes]:
    head, _, body = frame.partition(b"\n\n")
    command, *lines = head.split(b"\n")
    headers: dict[bytes, bytes] = {}
    for line in lines:
        name, _, value = line.partition(b":")
        headers.setdefault(name, value)
    return command, headers, body


def receipt(headers: dict[bytes, bytes]) -> bytes:
    if b"receipt" not in headers:
        return b""
    return b"RECEIPT\nreceipt-id:" + headers[b"receipt"] + b"\n\n\0"


def serve(conn: socket.socket, floor: Floor) -> None:
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    with conn:
        for frame in frames(conn):
            command, headers, body = parse(frame)
            if command in (b"CONNECT", b"STOMP"):
                conn.sendall(b"CONNECTED\nversion:1.2\n\n\0")
            elif command == b"SEND":
                floor.store(headers[b"destination"], frame, body)
                conn.sendall(receipt(headers))
            elif command == b"SUBSCRIBE":
                destination, subscription = headers[b"destination"], headers.get(b"id", b"0")
                conn.sendall(
                    b"".join(
                        b"MESSAGE\ndestination:%s\nmessage-id:%d\nsubscription:%s\n"
                        b"content-length:%d\n\n%s\0"
                        % (destination, number, subscription, len(body), body)
                        for number, body in enumerate(floor.take(destination))
                    )
                    + receipt(headers)
                )
            else:
                conn.sendall(receipt(headers))
                if command == b"DISCONNECT":
                    return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=62005)
    parser.add_argument("--file", default="/tmp/wiremq-sync-floor.log")
    args = parser.parse_args()
    floor = Floor(args.file)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.port))
    listener.listen(128)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(conn, floor), daemon=True).start()


if __name__ == "__main__":
    main()
