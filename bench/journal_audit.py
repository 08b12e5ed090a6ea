"""Both audits on a generated journal of 10**7 events: their times, events/s, peak memory.

The journal is written by the server's own encoder and file writer
(``wiremq.modules.journal``) from records like the hooks make, for a
simulated half hour of a server: non-persistent and persistent queue messages
acknowledged, topic messages fanned out to three auto-mode subscribers, NACKs and
redeliveries, expiring messages removed by cleanup runs every 10 s (queue
store and VolQueueStore), expired messages moved to the dead message queue,
aborted transactions, refusals, and messages left stored (with the snapshot
``wiremq export`` would write for them). Every message's fate is right, so
both audits must pass. Then each audit runs as the ``wiremq audit`` command
on ``--master local[2]``; the bench prints its wall time, events per second,
and the peak resident memory of its processes (the Python driver and Spark's
JVM), sampled every 0.2 s.

    flock /tmp/wiremq-bench.lock .venv/bin/python bench/journal_audit.py
    .venv/bin/python bench/journal_audit.py --events 1000000 --keep /tmp/j1m
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pyarrow.parquet as pq
from server_proc import PeriodicSampler

from wiremq.analytics.export import SCHEMA, _table
from wiremq.config.groups import JournalSettings
from wiremq.config.parameters import REGISTRY
from wiremq.config.settings import Settings
from wiremq.modules.journal import encoding as kinds
from wiremq.modules.journal.encoding import DestinationSwitch, encode
from wiremq.modules.journal.files import JournalFiles
from wiremq.modules.journal.schema import (
    EXPIRED,
    NO_SUBSCRIBERS,
    PERSQUEUE,
    TRANSACTION_ABORTED,
    VOLQUEUE,
)
from wiremq.modules.message import Message

T0 = 1_790_000_000.0  # the simulated server's start (s)
RUN_EVERY = 10.0  # s between two cleanup runs of a store (its cleanupinterval)
RUN_LENGTH = 0.05  # s a run takes
ALL = DestinationSwitch(True, frozenset())


def subscriber(session: str, sub_id: str, ack: str) -> SimpleNamespace:
    return SimpleNamespace(session_id=session, sub_id=sub_id, ack_mode=ack)


class Generator:
    """Records of a simulated server, in batches, and the snapshot of what stays stored."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.n = 0
        self.now = T0
        self.queue_consumers = [subscriber(f"wmq-b-s{i}", "0", "client") for i in range(4)]
        self.fanout = [subscriber(f"wmq-b-t{i}", "0", "auto") for i in range(3)]
        self.removals: dict[tuple[str, int], int] = {}  # (store, run) -> removed
        self.stored: list[tuple[object, ...]] = []  # snapshot rows
        self.lines = 0

    def message(self, destination: str, persistent: bool = False, expires: int = 0) -> Message:
        self.n += 1
        message = Message(f"wmq-bench-{self.n}", destination, {}, b"x" * 128)
        message.persistent = persistent
        message.expires = expires
        message.store_seq = self.n if persistent else 0
        return message

    def removal_run(self, store: str, expires_ms: int) -> tuple[str, float]:
        """The cleanup run that removes a message expiring then, and when."""
        index = int((expires_ms / 1000 - T0) // RUN_EVERY) + 1
        self.removals[(store, index)] = self.removals.get((store, index), 0) + 1
        return f"bench-{store}-{index}", T0 + index * RUN_EVERY + RUN_LENGTH / 2

    def batch(self, messages: int) -> list[tuple[Any, ...]]:
        """The records of ``messages`` more messages (their whole lives)."""
        out: list[tuple[Any, ...]] = []
        add = out.append
        rng = self.rng
        for _ in range(messages):
            self.now += 0.0004
            t = self.now
            kind = rng.random()
            if kind < 0.55:  # a non-persistent queue message, consumed
                m = self.message(f"/queue/q{rng.randrange(8)}")
                sub = rng.choice(self.queue_consumers)
                add((kinds.RECEIVED, t, (m,)))
                add((kinds.DELIVERED, t + 0.001, sub, m))
                add((kinds.ACKNOWLEDGED, t + 0.002, sub, (m,)))
            elif kind < 0.70:  # persistent, consumed
                m = self.message(f"/queue/p{rng.randrange(4)}", persistent=True)
                sub = rng.choice(self.queue_consumers)
                add((kinds.RECEIVED, t, (m,)))
                add((kinds.STORED, t + 0.001, (m,), PERSQUEUE))
                add((kinds.DELIVERED, t + 0.002, sub, m))
                add((kinds.ACKNOWLEDGED, t + 0.003, sub, (m,)))
            elif kind < 0.80:  # a topic message to three auto-mode subscribers
                m = self.message(f"/topic/t{rng.randrange(4)}")
                add((kinds.RECEIVED, t, (m,)))
                for sub in self.fanout:
                    add((kinds.CONSUMED, t + 0.001, sub, (m,)))
            elif kind < 0.85:  # NACKed, redelivered to another consumer, acknowledged
                m = self.message("/queue/nack")
                first, second = rng.sample(self.queue_consumers, 2)
                add((kinds.RECEIVED, t, (m,)))
                add((kinds.DELIVERED, t + 0.001, first, m))
                add((kinds.NACKED, t + 0.002, first, (m,), True))
                add((kinds.REDELIVERED, t + 0.003, second, m))
                add((kinds.ACKNOWLEDGED, t + 0.004, second, (m,)))
            elif kind < 0.90:  # persistent, expired, removed by a run of the queue store
                expires = int((t + rng.uniform(1, 5)) * 1000)
                m = self.message("/queue/expiring", persistent=True, expires=expires)
                run, at = self.removal_run(PERSQUEUE, expires)
                add((kinds.RECEIVED, t, (m,)))
                add((kinds.STORED, t + 0.001, (m,), PERSQUEUE))
                add((kinds.EXPIRED, at, (m,), PERSQUEUE, None, run))
                add((kinds.REMOVED, at, (m,), PERSQUEUE, run))
            elif kind < 0.94:  # non-persistent, expired, removed by the VolQueueStore's sweep
                expires = int((t + rng.uniform(1, 5)) * 1000)
                m = self.message("/queue/volatile", expires=expires)
                run, at = self.removal_run(VOLQUEUE, expires)
                add((kinds.RECEIVED, t, (m,)))
                add((kinds.EXPIRED, at, (m,), VOLQUEUE, None, run))
                add((kinds.REMOVED, at, (m,), VOLQUEUE, run))
            elif kind < 0.96:  # expired, moved to the dead message queue, stays there
                expires = int((t + rng.uniform(1, 5)) * 1000)
                m = self.message("/queue/dead", persistent=True, expires=expires)
                run, at = self.removal_run(PERSQUEUE, expires)
                copy = Message(m.message_id, "/queue/DMQ", {}, m.body)
                copy.persistent, copy.store_seq = True, self.n
                add((kinds.RECEIVED, t, (m,)))
                add((kinds.STORED, t + 0.001, (m,), PERSQUEUE))
                add((kinds.EXPIRED, at, (m,), PERSQUEUE, "/queue/DMQ", run))
                add((kinds.REMOVED, at, (m,), PERSQUEUE, run))
                add((kinds.DEAD_LETTERED, at, (m,), "/queue/DMQ", EXPIRED))
                add((kinds.STORED, at, (copy,), PERSQUEUE))
                add((kinds.RECEIVED, at + 0.001, (copy,)))
                self.keep(copy, 0)
            elif kind < 0.97:  # a transaction aborted
                m = self.message("/queue/tx")
                add((kinds.RECEIVED, t, (m,)))
                add((kinds.DISCARDED, t + 0.01, (m,), TRANSACTION_ABORTED))
            elif kind < 0.98:  # a topic nobody listens to
                m = self.message("/topic/empty")
                add((kinds.RECEIVED, t, (m,)))
                add((kinds.DISCARDED, t, (m,), NO_SUBSCRIBERS))
            elif kind < 0.985:  # refused
                m = self.message("/queue/full", persistent=True)
                add((kinds.REFUSED, t, (m,), "message not accepted: spool quota exceeded"))
                add((kinds.RECEIVED, t, (m,)))
            else:  # persistent, nobody consumes it: still stored at the end
                m = self.message(f"/queue/backlog{rng.randrange(4)}", persistent=True)
                add((kinds.RECEIVED, t, (m,)))
                add((kinds.STORED, t + 0.001, (m,), PERSQUEUE))
                self.keep(m, 0)
        return out

    def keep(self, m: Message, expires: int) -> None:
        self.stored.append(
            (m.message_id, m.destination, PERSQUEUE, m.store_seq, expires, 128, 128, 4, 0)
        )

    def runs(self) -> list[tuple[Any, ...]]:
        """Every cleanup run of both stores over the simulated time, with its removals."""
        out: list[tuple[Any, ...]] = []
        last = int((self.now - T0) // RUN_EVERY) + 2
        for store in (PERSQUEUE, VOLQUEUE):
            size = 500 if store == PERSQUEUE else None
            budget = 1000 if store == PERSQUEUE else None
            for index in range(1, last):
                run, start = f"bench-{store}-{index}", T0 + index * RUN_EVERY
                removed = self.removals.get((store, index), 0)
                out.append(
                    (kinds.CLEANUP_STARTED, start, store, run, int(RUN_EVERY * 1000), budget, size)
                )
                out.append((kinds.CLEANUP_ENDED, start + RUN_LENGTH, store, run, removed, removed))
        return out


def generate(folder: Path, events: int, seed: int) -> tuple[int, Path, float]:
    """Write a journal of about ``events`` events and its snapshot; (events, snapshot, s)."""
    started = time.perf_counter()
    settings = JournalSettings.read(Settings(REGISTRY), "Journal")
    files = JournalFiles(folder / "journal", settings.maxfilesize, "bench")
    generator = Generator(seed)
    written = 0

    def write(records: list[tuple[Any, ...]]) -> int:
        data = encode(records, ALL)
        files.write(data)
        return data.count(b"\n")

    written += write([(kinds.SERVER_STARTED, T0 - 1, "bench")])
    while written < events:
        written += write(generator.batch(20_000))
    written += write(generator.runs())
    written += write([(kinds.SERVER_STOPPED, generator.now + RUN_EVERY, "bench")])
    files.close()
    snapshot = folder / "snapshot.parquet"
    pq.write_table(_table(generator.stored), snapshot, row_group_size=65_536)
    assert _table(generator.stored).schema.equals(SCHEMA)
    return written, snapshot, time.perf_counter() - started


class Peak(PeriodicSampler):
    """The largest resident memory of a process and its children."""

    def __init__(self, pid: int) -> None:
        super().__init__(0.2, "audit-rss")
        self.process = psutil.Process(pid)
        self.peak = 0

    def sample(self) -> None:
        try:
            members = [self.process, *self.process.children(recursive=True)]
            rss = sum(p.memory_info().rss for p in members if p.is_running())
        except psutil.Error:
            return
        self.peak = max(self.peak, rss)


def run_audit(audit: str, folder: Path, master: str) -> tuple[float, int, dict[str, Any]]:
    """One audit as the ``wiremq audit`` command: (seconds, peak bytes, its JSON)."""
    wiremq = shutil.which("wiremq", path=str(Path(sys.executable).parent))
    assert wiremq is not None, "run with the project's .venv/bin/python"
    command = [wiremq, "audit", audit, "--data", str(folder), "--master", master, "--json"]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    with Peak(process.pid) as peak:
        out, _ = process.communicate()
    seconds = time.perf_counter() - started
    return seconds, peak.peak, json.loads(out)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--keep", metavar="DIR", help="generate here and keep it")
    args = parser.parse_args()
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="wiremq-audit-"))
    try:
        if args.keep and (folder / "journal").exists():
            events = sum(
                path.read_bytes().count(b"\n") for path in (folder / "journal").glob("*.jsonl")
            )
            print(f"reusing the journal in {folder}: {events:,} events")
        else:
            events, _, seconds = generate(folder, args.events, args.seed)
            size = sum(p.stat().st_size for p in (folder / "journal").glob("*"))
            print(
                f"generated {events:,} events ({size / 1e6:,.0f} MB of JSON Lines) in "
                f"{seconds:.0f} s: {folder}"
            )
        print(f"{psutil.cpu_count()} CPUs; Spark master {args.master}")
        print("| audit | verdict | seconds | events/s | peak RSS (driver + JVM) |")
        print("|---|---|---|---|---|")
        for audit in ("conservation", "cleanup"):
            seconds, peak, verdict = run_audit(audit, folder, args.master)
            print(
                f"| {audit} | {'ok' if verdict['ok'] else 'FAILED'} | {seconds:.1f} | "
                f"{events / seconds:,.0f} | {peak / 2**20:,.0f} MiB |",
                flush=True,
            )
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
