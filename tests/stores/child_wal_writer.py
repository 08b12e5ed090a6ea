"""Child process for the write-ahead log kill -9 test: commits through ``WalStore`` forever.

Before each commit it prints what it is about to do (lower-case tag) and after
the commit returns, what is now durable (upper-case tag), so the parent knows,
whenever it kills this process, what must be there and what must not:

    a N...   / A N...      queue messages N (queue /queue/qN%3; N%7==0 expire at 1 ms)
    r N...   / R N...      removal (acknowledgement) of queue messages N
    e N...   / E N...      removal of expired queue messages N
    t N...   / T N:SEQ...  topic messages N and their positions
    k SEQ    / K SEQ       durable subscriber c/s acknowledged up to SEQ
    x N M P  / X N M P S   one transaction: queue message N, topic message N (at S),
                           removal of queue message M, and c/s acknowledged up to P

The commits run on the main thread; the store worker's calls (reads, expiry,
catch-up) on a second one in ``run`` mode, as in the server. Each write of a
log record is split in two with a pause between, and each ZODB commit lingers
between writing its data and marking it committed, so that kills often tear a
record or a catch-up commit. ``thread`` mode is ``run`` with the commits made
as the server makes them: decided on the main thread, each record written and
synced by the C sync thread (``server/_syncthread.c``), whose writes are whole.
``backlog`` mode never catches up, so that the log grows (it only appends:
reads catch up first); ``replay`` mode prints OPENING, opens the store (which
replays the log), prints OPENED and waits to be killed.

usage: child_wal_writer.py FOLDER MODE FIRST_NUMBER SEED
"""

from __future__ import annotations

import os
import random
import select
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ZODB.FileStorage import FileStorage

from wiremq.server._syncthread import SyncThread
from wiremq.stores.api import Committed, StoreTransaction
from wiremq.stores.messagestore import WalStore
from wiremq.stores.records import StoredMessage
from wiremq.stores.storage import Location
from wiremq.stores.wal import WriteAheadLog

TOPIC = "/topic/t"
KEY = ("c", "s")
QUEUES = 3


def queue_of(n: int) -> str:
    return f"/queue/q{n % QUEUES}"


def queue_message(n: int, rng: random.Random) -> StoredMessage:
    body = rng.randbytes(rng.randrange(2000))
    return StoredMessage(str(n), queue_of(n), (("n", str(n)),), body, expires=int(n % 7 == 0))


def topic_message(n: int) -> StoredMessage:
    return StoredMessage(str(n), TOPIC, (), b"t" * 100)


def open_store(folder: Path) -> WalStore:
    return WalStore(
        folder / "wal",
        Location((folder / "persqueue.fs").as_uri(), 10.0, 1000),
        Location((folder / "topics.fs").as_uri(), 10.0, 1000),
        segment_bytes=64 * 1024,
        catch_up_bytes=4096,
    )


def tear_writes() -> None:
    """Each record written in two halves, a pause between; each ZODB commit lingers."""
    write, finish = WriteAheadLog._write_record, FileStorage._finish

    def torn_write(self: WriteAheadLog, fd: int, parts: Sequence[bytes], offset: int) -> None:
        record = b"".join(parts)
        half = len(record) // 2
        write(self, fd, (record[:half],), offset)
        time.sleep(0.0005)
        write(self, fd, (record[half:],), offset + half)

    def slow_finish(self: FileStorage, *args: object) -> None:
        time.sleep(0.001)
        finish(self, *args)

    WriteAheadLog._write_record = torn_write  # type: ignore[method-assign]
    FileStorage._finish = slow_finish  # type: ignore[method-assign]


def say(tag: str, *items: object) -> None:
    print(tag, *items, flush=True)


class SyncThreadCommits:
    """Commits in the server's steps: ``begin`` here, the record's write and sync on the
    C sync thread, ``finish`` (or take back and ``abandon``) once it reports."""

    def __init__(self, store: WalStore) -> None:
        self.store = store
        self.notified, notify = os.pipe()
        self.thread = SyncThread(notify)

    def commit(self, transactions: list[StoreTransaction]) -> list[Committed]:
        store = self.store
        pending = store.begin(transactions)
        write = pending.write
        if write is not None and write.in_place:
            self.thread.write(write.fd, write.offset, write.parts)
            select.select([self.notified], [], [])
            os.read(self.notified, 64)
            error = self.thread.result()
            if error:
                failure = store.take_back(pending, OSError(error, os.strerror(error)))
                store.abandon(pending)
                raise failure
        else:  # nothing to write, or a record that starts a segment
            try:
                store.write(pending)
            except BaseException:
                store.abandon(pending)
                raise
        return store.finish(pending)


class Writer:
    def __init__(
        self,
        store: WalStore,
        first: int,
        rng: random.Random,
        commit: Callable[[list[StoreTransaction]], list[Committed]],
    ) -> None:
        self.store = store
        self.rng = rng
        self.numbers = iter(range(first, 2**62))
        self.worker = threading.Lock()  # the store worker's calls, one at a time
        self._commit = commit

    def commit(self, **changes: object) -> tuple[object, ...]:
        (result,) = self._commit([StoreTransaction(**changes)])  # type: ignore[arg-type]
        return (result.positions, result.removed)

    def read(self, destination: str, after_seq: int, limit: int) -> list[tuple[int, StoredMessage]]:
        with self.worker:
            batch = self.store.read(
                destination, now_ms=0, after_seq=after_seq, limit=limit, max_bytes=10**9
            )
        return batch.messages

    def acked(self) -> int:
        (info,) = self.store.subscriptions()
        return info.acked_seq

    def step(self, appends_only: bool) -> None:
        rng = self.rng
        op = rng.random() * (0.7 if appends_only else 1.0)
        if appends_only and 0.35 <= op < 0.55:
            op = 0.0  # no read: reads catch up, and this mode is to leave a long log
        if op < 0.35:
            batch = [next(self.numbers) for _ in range(rng.randrange(1, 20))]
            say("a", *batch)
            self.commit(appends=tuple(queue_message(n, rng) for n in batch))
            say("A", *batch)
        elif op < 0.55:
            name = f"/queue/q{rng.randrange(QUEUES)}"
            found = self.read(name, 0, 20)
            chosen = rng.sample(found, min(len(found), rng.randrange(1, 15)))
            ids = [m.message_id for _, m in chosen]
            say("r", *ids)
            self.commit(removals=tuple((name, seq) for seq, _ in chosen))
            say("R", *ids)
        elif op < 0.7:
            batch = [next(self.numbers) for _ in range(rng.randrange(1, 10))]
            say("t", *batch)
            positions, _ = self.commit(appends=tuple(topic_message(n) for n in batch))
            say("T", *(f"{n}:{seq}" for n, seq in zip(batch, positions, strict=True)))  # type: ignore[call-overload]
        elif op < 0.8:
            replay = self.read(TOPIC, self.acked(), rng.randrange(1, 10))
            if replay:
                upto = replay[-1][0]
                say("k", upto)
                self.commit(acknowledgements=((KEY, upto),))
                say("K", upto)
        elif op < 0.9:
            self.mixed()
        else:
            with self.worker:
                due = self.store.expired("/queue/", 10, 20)
            ids = [m.message_id for _, m in due]
            say("e", *ids)
            self.commit(removals=tuple(position for position, _ in due))
            say("E", *ids)

    def mixed(self) -> None:
        """A queue append, a topic append, a queue removal and an acknowledgement at once."""
        name = f"/queue/q{self.rng.randrange(QUEUES)}"
        victims = self.read(name, 0, 1)
        replay = self.read(TOPIC, self.acked(), 1)
        if not victims or not replay:
            return
        (seq, victim), (upto, _) = victims[0], replay[0]
        n = next(self.numbers)
        line = (n, victim.message_id, upto)
        say("x", *line)
        positions, _ = self.commit(
            appends=(queue_message(n, self.rng), topic_message(n)),
            removals=((name, seq),),
            acknowledgements=((KEY, upto),),
        )
        say("X", *line, positions[1])  # type: ignore[index]

    def catch_up_forever(self) -> None:
        while True:
            with self.worker:
                self.store.catch_up(0.05)
            time.sleep(self.rng.uniform(0, 0.02))


def main(folder: Path, mode: str, first: int, seed: int) -> None:
    tear_writes()
    if mode == "replay":
        say("OPENING")
    store = open_store(folder)
    if mode == "replay":
        say("OPENED")
        time.sleep(60)
        return
    if not store.subscriptions():
        store.commit([StoreTransaction(subscribes=((KEY, TOPIC, ""),))])
    commit = SyncThreadCommits(store).commit if mode == "thread" else store.commit
    writer = Writer(store, first, random.Random(seed), commit)
    if mode in ("run", "thread"):
        threading.Thread(target=writer.catch_up_forever, daemon=True).start()
    say("READY")
    while True:
        writer.step(appends_only=mode == "backlog")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
