"""What an idle queue costs: objects the cyclic garbage collector tracks, and bytes.

A full collection walks every tracked object: with 100,000 queues holding one
message each it held the event loop for 1.5-1.7 s (bench/README.md). This
makes ``--queues`` queues (2,000) in one process, each holding one message
(non-persistent, then as many persistent ones into the real store), through
``path_profile.Simulation`` (a real ``Core`` on a minimal runtime, a producer
whose socket is simulated), and prints per queue what they added: the objects
``gc.get_objects()`` counts, the bytes tracemalloc saw allocated, and the
tracked objects by type (the commonest first). With ``--collect`` it also
times a full ``gc.collect()`` with all of them there.

    .venv/bin/python bench/queue_objects.py
    .venv/bin/python bench/queue_objects.py --queues 100000 --collect --kinds non-persistent
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc
from collections import Counter

from path_profile import Simulation, Writer

from wiremq.server.logging import configure_logging

KINDS = ("non-persistent", "persistent")


def tracked_types() -> Counter[str]:
    """The objects the collector tracks now, by type name."""
    gc.collect()
    return Counter(type(o).__name__ for o in gc.get_objects())


def fill(simulation: Simulation, kind: str, queues: int) -> None:
    """One message to each of ``queues`` new queues, ``kind`` (persistent or not)."""
    producer = simulation.client(f"producer-{kind}", lambda e: Writer(e, False))
    persistent = "persistent:true\n" if kind == "persistent" else ""
    body = b"x" * 128
    batch = 300
    for start in range(0, queues, batch):
        chunk = b"".join(
            f"SEND\ndestination:/queue/{kind}-{n}\n{persistent}content-length:128\n\n".encode()
            + body
            + b"\0"
            for n in range(start, min(start + batch, queues))
        )
        simulation.read(producer, chunk)
        if persistent:
            simulation.synced()
    prefix = f"/queue/{kind}-"
    queues_made = sum(1 for name in simulation.core.destinations.queues if name.startswith(prefix))
    assert queues_made == queues, f"{queues_made} {kind} queues, {queues} sent to"


def measure(simulation: Simulation, kind: str, queues: int, top: int) -> None:
    before = tracked_types()
    tracemalloc.start()
    fill(simulation, kind, queues)
    gc.collect()
    allocated, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    after = tracked_types()
    added = after - before
    total = sum(added.values())
    print(f"{queues:,} queues, one {kind} message each:")
    print(f"  tracked objects per queue: {total / queues:.1f}")
    print(f"  bytes allocated per queue: {allocated / queues:,.0f} (tracemalloc)")
    for name, count in added.most_common(top):
        print(f"    {count / queues:6.2f}  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--queues", type=int, default=2000)
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--top", type=int, default=25, help="types listed per kind")
    parser.add_argument(
        "--collect", action="store_true", help="time a full gc.collect() at the end"
    )
    args = parser.parse_args()
    configure_logging("warning")
    simulation = Simulation(persistent="persistent" in args.kinds)
    for kind in args.kinds:
        measure(simulation, kind, args.queues, args.top)
    if args.collect:
        times = []
        for _ in range(3):
            started = time.perf_counter()
            gc.collect()
            times.append(time.perf_counter() - started)
        tracked = len(gc.get_objects())
        print(
            f"full collection with {tracked:,} tracked objects: "
            f"{min(times) * 1000:,.0f} ms best, {max(times) * 1000:,.0f} ms worst of 3"
        )


if __name__ == "__main__":
    main()
