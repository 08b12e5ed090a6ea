"""What a delivered message costs a queue with selective consumers, in one process.

The same simulated sockets as ``path_profile.py`` (a real ``Core``, no store,
a producer whose SEND frames go in 300 a read, consumers whose MESSAGE frames
are taken as the socket writer takes them), 128-byte non-persistent messages
carrying ``region:EU``, ``price:150`` and ``shard:<n>``. It prints the CPU per
delivered message of the whole path (best of 5 runs) for:

- no selector (the plain way), for reference;
- 1, 10 and 100 competing consumers all with ``region = 'EU' AND price > 100``
  (every message matches every consumer: one selector, evaluated once);
- 1, 10 and 100 consumers that each select their own shard
  (``shard = <n> AND price > 100``: a hundred selectors, indexed by ``shard``);
- each of those again with 100,000 messages that no consumer selects waiting
  in the queue before the run (``region:US``).

    .venv/bin/python bench/selector_cost.py
    .venv/bin/python bench/selector_cost.py --consumers 1,10,100 --waiting 100000
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from path_profile import BUDGET, READ, Simulation

from wiremq.modules.client.egress import Egress
from wiremq.server.cli import collect_less
from wiremq.server.logging import configure_logging

QUEUE = "/queue/q"
SHARED = "region = 'EU' AND price > 100"


class CountingWriter:
    """Takes what the socket writer would, counting the frames."""

    def __init__(self, egress: Egress) -> None:
        egress.writer = self
        self.frames = 0

    def drain(self, egress: Egress) -> None:
        self.frames += len(egress.write_out(BUDGET)) // 2
        if egress.queues.pending:
            egress.outbox.ready.append(egress)


def build(selectors: list[str | None], waiting: int) -> Callable[[int], int]:
    """A core with one consumer per selector (None: no selector) and ``waiting`` messages
    nobody selects already queued; returns ``run(reads) -> messages delivered``."""
    simulation = Simulation()
    writers: list[CountingWriter] = []

    def writer(egress: Egress) -> CountingWriter:
        writers.append(CountingWriter(egress))
        return writers[-1]

    def frame(headers: str) -> bytes:
        return f"SEND\ndestination:{QUEUE}\n{headers}content-length:128\n\n".encode() + b"x" * 128

    producer = simulation.client("producer", writer)
    noise = (frame("region:US\nprice:150\nshard:-1\n") + b"\0") * READ
    for _ in range(waiting // READ):
        simulation.read(producer, noise)
    for n, selector in enumerate(selectors):
        line = "" if selector is None else f"selector:{selector}\n"
        subscribe = f"SUBSCRIBE\nid:0\ndestination:{QUEUE}\nack:auto\n{line}\n\0".encode()
        simulation.read(simulation.client(f"consumer-{n}", writer), subscribe)
    shards = max(1, len(selectors))
    chunk = b"".join(
        frame(f"region:EU\nprice:150\nshard:{i % shards}\n") + b"\0" for i in range(READ)
    )

    def run(reads: int) -> int:
        start = sum(w.frames for w in writers)
        for _ in range(reads):
            simulation.read(producer, chunk)
        return sum(w.frames for w in writers) - start

    return run


def measure(selectors: list[str | None], waiting: int, reads: int) -> float:
    """CPU microseconds per delivered message, best of 5 runs."""
    run = build(selectors, waiting)
    run(10)  # warm-up
    collect_less()
    best = float("inf")
    for _ in range(5):
        started = time.process_time()
        delivered = run(reads)
        assert delivered >= reads * READ, f"{delivered} of {reads * READ} delivered"
        best = min(best, (time.process_time() - started) / delivered)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--consumers", default="1,10,100")
    parser.add_argument("--waiting", type=int, default=100_000)
    parser.add_argument("--reads", type=int, default=100)
    args = parser.parse_args()
    configure_logging("warning")
    counts = [int(c) for c in args.consumers.split(",")]
    print(f"us CPU per delivered 128-byte message, best of 5 runs of {args.reads * READ:,}")
    print()
    print(f"| consumers | selector | nothing waiting | {args.waiting:,} unselected waiting |")
    print("|---|---|---|---|")
    for count in counts:
        plain: list[str | None] = [None] * count
        shared: list[str | None] = [SHARED] * count
        shards: list[str | None] = [f"shard = {n} AND price > 100" for n in range(count)]
        for label, selectors in (
            ("none", plain),
            ("one, shared", shared),
            ("one per consumer (shard)", shards),
        ):
            empty = measure(selectors, 0, args.reads)
            # consumers without a selector take what waits: nothing stays unselected
            full = f"{measure(selectors, args.waiting, args.reads):.2f}" if label != "none" else "-"
            print(f"| {count} | {label} | {empty:.2f} | {full} |", flush=True)


if __name__ == "__main__":
    main()
