"""wiremq large-message benchmark: the server's memory while one large message goes through.

Two runs, each against a fresh server. Stored, then delivered: a producer
sends one persistent message of ``--mib`` MiB (100 by default) to a queue and
waits for its RECEIPT (it is in the store); the benchmark waits ``--settle``
seconds, long enough for the store's catch-up to copy it into its database;
then a consumer subscribes, receives it and acknowledges it. To a waiting
consumer: the consumer is subscribed first, so the message goes to it from
memory while it is being stored. The server's RSS is sampled every 10 ms
throughout; the figures are the peak RSS above the RSS before the message, as
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


def send_large(producer: RawClient, size: int) -> float:
    """Send one persistent message of ``size`` bytes in pieces; seconds until its RECEIPT."""
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
    return time.monotonic() - started


def receive_large(consumer: RawClient, size: int) -> None:
    """Take the next MESSAGE (read in pieces) and acknowledge it; returns once stored."""
    headers, length = consumer.expect(b"MESSAGE")
    if length != size:
        raise RuntimeError(f"received {length} bytes, sent {size}")
    consumer.send(b"ACK\nid:%s\nreceipt:acked\n\n\0" % headers[b"ack"])
    consumer.expect(b"RECEIPT")


def subscribe(port: int) -> RawClient:
    consumer = RawClient(port)
    consumer.send(
        b"SUBSCRIBE\nid:0\ndestination:/queue/large\nack:client-individual\nreceipt:s\n\n\0"
    )
    consumer.expect(b"RECEIPT")
    return consumer


def run(args: argparse.Namespace) -> int:
    size = args.mib * MIB
    settings = [f"StompListener.maxbodysize={size + MIB}", *args.set]
    wiremq = str(Path(sys.executable).with_name("wiremq"))
    print(f"one persistent message of {args.mib} MiB; server settings: {' '.join(settings)}")
    # Stored first: sent, stored, copied into the database by the catch-up, then read back
    # and delivered to a consumer that comes later.
    with ManagedServer(wiremq, settings) as server, RssSampler(server.pid) as rss:
        producer = RawClient(server.port)
        time.sleep(1.0)
        base = rss.phase()
        seconds = send_large(producer, size)
        time.sleep(args.settle)  # the store's catch-up copies it into its database
        stored = rss.phase()
        receive_large(subscribe(server.port), size)
        time.sleep(args.settle)
        delivered = rss.phase()
    report(f"stored, then delivered (sent in {seconds:.1f} s)", base, size, stored, delivered)
    # A consumer waiting: delivered from memory as it is stored.
    with ManagedServer(wiremq, settings) as server, RssSampler(server.pid) as rss:
        producer = RawClient(server.port)
        consumer = subscribe(server.port)
        time.sleep(1.0)
        base = rss.phase()
        seconds = send_large(producer, size)
        receive_large(consumer, size)
        time.sleep(args.settle)
        passed = rss.phase()
    report(f"to a waiting consumer (sent in {seconds:.1f} s)", base, size, passed)
    return 0


def report(name: str, base: int, size: int, *peaks: int) -> None:
    """Each phase's peak RSS above the RSS before the message, as a multiple of its size."""
    multiples = ", ".join(f"{(peak - base) / size:.2f}" for peak in peaks)
    top = max(peaks)
    print(
        f"  {name:42} RSS before {base / MIB:4.0f} MiB, peak {top / MIB:5.0f} MiB: "
        f"base + {(top - base) / size:.2f} x the message (by phase: {multiples})"
    )


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
