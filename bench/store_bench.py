"""Store benchmark: the ZODB stores alone, on FileStorage, with no server in between.

Prints commits/s at one message per commit (the fsync bound), msgs/s at 100 and
500 messages per commit (group commit), the read-back rate, the acknowledge
(remove) rate, a durable replay, and one cleanup sweep over 100,000 expired
messages.

usage: python bench/store_bench.py [--body BYTES] [--dir PATH] [--sweep N]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from wiremq.stores.persqueue import PersQueueStore
from wiremq.stores.records import StoredMessage
from wiremq.stores.storage import open_database
from wiremq.stores.topicstore import TopicStore

QUEUE = "/queue/bench"
TOPIC = "/topic/bench"


def messages(
    prefix: str, count: int, body: bytes, destination: str = QUEUE, expires: int = 0
) -> list[StoredMessage]:
    return [
        StoredMessage(
            f"{prefix}-{i}",
            destination,
            (("persistent", "true"),),
            body,
            expires=expires,
            timestamp=1,
        )
        for i in range(count)
    ]


def timed(work: Callable[..., int], *args: object) -> tuple[int, float]:
    """Run ``work(*args)`` (returning how many things it did); returns that count and seconds."""
    start = time.perf_counter()
    done = work(*args)
    return done, time.perf_counter() - start


def report(label: str, done: int, seconds: float, unit: str) -> None:
    print(f"{label:<44} {done / seconds:>12,.0f} {unit:<10} ({done:,} in {seconds:.2f} s)")


def fill(store: PersQueueStore, prefix: str, total: int, per_commit: int, body: bytes) -> int:
    batch = messages(prefix, per_commit, body)
    for _ in range(total // per_commit):
        store.append(batch)
    return total - total % per_commit


def drain(store: PersQueueStore, per_read: int) -> int:
    """Read the whole queue back in batches, as a consumer catching up would."""
    after, read = 0, 0
    while True:
        batch = store.read(QUEUE, now_ms=2, after_seq=after, limit=per_read, max_bytes=2**30)
        read += len(batch.messages)
        after = batch.last_seq
        if batch.at_end:
            return read


def acknowledge(store: PersQueueStore, per_commit: int) -> int:
    removed, after = 0, 0
    while True:
        batch = store.read(QUEUE, now_ms=2, after_seq=after, limit=per_commit)
        if not batch.messages:
            return removed
        removed += store.remove(QUEUE, [seq for seq, _ in batch.messages])
        after = batch.last_seq


def replay(topics: TopicStore, per_batch: int) -> int:
    after, read = 0, 0
    while True:
        batch = topics.replay(
            "bench", "sub", now_ms=2, after_seq=after, max_messages=per_batch, max_bytes=2**30
        )
        read += len(batch.messages)
        after = batch.last_seq
        if batch.at_end:
            return read


def sweep_all(store: PersQueueStore, expected: int) -> int:
    result = store.sweep_expired(2, max_messages=expected, max_seconds=3600, transaction_size=500)
    return len(result.removed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--body", type=int, default=128, help="body bytes per message")
    parser.add_argument("--dir", type=Path, help="data folder (default: a temporary one)")
    parser.add_argument("--sweep", type=int, default=100_000, help="expired messages to sweep")
    args = parser.parse_args()
    if args.dir:
        run(args.dir, b"x" * args.body, args.sweep)
    else:
        with tempfile.TemporaryDirectory(prefix="wiremq-bench-") as folder:
            run(Path(folder), b"x" * args.body, args.sweep)


def run(folder: Path, body: bytes, sweep: int) -> None:
    db = open_database((folder / "Data.fs").resolve().as_uri())
    queue, topics = PersQueueStore(db), TopicStore(db)
    print(f"FileStorage in {folder}, {len(body)} B bodies")

    report("append, 1 message per commit", *timed(fill, queue, "one", 2_000, 1, body), "commits/s")
    for per_commit in (100, 500):
        done, seconds = timed(fill, queue, f"b{per_commit}", 50_000, per_commit, body)
        report(f"append, {per_commit} messages per commit", done, seconds, "msgs/s")
    report("read back, 500 per read", *timed(drain, queue, 500), "msgs/s")
    report("acknowledge (remove), 100 per commit", *timed(acknowledge, queue, 100), "msgs/s")

    topics.subscribe("bench", "sub", TOPIC)
    for i in range(0, 100_000, 500):
        topics.append(messages(f"t{i}", 500, body, TOPIC))
    report("durable replay of 100,000, 100 per batch", *timed(replay, topics, 100), "msgs/s")

    for i in range(0, sweep, 500):
        queue.append(messages(f"e{i}", min(500, sweep - i), body, expires=1))
    report(f"sweep of {sweep:,} expired, 500 per commit", *timed(sweep_all, queue, sweep), "msgs/s")
    print(f"database file: {(folder / 'Data.fs').stat().st_size / 2**20:,.0f} MiB (unpacked)")
    db.close()


if __name__ == "__main__":
    main()
