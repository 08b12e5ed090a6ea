"""Micro-benchmark of the flow-control hot paths (not a test: pytest does not collect it).

Run: .venv/bin/python bench/egress_micro.py
Prints nanoseconds per operation, the best of several timeit repeats. The
common case is a client that keeps up: its egress queues are empty, and every
message is enqueued and drained straight away.
"""

from __future__ import annotations

import timeit

from wiremq.config.groups import EgressSettings
from wiremq.config.parameters import REGISTRY
from wiremq.config.settings import Settings
from wiremq.modules.flow.egress_queues import (
    EgressQueue,
    EgressQueues,
    Entry,
    TransmitQueue,
    queue_limits,
)
from wiremq.modules.flow.threshold import Gauge

HEAD = b"MESSAGE\nsubscription:0\n"
TAIL = b"destination:/topic/t\nmessage-id:ID:1\n\n" + b"x" * 200 + b"\0"
NUMBER = 200_000
REPEAT = 15


def best_ns(stmt: str, env: dict[str, object], per: int = 1) -> float:
    """The best of REPEAT runs of ``stmt``, in nanoseconds per run (divided by ``per``)."""
    best = min(timeit.repeat(stmt, globals=env, number=NUMBER, repeat=REPEAT))
    return best / NUMBER / per * 1e9


def main() -> None:
    queues = EgressQueues(queue_limits(EgressSettings.read(Settings(REGISTRY), "ClientEgress")))
    transmit = TransmitQueue(65536)

    def counted(entry: Entry, discarded: int) -> None:
        transmit.depth = 0  # as if the socket took it at once: a client keeping up

    env: dict[str, object] = {
        "enqueue": queues.enqueue,
        "drain": queues.drain,
        "D1": EgressQueue.D1,
        "HEAD": HEAD,
        "TAIL": TAIL,
        "always": lambda: True,
        "ignore": lambda entry, discarded: None,
        "has_room": transmit.has_room,
        "counted": counted,
        "ten": range(10),
        "Entry": Entry,
        "gauge": Gauge(100_000, 80_000, 10**9, 8 * 10**8),
    }
    figures = [
        (
            "enqueue + drain, trivial room/write",
            "enqueue(D1, HEAD, TAIL, None)\ndrain(always, ignore)",
        ),
        (
            "enqueue + drain, TransmitQueue",
            "enqueue(D1, HEAD, TAIL, None)\ndrain(has_room, counted)",
        ),
        ("drain of empty queues", "drain(always, ignore)"),
        ("room()/write() callbacks alone", "always()\nignore(None, 0)"),
        ("Entry allocation alone", "Entry(HEAD, TAIL, None, 1)"),
        ("gauge add + remove", "gauge.add(1, 240)\ngauge.remove(1, 240)"),
    ]
    for name, stmt in figures:
        print(f"{name:40} {best_ns(stmt, env):6.0f} ns")
    batch = "for _ in ten: enqueue(D1, HEAD, TAIL, None)\ndrain(always, ignore)"
    print(f"{'10 enqueues + 1 drain, per message':40} {best_ns(batch, env, per=10):6.0f} ns")


if __name__ == "__main__":
    main()
