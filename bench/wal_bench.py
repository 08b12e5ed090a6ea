"""Write-ahead log benchmark: ``WalStore`` alone, on FileStorage, with no server in between.

Prints the machine's sync rate (128 bytes written and fdatasync'ed in a loop,
appended to a growing file and written in place into a prefilled one, as the
log does), then durable commits per second through ``WalStore.commit`` with 1, 8
and 100 messages per commit (each commit one log record, synced), the CPU each
message costs there and in the catch-up that applies it to ZODB later, the
same for a ZODB commit per batch (the store of record alone) for
comparison, acknowledgements (removals), and how long catching up and
replaying at open take for a backlog of messages.

The data folder must be on the disk you mean to measure: by default a
temporary folder in the current directory (``/tmp`` is often a RAM disk, where
a sync costs nothing).

usage: python bench/wal_bench.py [--body BYTES] [--dir PATH] [--seconds S] [--backlog N]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import structlog
from structlog.testing import capture_logs

from wiremq.config.groups import StoreSettings, WalSettings
from wiremq.config.parameters import REGISTRY
from wiremq.config.settings import Settings
from wiremq.stores.api import StoreTransaction
from wiremq.stores.logstore import open_session
from wiremq.stores.messagestore import WalStore
from wiremq.stores.model import LogSet
from wiremq.stores.records import StoredMessage
from wiremq.stores.storage import Location, open_database

DEFAULTS = Settings(REGISTRY)
STORE = StoreSettings.read(DEFAULTS, "PersQueueFileStore")
WAL = WalSettings.read(DEFAULTS, "WriteAheadLog")


def location(path: Path) -> Location:
    """A database opened as the server opens it by default."""
    return Location(path.resolve().as_uri(), STORE.connecttimeout, STORE.indexcachesize)


QUEUE = "/queue/bench"


def messages(prefix: str, count: int, body: bytes) -> tuple[StoredMessage, ...]:
    return tuple(
        StoredMessage(f"{prefix}-{i}", QUEUE, (("persistent", "true"),), body, timestamp=1)
        for i in range(count)
    )


class Measure:
    """Wall time and process CPU (user and system) of a block of work."""

    def __enter__(self) -> Measure:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu


def report(label: str, done: int, took: Measure, unit: str, per: int = 1) -> None:
    """One line: rate, CPU per item (``per`` items per counted one) and totals."""
    cpu = took.cpu / (done * per) * 1e6
    print(
        f"{label:<46} {done / took.wall:>9,.0f} {unit:<10} {cpu:>7.1f} us CPU/msg"
        f"   ({done:,} in {took.wall:.2f} s)"
    )


def sync_probe(folder: Path, seconds: float, prefilled: bool) -> tuple[float, float]:
    """128 bytes written and fdatasync'ed in a loop for ``seconds``: (syncs/s, CPU s/sync)."""
    path = folder / "probe"
    record = b"x" * 128
    size = 16 << 20
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | (0 if prefilled else os.O_APPEND))
    try:
        if prefilled:
            for offset in range(0, size, 1 << 20):
                os.pwrite(fd, bytes(1 << 20), offset)
            os.fsync(fd)
        done = 0
        with Measure() as took:
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline and (done + 1) * len(record) < size:
                if prefilled:
                    os.pwrite(fd, record, done * len(record))
                else:
                    os.write(fd, record)
                os.fdatasync(fd)
                done += 1
    finally:
        os.close(fd)
        path.unlink()
    return done / took.wall, took.cpu / done


def sync_probes(folder: Path, seconds: float) -> None:
    """Both ways of writing, twice each, alternating (a shared disk's rate wanders)."""
    runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for _ in range(2):
        for prefilled in (False, True):
            runs[prefilled].append(sync_probe(folder, seconds / 2, prefilled))
    for prefilled, label in ((False, "growing file, O_APPEND"), (True, "prefilled file, pwrite")):
        rate, cpu = max(runs[prefilled])
        print(
            f"{'sync probe: ' + label + ' + fdatasync':<46} {rate:>9,.0f} syncs/s   "
            f"{cpu * 1e6:>7.1f} us CPU/sync  (best of 2)"
        )


def open_wal(folder: Path) -> WalStore:
    folder = folder.resolve()
    return WalStore(
        folder / "wal",
        location(folder / "q.fs"),
        location(folder / "t.fs"),
        segment_bytes=WAL.segmentsize,
        catch_up_bytes=WAL.catchupsize,
    )


def commit_loop(store: WalStore, seconds: float, per_commit: int, body: bytes) -> int:
    """Durable commits of ``per_commit`` messages for about ``seconds``; how many."""
    batch = StoreTransaction(appends=messages("m", per_commit, body))
    done = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        store.commit([batch])
        done += 1
    return done


def facade(folder: Path, seconds: float, body: bytes) -> None:
    store = open_wal(folder)
    try:
        store.commit([StoreTransaction(appends=messages("warm-up", 1, body))])
        store.catch_up(60)
        for per_commit in (1, 8, 100):
            with Measure() as took:
                done = commit_loop(store, seconds, per_commit, body)
            report(f"WalStore.commit, {per_commit} per commit", done, took, "commits/s", per_commit)
            with Measure() as applied:
                store.catch_up(3600)
            msgs = done * per_commit
            print(
                f"{'  its catch-up into ZODB':<46} {msgs / applied.wall:>9,.0f} msgs/s     "
                f"{applied.cpu / msgs * 1e6:>7.1f} us CPU/msg   ({msgs:,} in {applied.wall:.2f} s)"
            )
        acknowledge(store, seconds)
    finally:
        store.close()


def acknowledge(store: WalStore, seconds: float) -> None:
    """Remove what the queue holds, 8 positions per commit."""
    total = store.count(QUEUE)[0]
    batch = store.read(QUEUE, now_ms=2, after_seq=0, limit=total, max_bytes=1 << 62)
    positions = [(QUEUE, seq) for seq, _ in batch.messages]
    done = 0
    with Measure() as took:
        deadline = time.perf_counter() + seconds
        while done * 8 < len(positions) and time.perf_counter() < deadline:
            store.commit([StoreTransaction(removals=tuple(positions[done * 8 : done * 8 + 8]))])
            done += 1
    report("WalStore.commit, acknowledge 8 per commit", done, took, "commits/s", 8)


def zodb_commits(folder: Path, seconds: float, body: bytes) -> None:
    """For comparison, the store of record alone: one ZODB commit per batch, as the
    server made before the write-ahead log."""
    db = open_database(location(folder / "zodb.fs"))
    session = open_session(db, "persqueue", LogSet)
    try:
        for per_commit in (1, 8):
            batch = list(messages("z", per_commit, body))
            done = 0
            with Measure() as took:
                deadline = time.perf_counter() + seconds
                while time.perf_counter() < deadline:
                    with session.write(f"append {per_commit}") as root:
                        first = root.log("/queue/z").last_seq + 1
                        items = list(enumerate(batch, start=first))
                        root.append_at("/queue/z", items, items[-1][0])
                    done += 1
            label = f"ZODB commit (no log), {per_commit} per commit"
            report(label, done, took, "commits/s", per_commit)
    finally:
        session.close()
        db.close()


def backlog(folder: Path, count: int, body: bytes) -> None:
    """``count`` messages committed 8 at a time and left in the log: catch-up, then the
    same again left behind by a crash and replayed at open."""
    for crash in (False, True):
        where = folder / ("replay" if crash else "catch-up")
        store = open_wal(where)
        batch = [StoreTransaction(appends=messages("b", 8, body))]
        for _ in range(count // 8):
            store.commit(batch)
        if not crash:
            with Measure() as took:
                store.catch_up(3600)
            store.close()
            label = f"catch-up of {count:,} messages (8 per record)"
        else:
            store._close_all()  # as a kill -9 leaves it
            with Measure() as took, capture_logs():
                store = open_wal(where)
            store.close()
            label = f"replay at open of {count:,} messages"
        report(label, count // 8 * 8, took, "msgs/s")
    with Measure() as took, capture_logs():  # the in-memory index, from block bookkeeping
        store = open_wal(where)
    store._close_all()
    report(f"open with {count:,} messages stored", count // 8 * 8, took, "msgs/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--body", type=int, default=128, help="body bytes per message")
    parser.add_argument("--dir", type=Path, help="data folder (default: a temporary one here)")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each rate run")
    parser.add_argument("--backlog", type=int, default=100_000, help="messages to catch up")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))  # warnings
    if args.dir:
        args.dir.mkdir(parents=True, exist_ok=True)
        run(args.dir, args)
    else:
        with tempfile.TemporaryDirectory(prefix="wiremq-wal-bench-", dir=".") as folder:
            run(Path(folder), args)


def run(folder: Path, args: argparse.Namespace) -> None:
    body = b"x" * args.body
    where = f"{folder.resolve()} ({filesystem(folder)})"
    print(f"data in {where}, {args.body} B bodies, {os.cpu_count()} cores")
    sync_probes(folder, args.seconds)
    facade(folder / "facade", args.seconds, body)
    zodb_commits(folder, args.seconds, body)
    backlog(folder, args.backlog, body)


def filesystem(folder: Path) -> str:
    """The type of the file system holding ``folder`` (Linux), for the report."""
    best, kind = "", "unknown file system"
    target = str(folder.resolve())
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            _, mount, fstype, *_ = line.split()
            if target.startswith(mount) and len(mount) > len(best):
                best, kind = mount, fstype
    except OSError:
        pass
    return kind


if __name__ == "__main__":
    main()
