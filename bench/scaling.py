"""How wiremq's cost grows with connections and destinations (issue 27), against ActiveMQ.

``connections``: ``--connections`` clients (10,000) each CONNECT and SUBSCRIBE
(with a receipt) to a queue of its own, then one producer sends one message to
each queue. Printed per broker: the connect+subscribe rate (connections with
their receipt per second), the server's resident memory per connection (RSS
after over RSS before, for ActiveMQ the JVM's, whose heap is reserved up front,
so its figure is what the JVM touched), and the time from the first SEND until
every client has its message. The clients are ``--processes`` processes of
non-blocking sockets, each keeping ``--window`` handshakes in flight; their CPU
time is printed beside the elapsed time, so a client that was the limit shows.

``destinations`` (wiremq only): ``--queues`` queues (100,000) receive one
non-persistent message each, then: memory per queue, the time one SUBSCRIBE
takes to bring its queue's message (median of 20), a SEND with a receipt every
10 ms for ``--probe`` seconds (5) while the periodic tasks that walk every
destination run (the console's sample, every cleanup: their periods are set
to 1 s, ``DESTINATIONS``) and the console is asked ``/metrics``, ``/api/state``
and a page of ``/api/destinations`` every half second (the longest wait and
each call's longest time), then the console's destination list and one
``/metrics`` scrape alone (time, bytes, lines: it must stay bounded); then
``--subscribers`` (1,000) subscribe to one topic and a producer publishes
``--publish`` messages to it: deliveries per second.

    .venv/bin/python bench/scaling.py                       # both, about 5 minutes
    .venv/bin/python bench/scaling.py --only connections --connections 2000
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import selectors
import shutil
import socket
import statistics
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psutil
from peers import ACTIVEMQ, listening
from server_proc import ManagedServer, free_port

LIMITS = [  # every client comes from 127.0.0.1
    "StompListener.maxconnections=1000000",
    "StompListener.maxconnectionsperaddress=1000000",
]
DESTINATIONS = [  # the destinations scenario (a --set may change each)
    # The server sized for its load (100,000 queues: about 700 MB): at the default 512 MB
    # it is over MemWatch's levels, whose collect action is a full collection every 0.75 s,
    # itself 1-2 s with this many objects.
    "MemWatch.maxmemory=4294967296",
    # Every task that walks the destinations runs during the probe.
    "Admin.sampleinterval=1",
    "VolQueueStoreImpl.cleanupinterval=1",
    "DestinationManager.qlbcleanupinterval=1",
    "DestinationManager.tlbcleanupinterval=1",
    "DestinationManager.idletimetolive=1",
]
CONSOLE_CALLS = ("/metrics", "/api/state", "/api/destinations?limit=50")
CONNECT = b"CONNECT\naccept-version:1.2\nhost:/\nheart-beat:0,0\n\n\0"


def subscribe_frame(destination: str, number: int) -> bytes:
    return (
        f"SUBSCRIBE\nid:{number}\ndestination:{destination}\nack:auto\nreceipt:s{number}\n\n"
    ).encode() + b"\0"


def send_frame(destination: str) -> bytes:
    return f"SEND\ndestination:{destination}\ncontent-length:16\n\n".encode() + b"x" * 16 + b"\0"


class Client:
    """One connection's handshake: CONNECT, wait for CONNECTED, SUBSCRIBE, wait for its
    RECEIPT; then count MESSAGE frames."""

    __slots__ = ("sock", "destination", "number", "state", "buffer", "messages")

    def __init__(self, destination: str, number: int) -> None:
        self.destination = destination
        self.number = number
        self.sock = socket.socket()
        self.sock.setblocking(False)
        self.state = "connecting"
        self.buffer = b""
        self.messages = 0

    def frames(self, data: bytes) -> list[bytes]:
        """The commands of the whole frames received so far."""
        self.buffer += data
        commands = []
        while (end := self.buffer.find(b"\0")) >= 0:
            frame, self.buffer = self.buffer[:end], self.buffer[end + 1 :]
            frame = frame.lstrip(b"\r\n")
            if frame:
                commands.append(frame.split(b"\n", 1)[0])
                if frame.startswith(b"ERROR"):
                    raise RuntimeError(f"{self.destination}: {frame[:300]!r}")
        return commands


def open_clients(*args: object) -> None:
    """``clients`` in a process of its own; a failure is reported, not left to hang."""
    out = args[-1]
    try:
        clients(*args)  # type: ignore[arg-type]
    except Exception as error:  # the parent raises it
        out.put(("failed", repr(error), 0.0))  # type: ignore[attr-defined]


def clients(
    port: int,
    destinations: list[str],
    window: int,
    expect: int,
    ready: mp.Barrier,
    go: mp.Event,
    out: mp.Queue,
) -> None:
    """A client process: connect and subscribe every destination (``window`` handshakes in
    flight), report, then wait for ``expect`` messages each and report when they all came."""
    selector = selectors.DefaultSelector()
    pending = list(reversed([Client(d, i) for i, d in enumerate(destinations)]))
    busy = done = 0
    clients: list[Client] = []
    cpu, started = time.process_time(), time.perf_counter()
    while done < len(destinations):
        while pending and busy < window:
            client = pending.pop()
            client.sock.connect_ex(("127.0.0.1", port))
            selector.register(client.sock, selectors.EVENT_WRITE, client)
            busy += 1
        for key, _ in selector.select(10):
            client = key.data
            if client.state == "connecting":
                client.sock.send(CONNECT)
                client.state = "connected?"
                selector.modify(client.sock, selectors.EVENT_READ, client)
                continue
            data = client.sock.recv(65536)
            if not data:
                raise RuntimeError(f"{client.destination}: the server closed the connection")
            for command in client.frames(data):
                if command == b"CONNECTED":
                    client.sock.send(subscribe_frame(client.destination, client.number))
                    client.state = "subscribed?"
                elif command == b"RECEIPT":
                    client.state = "subscribed"
                    selector.unregister(client.sock)
                    clients.append(client)
                    busy -= 1
                    done += 1
    out.put(("subscribed", time.perf_counter() - started, time.process_time() - cpu))
    ready.wait()
    go.wait()
    for client in clients:
        selector.register(client.sock, selectors.EVENT_READ, client)
    waiting = len(clients)
    while waiting:
        for key, _ in selector.select(30):
            client = key.data
            data = client.sock.recv(65536)
            for command in client.frames(data):
                if command == b"MESSAGE":
                    client.messages += 1
                    if client.messages == expect:
                        waiting -= 1
    out.put(("delivered", time.perf_counter(), time.process_time() - cpu))
    ready.wait()  # hold the connections until the parent has measured
    for client in clients:
        client.sock.close()


def handshake(port: int, frames: list[bytes], receipt: bytes) -> float:
    """One connection: CONNECT, the frames in batches, then wait for ``receipt``; seconds."""
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(CONNECT)
        data = b""
        while b"\0" not in data:
            data += sock.recv(65536)
        if not data.startswith(b"CONNECTED"):
            raise RuntimeError(f"the server answered CONNECT with {data[:300]!r}")
        try:
            for at in range(0, len(frames), 500):
                sock.sendall(b"".join(frames[at : at + 500]))
        except OSError as error:
            raise RuntimeError(f"{error}: the server said {sock.recv(65536)[:500]!r}") from None
        data = b""
        while receipt not in data:
            chunk = sock.recv(65536)
            if not chunk:
                raise RuntimeError("the server closed the connection")
            data += chunk
            data = data[-200:]
    return time.perf_counter() - started


def publish(port: int, destinations: list[str], count: int = 1) -> float:
    """Send ``count`` messages to each destination, a receipt on the last; seconds."""
    frames = [send_frame(d) for _ in range(count) for d in destinations]
    frames[-1] = frames[-1].replace(b"SEND\n", b"SEND\nreceipt:done\n", 1)
    return handshake(port, frames, b"receipt-id:done")


def report(out: mp.Queue) -> tuple[str, float, float]:
    """A client process's next report; its failure raised here."""
    kind, value, cpu = out.get(timeout=900)
    if kind == "failed":
        raise RuntimeError(f"a client process failed: {value}")
    return kind, value, cpu


def rss(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


def subscribers(
    port: int,
    destinations: list[str],
    processes: int,
    window: int,
    pid: int,
    publisher: Callable[[], object] | None = None,
    expect: int = 1,
) -> dict[str, float]:
    """Connect and subscribe ``destinations`` from ``processes`` client processes, then
    publish (one message to each, or ``publisher()``: ``expect`` to each); the figures."""
    context = mp.get_context("spawn")
    ready, go, out = context.Barrier(processes + 1), context.Event(), context.Queue()
    shares = [destinations[i::processes] for i in range(processes)]
    before = rss(pid)
    workers = [
        context.Process(
            target=open_clients, args=(port, share, window, expect, ready, go, out), daemon=True
        )
        for share in shares
    ]
    for worker in workers:
        worker.start()
    reports = [report(out) for _ in workers]
    ready.wait()
    connected = rss(pid)
    seconds = max(r[1] for r in reports)
    figures = {
        "connect+subscribe per s": len(destinations) / seconds,
        "seconds": seconds,
        "client cpu s": sum(r[2] for r in reports),
        "rss before MB": before / 2**20,
        "rss after MB": connected / 2**20,
        "rss per connection KiB": (connected - before) / len(destinations) / 1024,
    }
    go.set()
    started = time.perf_counter()
    if publisher is None:
        publish(port, sorted(set(destinations)))
    else:
        publisher()
    reports = [report(out) for _ in workers]
    figures["deliver to all s"] = max(r[1] for r in reports) - started
    ready.wait()
    for worker in workers:
        worker.join()
    return figures


def connections(args: argparse.Namespace, wiremq: str) -> None:
    queues = [f"/queue/scale.{i}" for i in range(args.connections)]
    java = [
        p
        for p in psutil.process_iter(["name", "cmdline"])
        if "activemq.jar" in " ".join(p.info["cmdline"] or [])
    ]
    print(f"connections, each subscribed to a queue of its own, one message each: {len(queues)}")
    with ManagedServer(wiremq, args.set) as server:
        ours = subscribers(server.port, queues, args.processes, args.window, server.pid)
    for name, value in ours.items():
        print(f"  {name:26} wiremq {value:12,.1f}")
    theirs: dict[str, float] = {}
    if java and args.activemq_connections:
        count = args.activemq_connections
        print(f"  (ActiveMQ: {count} connections, see --activemq-connections; wiremq again too)")
        with ManagedServer(wiremq, args.set) as server:
            ours = subscribers(server.port, queues[:count], args.processes, args.window, server.pid)
        theirs = subscribers(ACTIVEMQ[1], queues[:count], args.processes, args.window, java[0].pid)
    if theirs:
        for name, value in ours.items():
            print(f"  {name:26} wiremq {value:12,.1f}   ActiveMQ {theirs[name]:12,.1f}")
        rate, memory, deliver = (
            ours[k] / theirs[k]
            for k in ("connect+subscribe per s", "rss per connection KiB", "deliver to all s")
        )
        print(
            f"  wiremq / ActiveMQ: connect rate {rate:.2f} (target >= 2), memory per connection "
            f"{memory:.2f} (target <= 0.5), time to deliver to all {deliver:.2f}"
        )


def receipt_latency(port: int, seconds: float) -> tuple[float, float]:
    """A SEND with a receipt every 10 ms for ``seconds``: the median and the longest wait
    for a receipt (what a periodic task that holds the event loop costs a client)."""
    waits = []
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(CONNECT)
        sock.recv(65536)
        frame = send_frame("/queue/scale.ping").replace(b"SEND\n", b"SEND\nreceipt:p\n", 1)
        ends = time.perf_counter() + seconds
        while time.perf_counter() < ends:
            started = time.perf_counter()
            sock.sendall(frame)
            data = b""
            while b"\0" not in data:
                data += sock.recv(65536)
            waits.append(time.perf_counter() - started)
            time.sleep(0.01)
    return statistics.median(waits), max(waits)


def console_calls(console: str, until: threading.Event, took: dict[str, list[float]]) -> None:
    """Ask the console ``CONSOLE_CALLS`` every half second until ``until`` is set."""
    while not until.is_set():
        for path in CONSOLE_CALLS:
            took.setdefault(path, []).append(timed_get(console + path)[0])
        until.wait(0.5)


def timed_get(url: str) -> tuple[float, bytes]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=600) as reply:
        body = reply.read()
    return time.perf_counter() - started, body


def destinations(args: argparse.Namespace, wiremq: str) -> None:
    admin = free_port("127.0.0.1")
    print(
        f"destinations: {args.queues} queues holding one message each; "
        f"one topic, {args.subscribers} subscribers"
    )
    with ManagedServer(wiremq, [*DESTINATIONS, *args.set], admin_port=admin) as server:
        console = f"http://127.0.0.1:{admin}"
        for _ in range(100):
            if listening(("127.0.0.1", admin)):
                break
            time.sleep(0.1)
        before = rss(server.pid)
        queues = [f"/queue/scale.d{i}" for i in range(args.queues)]
        seconds = publish(server.port, queues)
        after = rss(server.pid)
        print(
            f"  {args.queues} queues made and filled in {seconds:.1f} s "
            f"({args.queues / seconds:,.0f} queues/s)"
        )
        per_queue = (after - before) / args.queues
        print(f"  RSS {before / 2**20:.0f} -> {after / 2**20:.0f} MB: {per_queue:,.0f} B per queue")
        times = []
        for i in range(20):
            started = time.perf_counter()
            with socket.create_connection(("127.0.0.1", server.port)) as sock:
                sock.sendall(CONNECT + subscribe_frame(queues[(i * 4999) % len(queues)], 1))
                data = b""
                while b"MESSAGE" not in data:
                    data += sock.recv(65536)
            times.append(time.perf_counter() - started)
        median, longest = statistics.median(times) * 1e3, max(times) * 1e3
        print(f"  CONNECT + SUBSCRIBE to one until its message: {median:.1f} ms, max {longest:.1f}")
        stop, took_calls = threading.Event(), {}
        asking = threading.Thread(target=console_calls, args=(console, stop, took_calls))
        asking.start()
        p50, worst = receipt_latency(server.port, args.probe)
        stop.set()
        asking.join()
        print(
            f"  a receipt every 10 ms for {args.probe:.0f} s, with every periodic task and the "
            f"console's calls: p50 {p50 * 1e3:.1f} ms, max {worst * 1e3:.1f} ms"
        )
        for path, times in took_calls.items():
            print(
                f"    {path}: {len(times)} calls, median {statistics.median(times) * 1e3:,.0f} ms, "
                f"max {max(times) * 1e3:,.0f} ms"
            )
        took, body = timed_get(f"{console}/api/destinations")
        print(f"  console list (/api/destinations): {took * 1e3:,.0f} ms, {len(body):,} bytes")
        took, body = timed_get(f"{console}/metrics")
        lines = body.count(b"\n")
        print(f"  /metrics: {took * 1e3:,.0f} ms, {len(body):,} bytes, {lines:,} lines")
        topic = "/topic/scale.fanout"
        figures = subscribers(
            server.port, [topic] * args.subscribers, args.processes, args.window, server.pid,
            lambda: publish(server.port, [topic], args.publish), args.publish,
        )  # fmt: skip
        deliveries = args.subscribers * args.publish
        took = figures["deliver to all s"]
        print(
            f"  topic: {args.subscribers} subscribers in {figures['seconds']:.1f} s, "
            f"{args.publish} messages -> {deliveries:,} deliveries in {took:.2f} s: "
            f"{deliveries / took:,.0f} deliveries/s"
        )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--only", choices=("connections", "destinations"))
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument(
        "--activemq-connections",
        type=int,
        default=1000,
        help="connections (and queues) for the comparison with ActiveMQ (0: none): it keeps\n"
        "about 3 threads per queue, for good (its store remembers the queues), and at 9,700\n"
        "it failed with 'unable to create native thread', the machine's threads used up",
    )
    parser.add_argument("--queues", type=int, default=100_000)
    parser.add_argument("--probe", type=float, default=5.0, help="seconds of receipts")
    parser.add_argument("--subscribers", type=int, default=1_000)
    parser.add_argument("--publish", type=int, default=200, help="messages to the topic")
    parser.add_argument("--processes", type=int, default=2, help="client processes")
    parser.add_argument("--window", type=int, default=200, help="handshakes in flight per process")
    parser.add_argument("--set", action="append", default=[], metavar="GROUP.NAME=VALUE")
    args = parser.parse_args()
    args.set = [*LIMITS, *args.set]
    wiremq = shutil.which("wiremq", path=str(Path(sys.executable).parent))
    assert wiremq is not None, "run with the project's .venv/bin/python"
    print(f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    if args.only in (None, "connections"):
        if not listening(ACTIVEMQ):
            print("ActiveMQ is not running on 127.0.0.1:61613: wiremq only", file=sys.stderr)
        connections(args, wiremq)
    if args.only in (None, "destinations"):
        destinations(args, wiremq)
    return 0


if __name__ == "__main__":
    sys.exit(main())
