"""wiremq large-message benchmark: the server's memory while one large message goes through.

A producer sends one persistent message of ``--mib`` MiB (100 by default) to a
queue and waits for its RECEIPT (it is in the store); the benchmark waits for
the store's catch-up to have copied it into its database; then a consumer
subscribes, receives it and acknowledges it, and the benchmark waits for the
removal to be stored. The server's RSS is sampled every 10 ms throughout; the
figures are the peak RSS of each phase above the RSS before the message, as
a multiple of the message's size (issue 12: "a small multiple of its size").

    .venv/bin/python bench/large_message.py [--mib 100] [--set GROUP.NAME=VALUE ...]

The clients are raw sockets that read and write the message in pieces, so
that their own memory and time do not distort the server's.
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from pathlib import Path

import psutil
from server_proc import ManagedServer, PeriodicSampler

MIB = 2**20
CHUNK = 4 * MIB


class RssSampler(PeriodicSampler):
    """The server's RSS every 10 ms, with the peak of the current phase."""

    def __init__(self, pid: int) -> None:
        super().__init__(0.01, "rss-sampler")
        self.process = psutil.Process(pid)
        self.peak = 0

    def sample(self) -> None:
        try:
            rss = self.process.memory_info().rss
        except psutil.Error:
            return
        self.peak = max(self.peak, rss)

    def phase(self) -> int:
        """The peak since the last call; a new phase starts."""
        self.sample()
        peak, self.peak = self.peak, 0
        return peak


class RawClient:
    """Just enough STOMP over a socket to send and receive one large frame in pieces."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.buffer = bytearray()
        self.send(b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\0")
        self.expect(b"CONNECTED")

    def send(self, data: bytes | memoryview) -> None:
        self.sock.sendall(data)

    def frame(self) -> tuple[bytes, dict[bytes, bytes], int]:
        """The next frame's command, headers and body length (its body is read and dropped)."""
        while b"\n\n" not in self.buffer:
            self._fill()
        head, _, rest = bytes(self.buffer).partition(b"\n\n")
        self.buffer = bytearray(rest)
        lines = head.lstrip(b"\n").split(b"\n")
        headers = dict(line.split(b":", 1) for line in lines[1:])
        length = int(headers.get(b"content-length", b"0"))
        got = 0
        while True:
            take = min(len(self.buffer), length + 1 - got)
            got += take
            del self.buffer[:take]
            if got > length:
                return lines[0], headers, length
            self._fill()

    def _fill(self) -> None:
        data = self.sock.recv(CHUNK)
        if not data:
            raise ConnectionError("server closed the connection")
        self.buffer += data

    def expect(self, command: bytes) -> tuple[dict[bytes, bytes], int]:
        found, headers, length = self.frame()
        if found != command:
            raise RuntimeError(f"expected {command!r}, got {found!r} {headers!r}")
        return headers, length


def run(args: argparse.Namespace) -> int:
    size = args.mib * MIB
    settings = [f"StompListener.maxbodysize={size + MIB}", *args.set]
    wiremq = str(Path(sys.executable).with_name("wiremq"))
    with ManagedServer(wiremq, settings) as server, RssSampler(server.pid) as rss:
        producer = RawClient(server.port)
        time.sleep(1.0)
        base = rss.phase()
        body = memoryview(bytes(size))
        head = (
            b"SEND\ndestination:/queue/large\npersistent:true\nreceipt:sent\n"
            b"content-length:%d\n\n" % size
        )
        started = time.monotonic()
        producer.send(head)
        for offset in range(0, size, CHUNK):
            producer.send(body[offset : offset + CHUNK])
        producer.send(b"\0")
        producer.expect(b"RECEIPT")
        sent_s = time.monotonic() - started
        del body
        time.sleep(args.settle)  # the store's catch-up copies it into its database
        stored = rss.phase()
        consumer = RawClient(server.port)
        consumer.send(b"SUBSCRIBE\nid:0\ndestination:/queue/large\nack:client-individual\n\n\0")
        started = time.monotonic()
        headers, length = consumer.expect(b"MESSAGE")
        received_s = time.monotonic() - started
        if length != size:
            raise RuntimeError(f"received {length} bytes, sent {size}")
        consumer.send(b"ACK\nid:%s\nreceipt:acked\n\n\0" % headers[b"ack"])
        consumer.expect(b"RECEIPT")
        time.sleep(args.settle)
        delivered = rss.phase()
    print(f"message {args.mib} MiB; server RSS before it {base / MIB:.0f} MiB")
    for name, peak in (
        (f"send + store ({sent_s:.1f} s, then {args.settle:g} s)", stored),
        (f"deliver + acknowledge ({received_s:.1f} s, then {args.settle:g} s)", delivered),
    ):
        extra = peak - base
        print(
            f"  {name:48} peak RSS {peak / MIB:6.0f} MiB = base + {extra / MIB:5.0f} MiB"
            f" = base + {extra / size:.2f} x the message"
        )
    overall = max(stored, delivered) - base
    print(f"  whole path: base + {overall / size:.2f} x the message")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=100, help="message size in MiB")
    parser.add_argument(
        "--settle", type=float, default=2.0, help="seconds to wait after each phase"
    )
    parser.add_argument("--set", action="append", default=[], metavar="GROUP.NAME=VALUE")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
